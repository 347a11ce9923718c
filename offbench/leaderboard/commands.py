"""`offbench submit` and `offbench leaderboard show|build|render` (wired into offbench/cli.py)."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from offbench.errors import OffbenchError

if TYPE_CHECKING:  # loaded by the commands that use it: every other CLI call imports this module
    from offbench.leaderboard.spec import BenchmarkSpec

console = Console()
err_console = Console(stderr=True)
leaderboard_app = typer.Typer(
    help="Leaderboard tables: show in the terminal, build results.json, render Markdown + HTML.", no_args_is_help=True
)

ROOT_OPTION = typer.Option(
    None, "--root", envvar="OFFBENCH_LEADERBOARDS", help="Folder of benchmarks (default: the checkout's leaderboards/)."
)
RUNS_OPTION = typer.Option(None, "--runs", help="Also show these run directories (or folders of runs), not yet submitted.")


def submit(
    run_dirs: list[Path] = typer.Argument(..., help="Run directories, or folders holding run directories."),
    benchmark: str = typer.Option(..., "--benchmark", "-b", help="Benchmark name (a folder of leaderboards/)."),
    label: Optional[str] = typer.Option(None, help="Row name (default: the baseline's name); use it for a variant config."),
    render: bool = typer.Option(True, "--render/--no-render", help="Re-render README.md, index.html and figures after accepting."),
    verify: bool = typer.Option(
        False, "--verify", help="Replay each run's final evaluation from its checkpoint; the entry is marked verified."
    ),
    allow_dirty: bool = typer.Option(
        False,
        "--allow-dirty",
        help="Admit runs made from uncommitted code or at different commits; the entry's provenance is marked on the page.",
    ),
    root: Optional[Path] = ROOT_OPTION,
) -> None:
    """Validate runs against a benchmark and add them to its leaderboard (refusals name the rule that failed)."""
    from offbench.leaderboard.spec import load_spec
    from offbench.leaderboard.submit import submit as submit_runs
    from offbench.tracking.read_run import expand_run_dirs

    spec = load_spec(benchmark, root)
    written = submit_runs(spec, expand_run_dirs(run_dirs), label=label, render=render, verify=verify, allow_dirty=allow_dirty)
    for path in written:
        console.print(f"accepted: {path}", highlight=False, markup=False, soft_wrap=True)
    if render:
        console.print(
            f"rendered: {spec.folder / 'README.md'} and {spec.folder / 'index.html'}", highlight=False, markup=False, soft_wrap=True
        )


def _preview_entries(spec: BenchmarkSpec, paths: list[Path], with_entries: bool) -> list[dict[str, Any]]:
    """Entries for unsubmitted runs that pass every rule; each refused run or group is reported and left out."""
    from offbench.leaderboard.entries import load_entries
    from offbench.leaderboard.submit import check_against_accepted, check_run, validate_runs
    from offbench.tracking.read_run import Refused, expand_run_dirs, read_run

    accepted = load_entries(spec) if with_entries else []
    groups: dict[tuple[str, str], list] = defaultdict(list)
    for path in expand_run_dirs(paths):
        try:
            run = read_run(path)
            check_run(run, spec)
            groups[(run.baseline, run.dataset_id)].append(run)
        except Refused as exc:
            err_console.print(f"not shown: {exc}", highlight=False, markup=False, soft_wrap=True)
    entries = []
    for members in groups.values():
        try:
            for entry in validate_runs(spec, members, allow_dirty=True):  # a preview shows the entry's provenance, it does not judge it
                check_against_accepted(entry, accepted)
                entries.append(entry)
        except Refused as exc:
            err_console.print(f"not shown: {exc}", highlight=False, markup=False, soft_wrap=True)
    return entries


def _board(spec: BenchmarkSpec, runs: Optional[list[Path]]):
    """The accepted entries (and previewed runs) as a Board; callers that write from it hold spec.lock."""
    from offbench.leaderboard.render import build_board

    previews = _preview_entries(spec, runs, with_entries=True) if runs else []
    return build_board(spec, previews)


def _require_out_for_preview(runs: Optional[list[Path]], out: Optional[Path]) -> None:
    if runs and out is None:
        raise OffbenchError("--runs previews runs that were not submitted: give --out so the accepted leaderboard is left as it is")


@leaderboard_app.command("show")
def show(
    benchmark: str = typer.Argument(..., help="Benchmark name."),
    runs: Optional[list[Path]] = RUNS_OPTION,
    root: Optional[Path] = ROOT_OPTION,
    format: str = typer.Option(
        "table",
        "--format",
        "-f",
        help="table (the terminal's, default), or markdown, csv, latex: "
        "the main table and the per-task tables as text to paste or redirect.",
    ),
) -> None:
    """The table in the terminal: mean [95% interval] (n seeds) per baseline and dataset, then the aggregates."""
    from offbench.leaderboard.spec import load_spec
    from offbench.leaderboard.table import (
        behaviour_table,
        compute_results,
        improvement_table,
        main_table,
        per_task_tables,
        reported_table,
        terminal_tables,
    )

    format = format.lower()
    if format not in SHOW_FORMATS:
        raise typer.BadParameter(f"{format!r} is not one of {', '.join(SHOW_FORMATS)}", param_hint="--format")
    spec = load_spec(benchmark, root)
    board = _board(spec, runs)
    if format != "table":
        if board.scores.empty:
            raise OffbenchError(f"{benchmark}: no accepted entries yet, no table to export")
        results = compute_results(board)
        tables = [
            ("", main_table(board, results)),
            *((f"per task: {dataset}", frame) for dataset, frame in per_task_tables(board, results).items()),
        ]
        print(_export_tables([(title, frame) for title, frame in tables if not frame.empty], format), end="")
        return
    console.print(f"[bold]{escape(spec.title)}[/bold]: {escape(spec.score_label)}; cells are mean \\[95% bootstrap interval] (n = seeds)")
    frames = [
        ("the data's own score (never ranked, in no statistic)", behaviour_table(board)),
        ("published numbers (reported, not run here; not in any statistic)", reported_table(board)),
    ]
    if board.scores.empty:
        console.print("no accepted entries yet")
    else:
        results = compute_results(board)
        frames = [
            ("", main_table(board, results)),
            *frames,
            *((f"per task: {dataset}", frame) for dataset, frame in per_task_tables(board, results).items()),
            ("", improvement_table(board, results)),
        ]
    for title, frame in frames:
        if frame.empty:
            continue
        for table in terminal_tables(title, frame, console.width):
            console.print(table)


SHOW_FORMATS = ("table", "markdown", "csv", "latex")


def _export_tables(tables: list[tuple[str, Any]], format: str) -> str:
    """`leaderboard show --format`: each table as Markdown, CSV or LaTeX, titled tables after the first under
    a heading (Markdown), a `#` line (CSV; `pandas.read_csv(comment="#")` skips it) or a `%` comment (LaTeX)."""
    parts = []
    for title, frame in tables:
        header, rows = [str(c) for c in frame.columns], [[str(v) for v in row] for row in frame.itertuples(index=False)]
        if format == "csv":
            parts.append((f"# {title}\n" if title else "") + frame.to_csv(index=False))
        elif format == "markdown":
            cell = lambda text: text.replace("|", "\\|").replace("\n", " ")  # noqa: E731
            lines = [
                "| " + " | ".join(map(cell, header)) + " |",
                "|" + "|".join("---" for _ in header) + "|",
                *("| " + " | ".join(map(cell, row)) + " |" for row in rows),
            ]
            parts.append((f"### {title}\n\n" if title else "") + "\n".join(lines) + "\n")
        else:  # latex, without pandas' Styler (it needs jinja2)
            lines = [
                *([f"% {title}"] if title else []),
                "\\begin{tabular}{" + "l" * len(header) + "}",
                "\\toprule",
                " & ".join(map(_latex, header)) + " \\\\",
                "\\midrule",
                *(" & ".join(map(_latex, row)) + " \\\\" for row in rows),
                "\\bottomrule",
                "\\end{tabular}",
            ]
            parts.append("\n".join(lines) + "\n")
    return "\n".join(parts)


_LATEX_SPECIAL = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    "—": "---",
}


def _latex(text: str) -> str:
    return "".join(_LATEX_SPECIAL.get(char, char) for char in text)


@leaderboard_app.command("build")
def build(
    benchmark: str = typer.Argument(..., help="Benchmark name."),
    runs: Optional[list[Path]] = RUNS_OPTION,
    out: Optional[Path] = typer.Option(None, "--out", help="results.json to write (default: the benchmark's)."),
    root: Optional[Path] = ROOT_OPTION,
) -> None:
    """Roll the entries up into results.json: per-cell and aggregate estimates with their intervals."""
    from offbench.leaderboard.render import write_results
    from offbench.leaderboard.spec import load_spec
    from offbench.leaderboard.table import compute_results

    _require_out_for_preview(runs, out)
    spec = load_spec(benchmark, root)
    target = out or spec.folder / "results.json"
    with spec.lock:  # read and write under the lock: a submit beside it cannot be overwritten by a stale board
        board = _board(spec, runs)
        write_results(board, compute_results(board), target)
    console.print(f"wrote {target} ({len(board.scores)} runs)", highlight=False, markup=False, soft_wrap=True)


@leaderboard_app.command("render")
def render(
    benchmark: str = typer.Argument(..., help="Benchmark name."),
    runs: Optional[list[Path]] = RUNS_OPTION,
    out: Optional[Path] = typer.Option(None, "--out", help="Folder to write (default: the benchmark's own)."),
    root: Optional[Path] = ROOT_OPTION,
) -> None:
    """Write README.md (Markdown table), index.html (sortable table and figures), figures/ and results.json."""
    from offbench.leaderboard.render import render_to
    from offbench.leaderboard.spec import load_spec

    _require_out_for_preview(runs, out)
    spec = load_spec(benchmark, root)
    with spec.lock:  # read and write under the lock: a submit beside it cannot be overwritten by a stale board
        written = render_to(_board(spec, runs), out or spec.folder)
    for path in written:
        console.print(f"wrote {path}", highlight=False, markup=False, soft_wrap=True)


@leaderboard_app.command("check")
def check(
    benchmark: Optional[str] = typer.Argument(None, help="Benchmark name (default: every benchmark)."), root: Optional[Path] = ROOT_OPTION
) -> None:
    """Run every admission rule on every entry file (what a pull request adding an entry must pass), and compare each
    `[behaviour]` value with the data where the dataset is on this machine (nothing is downloaded or generated)."""
    from offbench.leaderboard.behaviour import check_lines, compute_behaviour
    from offbench.leaderboard.entries import load_entries
    from offbench.leaderboard.spec import known_benchmarks, load_spec

    names = [benchmark] if benchmark else known_benchmarks(root)
    broken = 0
    for name in names:
        spec = load_spec(name, root)
        problems = []
        try:
            entries = load_entries(spec)
            runs = sum(len(entry["runs"]) for _, entry in entries)
            console.print(f"{name}: {len(entries)} entries, {runs} runs: every rule holds", highlight=False, markup=False)
        except OffbenchError as exc:
            problems.append(f"{name}: {exc}")
        try:
            behaviour_problems, notes = check_lines(spec, compute_behaviour(spec))
            problems += behaviour_problems
        except OffbenchError as exc:
            problems.append(f"{spec.path}: [behaviour]: {exc}")
            notes = []
        for line in notes:
            console.print(line, highlight=False, markup=False, soft_wrap=True)
        for line in problems:
            err_console.print(line, highlight=False, markup=False, soft_wrap=True)
        broken += bool(problems)
    if broken:
        raise OffbenchError(
            f"{broken} of {len(names)} benchmark(s) hold an entry that breaks a rule or a [behaviour] value the data does not give "
            "(listed above)"
        )


@leaderboard_app.command("behaviour")
def behaviour(benchmark: str = typer.Argument(..., help="Benchmark name."), root: Optional[Path] = ROOT_OPTION) -> None:
    """Print the board's `[behaviour]` table (each dataset's own score in its metric) computed from the data on this
    machine, to paste into its benchmark.toml; datasets not on this machine are named on stderr, never fetched."""
    from offbench.leaderboard.behaviour import behaviour_toml, compute_behaviour
    from offbench.leaderboard.spec import BEHAVIOUR_METRICS, load_spec

    spec = load_spec(benchmark, root)
    if spec.metric.name not in BEHAVIOUR_METRICS:
        raise OffbenchError(f"{spec.path}: metric '{spec.metric.name}' has no behaviour score (only {', '.join(BEHAVIOUR_METRICS)})")
    scores = compute_behaviour(spec, spec.datasets)
    for score in scores:
        if score.computed is None:
            err_console.print(f"{score.dataset}: left out, {score.skipped}", highlight=False, markup=False, soft_wrap=True)
    if all(score.computed is None for score in scores):
        raise OffbenchError(f"{benchmark}: none of its datasets can be scored on this machine (listed above)")
    print(behaviour_toml(spec, scores), end="")


@leaderboard_app.command("verify")
def verify(
    benchmark: str = typer.Argument(..., help="Benchmark name."),
    runs: Optional[list[Path]] = typer.Option(
        None, "--runs", help="Folders holding the entries' run directories (default: each run's recorded path)."
    ),
    write: bool = typer.Option(False, "--write", help="Record the outcome in the entries (only their runs' verification fields change)."),
    root: Optional[Path] = ROOT_OPTION,
) -> None:
    """Replay every entry's runs from their checkpoints and compare with the recorded final evaluations."""
    from offbench.leaderboard.spec import load_spec
    from offbench.leaderboard.submit import verify_entries

    spec = load_spec(benchmark, root)
    table = Table(header_style="bold")
    for column in ("entry", "run", "seed", "status", "detail"):
        table.add_column(column)
    outcomes = verify_entries(spec, runs or [], write=write)
    for outcome in outcomes:
        table.add_row(*(escape(str(value)) for value in outcome))
    console.print(table)
    refused = [o for o in outcomes if o[3] == "refused"]
    if refused:
        raise OffbenchError(f"{len(refused)} run(s) replay to other returns than their entries record (listed above)")


@leaderboard_app.command("index")
def index(
    root: Optional[Path] = ROOT_OPTION,
    pages: Optional[list[Path]] = typer.Option(
        None,
        "--page",
        help="A Markdown page whose `<!-- board: NAME -->` tables to refresh (repeatable; default: the checkout's docs/results.md).",
    ),
    check: bool = typer.Option(False, "--check", help="Write nothing; exit 1 if any page is out of date."),
) -> None:
    """Write leaderboards/README.md (every benchmark, from its benchmark.toml) and refresh the board tables other pages embed."""
    from offbench.leaderboard.index import write_index

    outcomes = write_index(root, pages, check=check)
    for path, changed in outcomes:
        state = ("out of date" if check else "written") if changed else "up to date"
        console.print(f"{path}: {state}", highlight=False, markup=False, soft_wrap=True)
    stale = [str(path) for path, changed in outcomes if changed]
    if check and stale:
        err_console.print(f"{len(stale)} page(s) out of date: run `offbench leaderboard index`", highlight=False, markup=False)
        raise typer.Exit(1)
