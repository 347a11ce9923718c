"""Dataset commands of the CLI that live with the data layer (wired into offbench/cli.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional, cast

import typer

from offbench.errors import OffbenchError


def export(
    id_or_path: str = typer.Argument(..., help="Dataset id or path (any format offbench reads)."),
    format: str = typer.Option(..., "--format", help="minari | d4rl | offbench"),
    out: Path = typer.Option(..., "--out", help="Folder to write into (for minari: the datasets root)."),
) -> None:
    """Write a dataset in a peer's format (never replaces an existing dataset)."""
    from offbench.data.formats import FORMATS
    from offbench.data.resolve import open_dataset
    from offbench.data.store import EpisodeStore

    if format not in FORMATS:
        raise OffbenchError(f"unknown format '{format}' (known: {', '.join(FORMATS)})")
    dataset = open_dataset(id_or_path)
    store = dataset.store
    if not store.card.get("id"):  # data generated before ids were embedded: named as opened (the registered id)
        store.card = {**store.card, "id": dataset.id}
    if not isinstance(store, EpisodeStore):  # read in place
        raise OffbenchError(
            f"{store.path}: {store.num_transitions:,} transitions read in place; offbench does not convert such a dataset to another format"
        )
    target = FORMATS[format].export(store, out)
    typer.echo(f"wrote {format}: {target} ({store.num_episodes:,} episodes, {store.num_transitions:,} transitions)")


import_app = typer.Typer(help="Bring a dataset published in a seed paper's own layout into offbench's format.", no_args_is_help=True)


@import_app.command("mtdiff")
def import_mtdiff_command(
    source: str = typer.Argument(
        ..., help="Folder of task folders with {i}.npz episodes, or a .zip/.tar(.gz) of one (path or http(s) URL)."
    ),
    out: Optional[Path] = typer.Option(None, help="Write DIR/data.h5 and DIR/card.toml here instead of registering under OFFBENCH_HOME."),
    dataset_id: Optional[str] = typer.Option(None, "--id", help="Dataset id (default: imported/mtdiff-<folder name>)."),
    episodes: Optional[int] = typer.Option(
        None, help="Episodes per task, files 0..N-1 (HarmoDT: 2000 near-optimal, 1000 sub-optimal; default: all)."
    ),
    tasks: Optional[str] = typer.Option(None, help="Comma-separated task folders (default: every one)."),
    quality: Optional[str] = typer.Option(None, help="Label for the card, e.g. near-optimal or sub-optimal."),
) -> None:
    """MTDiff's Meta-World data (HarmoDT's training data) as a native multi-task dataset with its card."""
    from offbench.data.cards import card_from_dict, write_card
    from offbench.data.mtdiff import import_mtdiff
    from offbench.data.resolve import native_path
    from offbench.paths import user_cards_dir

    remote = source.startswith(("http://", "https://"))
    origin = source if remote else str(Path(source).expanduser().resolve())
    name = Path(origin.rstrip("/")).name.split(".")[0]
    card_data = {
        "id": dataset_id or f"imported/mtdiff-{name}",
        "description": f"MTDiff Meta-World data imported from {origin}" + (f" ({quality})" if quality else ""),
        "format": "offbench",
        "kind": "multi-task",
        "citation": "He et al. (2023), Diffusion Model is an Effective Planner and Data Synthesizer for Multi-Task Reinforcement Learning, NeurIPS (MTDiff data); Hu et al. (2024), HarmoDT, ICML",
        "source": {"import": {"format": "mtdiff", "from": origin, **({"episodes": episodes} if episodes else {})}},
    }
    stub = card_from_dict(card_data)
    data_path = out / "data.h5" if out else native_path(stub)
    card_path = out / "card.toml" if out else user_cards_dir() / f"{stub.id}.toml"
    for existing in (data_path, card_path) if out else (data_path,):  # a registered card whose data is gone is re-imported
        if existing.exists():
            raise OffbenchError(f"{existing}: already exists; remove it or choose another --out / --id")
    task_list = [t.strip() for t in tasks.split(",") if t.strip()] if tasks else None
    if remote:
        store = _import_from_url(source, lambda archive: import_mtdiff(archive, episodes, task_list))
    else:
        store = import_mtdiff(source, episodes, task_list)
    card = card_from_dict({**card_data, **({"quality": quality} if quality else {}), **store.card})
    store.card = card.to_dict()
    store.save(data_path)
    write_card(card, card_path)
    env_kwargs = cast(dict[str, Any], card.env.kwargs)  # import_mtdiff's card always lists its tasks there
    typer.echo(
        f"{card.id}: {data_path} ({len(env_kwargs['tasks'])} tasks, {store.num_episodes:,} episodes, "
        f"{store.num_transitions:,} steps, env {card.env.id}); card {card_path}"
    )


def _import_from_url(url: str, read):
    """Download an archive (resumable, size and sha256 checked as any download) to a temporary folder, then read it."""
    import tempfile

    import requests
    from rich.progress import Progress

    from offbench.data.download import RemoteFile, fetch_file
    from offbench.data.mtdiff import ARCHIVES

    name = url.rstrip("/").rsplit("/", 1)[-1]
    if not name.endswith(ARCHIVES):
        raise OffbenchError(f"{url}: not an archive ({', '.join(ARCHIVES)}); download the folder and import it from disk")
    with (
        tempfile.TemporaryDirectory(prefix="offbench-import-") as folder,
        requests.Session() as session,
        Progress(disable=True) as progress,
    ):
        path, _ = fetch_file(session, RemoteFile(url, name), Path(folder), None, progress)  # a one-off copy: no checksum to record
        return read(path)
