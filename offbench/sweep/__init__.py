"""Sweeps: a TOML spec expanded to runs (`spec`), executed locally or on Ray (`executors`), driven
resumably with retries and a live table (`runner`); `offbench sweep` is in `commands`."""
