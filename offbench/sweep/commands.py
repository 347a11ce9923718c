"""`offbench sweep SPEC` and `offbench sweep status SPEC` (wired into offbench/cli.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from offbench.errors import OffbenchError


def sweep(
    spec_or_status: str = typer.Argument(..., metavar="[status] SPEC", help="A sweep spec (TOML); 'status SPEC' only reports."),
    status_spec: Optional[Path] = typer.Argument(None, hidden=True),
    executor: str = typer.Option("local", "--executor", help="local (processes on this machine) or ray."),
    address: Optional[str] = typer.Option(None, "--address", help="Ray cluster address (default: start a local one, or RAY_ADDRESS)."),
    workers: Optional[int] = typer.Option(None, "--workers", min=1, help="Local runs at once (default: the cores)."),
    threads: Optional[int] = typer.Option(
        None, "--threads", min=1, help="Torch threads per run (local default: cores / workers; ray: CPUs each task reserves, default 1)."
    ),
    runs: Optional[Path] = typer.Option(
        None, "--runs", help="Folder of the sweep's run directories (default: the spec's `runs`, else runs/sweeps/<spec name>)."
    ),
    retries: Optional[int] = typer.Option(
        None, "--retries", min=0, help="Attempts after a failure before a run is reported failed (default: the spec's, else 2)."
    ),
    submit: Optional[str] = typer.Option(None, "--submit", help="Afterwards, submit the finished runs to this leaderboard."),
    max_runs: Optional[int] = typer.Option(
        None, "--max-runs", min=1, help="Refuse a spec of more runs (or random samples) than this (default 5,000)."
    ),
) -> None:
    """Run a spec's baselines x datasets x configs x seeds (finished runs skipped, stopped ones resumed, failures retried)."""
    from offbench.sweep import runner
    from offbench.sweep.spec import MAX_RUNS, check_configs, load_sweep

    if spec_or_status == "status":
        if status_spec is None:
            raise OffbenchError("sweep status: give the spec, e.g. offbench sweep status leaderboards/pendulum-scripted/sweep.toml")
        spec_path = status_spec
    elif status_spec is not None:
        raise OffbenchError(f"sweep: one spec at a time (got {spec_or_status} and {status_spec}); for a report use: sweep status SPEC")
    else:
        spec_path = Path(spec_or_status)
    spec = load_sweep(spec_path, max_runs=MAX_RUNS if max_runs is None else max_runs)
    planned = spec.expand()
    folder = runner.runs_folder(spec, runs)
    console = Console(stderr=True)
    if spec_or_status == "status":
        show_status(planned, folder)
        return

    from offbench.sweep.executors import make_executor

    check_configs(spec, planned)
    if submit is not None:
        from offbench.leaderboard.scoring import copies_off_the_pins
        from offbench.leaderboard.spec import load_spec

        # an unknown benchmark, or a local copy of other bytes than the board pins, fails now, not after hours of training
        off = copies_off_the_pins(load_spec(submit), (run.dataset for run in planned))
        if off:
            raise OffbenchError(f"--submit {submit}: {off[0]}" + (f" (and {len(off) - 1} more)" if len(off) > 1 else ""))
    pool = make_executor(executor, workers, threads, address)
    try:
        tracker = runner.execute(spec, planned, folder, pool, console, retries)
    except KeyboardInterrupt:
        console.print(
            f"stopped; run the same command again to continue (finished runs are kept, stopped ones resume): {folder}", highlight=False
        )
        raise typer.Exit(130) from None
    finally:
        pool.close()
    runner.print_summary(tracker, console)
    problems = runner.submit_finished(planned, folder, submit, console) if submit else []
    for problem in problems:
        console.print(escape(problem), style="red", highlight=False)
    if tracker.count(runner.FAILED) or problems:
        raise typer.Exit(1)


def show_status(planned, folder: Path) -> None:
    from offbench.sweep.runner import status_rows

    rows = status_rows(planned, folder)
    table = Table(box=None, header_style="bold")
    for column in ("run", "state", "step", "note"):
        table.add_column(column, no_wrap=column == "run")
    for name, state, step, note in rows:
        table.add_row(name, state, step, "" if state == "failed" else escape(note))
    console = Console()
    console.print(table)
    for name, state, _, note in rows:
        if state == "failed":
            console.print(f"failed {escape(name)}: {escape(note)}", highlight=False, soft_wrap=True)
    counts = {state: sum(1 for row in rows if row[1] == state) for state in ("done", "stopped", "failed", "queued")}
    console.print(f"{folder}: " + ", ".join(f"{n} {state}" for state, n in counts.items()), highlight=False, soft_wrap=True)
