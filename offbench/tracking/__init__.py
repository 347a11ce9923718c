"""Tracked runs: the run directory (docs/run-directory.md) and logger back-ends."""
