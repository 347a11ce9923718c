"""Dataset commands of the CLI that live with the data layer (wired into offbench/cli.py)."""

from __future__ import annotations

from pathlib import Path

import typer

from offbench.errors import OffbenchError


def export(
    id_or_path: str = typer.Argument(..., help="Dataset id or path (any format offbench reads)."),
    format: str = typer.Option(..., "--format", help="minari | d4rl | offbench"),
    out: Path = typer.Option(..., "--out", help="Folder to write into (for minari: the datasets root)."),
) -> None:
    """Write a dataset in a peer's format (never replaces an existing dataset)."""
    from offbench.data.formats import FORMATS
    from offbench.data.resolve import resolve

    if format not in FORMATS:
        raise OffbenchError(f"unknown format '{format}' (known: {', '.join(FORMATS)})")
    store = resolve(id_or_path)
    if getattr(store, "read_in_place", False):
        raise OffbenchError(f"{store.path}: {store.num_transitions:,} transitions read in place; offbench does not convert such a dataset to another format")
    target = FORMATS[format].export(store, out)
    typer.echo(f"wrote {format}: {target} ({store.num_episodes:,} episodes, {store.num_transitions:,} transitions)")
