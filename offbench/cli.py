"""The `offbench` command line (Typer). Exit codes: 0 success, 2 bad input (one line on stderr), 1 other."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Optional, cast

try:  # typer >= 0.24 vendors click: the usage errors it raises are typer._click's, not click's
    from typer import _click as click
except ImportError:
    import click
import typer
from rich.console import Console
from rich.table import Table

from offbench.errors import OffbenchError

if TYPE_CHECKING:
    from offbench.data.cards import DatasetCard
    from offbench.data.store import EpisodeStore, InPlaceStore

app = typer.Typer(
    name="offbench",
    help="Benchmark offline and in-context RL: datasets, generators, baselines, leaderboards.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
console = Console()


def _print_version(value: bool) -> None:
    if value:
        from offbench import __version__

        typer.echo(f"offbench {__version__}")
        raise typer.Exit()


@app.callback()
def main_options(
    version: bool = typer.Option(False, "--version", callback=_print_version, is_eager=True, help="Print offbench's version and exit."),
) -> None:
    """Benchmark offline and in-context RL: datasets, generators, baselines, leaderboards."""


@app.command("list")
def list_datasets(
    kind: Optional[str] = typer.Option(None, help="Only cards of this kind (offline, learning-history, multi-task)."),
) -> None:
    """Registered datasets (cards), one line each."""
    from offbench.data.cards import all_cards
    from offbench.data.resolve import is_local

    every = all_cards().values()
    kinds = sorted({card.kind for card in every})
    if kind and kind not in kinds:
        raise OffbenchError(f"--kind {kind!r}: no dataset of that kind (kinds: {', '.join(kinds)})")
    cards = [card for card in every if not kind or card.kind == kind]
    width = max((len(card.id) for card in cards), default=2)
    typer.echo(f"{'id':<{width}}  {'kind':<16}  {'source':<9}  {'local':<5}  description")
    for card in cards:
        local = "yes" if is_local(card) else ""
        summary = card.description.splitlines()[0]
        typer.echo(f"{card.id:<{width}}  {card.kind:<16}  {card.source_kind:<9}  {local:<5}  {summary[:80]}")


def _describe(id_or_path: str) -> tuple[EpisodeStore | InPlaceStore, str, DatasetCard | None]:
    """(store, format name, card or None) for an id or path, fetching registered data if needed.
    For a registered id the format named is the published one (the card's), not the native copy's."""
    from offbench.data.resolve import open_dataset

    found = open_dataset(id_or_path)
    if found.card is not None and not Path(id_or_path).exists():
        return found.store, found.card.format, found.card
    return found.store, found.format, found.card


@app.command()
def info(id_or_path: str = typer.Argument(..., help="Dataset id or path.")) -> None:
    """Card, format found, episodes, transitions, spaces, checksum."""
    from offbench.data.store import EpisodeStore

    store, fmt, card = _describe(id_or_path)
    if not isinstance(store, EpisodeStore):  # read in place: the store describes itself
        _print_rows([("id", card.id if card else "-"), ("format found", fmt), *store.summary_rows()])
        return
    lengths = store.episode_lengths
    returns = store.episode_returns()
    rows = [
        ("id", (card.id if card else store.card.get("id", "-"))),
        ("format found", fmt),
        ("file", str(store.path)),
        ("episodes", f"{store.num_episodes:,}"),
        ("transitions", f"{store.num_transitions:,}"),
        ("episode length", f"min {lengths.min()}  mean {lengths.mean():.1f}  max {lengths.max()}"),
        ("terminations / truncations", f"{int(store.terminations.sum()):,} / {int(store.truncations.sum()):,}"),
        ("episode return", _spread(returns)),
        ("observation space", str(store.observation_space)),
        ("action space", str(store.action_space)),
        ("extra columns", ", ".join(sorted(store.columns)) or "-"),
        ("content sha256", store.content_sha256()),
    ]
    made = store.card.get("made_on")
    if isinstance(made, dict):  # a generated dataset: the bytes repeat on these SIMD kernels
        simd = made.get("numpy_simd")
        numpy_kernels = "+".join(map(str, simd)) if isinstance(simd, list) else simd
        mkl = f", MKL {made['mkl_branch']}" if made.get("mkl_branch") else ""
        rows.append(("made on", f"{made.get('cpu')} (torch {made.get('torch_cpu_capability')} kernels, numpy {numpy_kernels}{mkl})"))
    if card is not None:
        rows.insert(1, ("description", card.description))
        if card.env.id is not None:
            rows.append(("environment", f"{card.env.id} ({card.env.suite or 'gymnasium'})"))
        if card.ref_min_score is not None:
            rows.append(("reference scores", f"min {card.ref_min_score}  max {card.ref_max_score}"))
            # where the data's best episodes stand on the leaderboards' scale: what a learner would beat
            rows.append(("normalised return", _spread(card.normalise(returns), digits=1)))
    _print_rows(rows)


def _spread(values, digits: int = 3) -> str:
    """Mean, min, the 10th / 50th / 90th percentiles and max, on one line."""
    import numpy as np

    p10, p50, p90 = np.percentile(values, [10, 50, 90])
    return (
        f"mean {values.mean():.{digits}f}  min {values.min():.{digits}f}  "
        f"p10 / p50 / p90 {p10:.{digits}f} / {p50:.{digits}f} / {p90:.{digits}f}  max {values.max():.{digits}f}"
    )


def _print_rows(rows: list[tuple[str, object]]) -> None:
    table = Table(box=None, show_header=False)
    table.add_column(style="bold")
    table.add_column()
    for key, value in rows:
        table.add_row(key, str(value))
    console.print(table)


@app.command()
def verify(
    id_or_path: str = typer.Argument(..., help="Dataset id or path."),
    full: bool = typer.Option(False, "--full", help="XLand files: decompress and check every chunk (else a sample)."),
) -> None:
    """Recompute checksums and structural checks."""
    from offbench.data.store import EpisodeStore, is_native, stored_checksum

    store, fmt, card = _describe(id_or_path)
    if not isinstance(store, EpisodeStore):  # read in place: the file's sha256: the card's, else the first download's record
        from offbench.data.download import SUMS_FILE, read_sums

        files = (card.source.files or []) if card else []
        expected, source = (files[0].sha256 if len(files) == 1 else None), "the card"
        if expected is None:
            path = cast(Path, store.path)  # a store read in place is the file it was opened from (InPlaceStore)
            expected, source = read_sums(path.parent).get(path.name), f"recorded in {path.parent / SUMS_FILE}"
        console.print(store.verify(expected, source, full=full))
        return
    store.validate()
    recomputed = store.content_sha256()
    if store.path is not None and is_native(store.path):  # a registered dataset's native copy included
        recorded = stored_checksum(store.path)
        if recorded is not None and recorded != recomputed:
            raise OffbenchError(f"{store.path}: content checksum mismatch (recorded {recorded[:12]}..., now {recomputed[:12]}...)")
    console.print(f"ok: {store.path} ({fmt}, {store.num_episodes:,} episodes, {store.num_transitions:,} transitions, sha256 {recomputed})")


@app.command()
def download(
    dataset_id: str = typer.Argument(..., help="Registered dataset id (see `offbench list`)."),
    mirror: Optional[str] = typer.Option(None, envvar="OFFBENCH_MIRROR", help="Base URL replacing scheme and host of every source URL."),
    root: Optional[Path] = typer.Option(None, help="Use DIR as $OFFBENCH_HOME for this call (its data and its user cards)."),
) -> None:
    """Fetch (or generate, for a recipe card), verify, and print the local path."""
    from offbench.data.resolve import download as fetch

    if root is not None:
        os.environ["OFFBENCH_HOME"] = str(root.expanduser().resolve())
    typer.echo(str(fetch(dataset_id, mirror=mirror)))


from offbench.data.commands import export, import_app  # noqa: E402

app.command("export")(export)
app.add_typer(import_app, name="import")
from offbench.data.cache import cache_app  # noqa: E402

app.add_typer(cache_app, name="cache")

generate_app = typer.Typer(help="Make a dataset (learning histories, multi-task data) and register it.", no_args_is_help=True)
app.add_typer(generate_app, name="generate")
from offbench.generators.commands import add_history_commands  # noqa: E402

add_history_commands(generate_app)

from offbench.training.commands import evaluate_command, run_app  # noqa: E402

app.add_typer(run_app, name="run")
app.command("evaluate")(evaluate_command)

from offbench.leaderboard.commands import leaderboard_app, submit  # noqa: E402
from offbench.plotting.commands import plot  # noqa: E402

app.command("submit")(submit)
app.add_typer(leaderboard_app, name="leaderboard")
app.command("plot")(plot)

from offbench.sweep.commands import sweep  # noqa: E402

app.command("sweep")(sweep)


@app.command()
def quickstart(
    out: Path = typer.Option(Path("runs/quickstart"), "--out", help="Folder for everything the walk-through makes (must be new or empty)."),
    steps: int = typer.Option(1_000, "--steps", min=1, help="Updates per training run."),
) -> None:
    """The main job end to end on a small default: data, sampling, training, evaluation, leaderboard, figures."""
    from offbench.quickstart import quickstart as walk_through

    walk_through(out, steps=steps)


from offbench.generators import multitask_cli  # noqa: E402  (light: Typer options only)

generate_app.command("metaworld")(multitask_cli.generate_metaworld)
generate_app.command("minigrid")(multitask_cli.generate_minigrid)
from offbench.generators.learned_cli import add_commands as add_learned_commands  # noqa: E402

add_learned_commands(generate_app)


def main(argv: list[str] | None = None) -> None:
    """Entry point: turns OffbenchError into one line on stderr and exit code 2."""
    err = Console(stderr=True)
    try:
        code = app(args=argv, standalone_mode=False)  # a typer.Exit(n) comes back as n here
    except OffbenchError as exc:
        err.print(f"offbench: error: {exc}", highlight=False, markup=False, soft_wrap=True)
        sys.exit(2)
    except OSError as exc:  # the safety net for a path the user gave that no check caught (a name too long, ...)
        from offbench.utils import USER_FIXABLE_ERRNOS, os_error_number

        number = os_error_number(exc)
        if number not in USER_FIXABLE_ERRNOS or not exc.filename:
            raise
        err.print(f"offbench: error: {exc.filename}: {os.strerror(number)}", highlight=False, markup=False, soft_wrap=True)
        sys.exit(2)
    except click.exceptions.UsageError as exc:
        err.print(f"offbench: error: {exc.format_message()}", highlight=False, markup=False, soft_wrap=True)
        sys.exit(2)
    except typer.Abort:  # typer.Abort / typer.Exit: the classes typer raises, vendored click or not
        err.print("offbench: aborted")
        sys.exit(1)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
