"""Drive a sweep: find what is already done on disk, start the rest on an executor, retry failures,
show a live table, stop cleanly on Ctrl-C, summarise, and optionally submit to a leaderboard.

Everything a re-run needs is on disk under the sweep's runs folder:

    <runs>/<run name>/           run directories (`offbench run baseline --out <runs> --name <run name>`)
    <runs>/.sweep/state.json     attempts and last error of runs that failed (the status command reads it)
    <runs>/.sweep/logs/<name>.log  each run's output, every attempt appended
    <runs>/.sweep/lock           held while a sweep runs there, so two never drive the same runs
"""

from __future__ import annotations

import json
import os
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from filelock import FileLock, Timeout
from rich.console import Console, Group, JustifyMethod
from rich.live import Live
from rich.markup import escape
from rich.table import Table

from offbench.errors import OffbenchError
from offbench.sweep.executors import EXIT_BAD_INPUT, Executor, Job, Outcome, forwarded_env, offbench_argv
from offbench.sweep.spec import PlannedRun, Sweep
from offbench.tracking.read_run import is_number, read_run_json
from offbench.tracking.run_files import RUN_FILE, SUMMARY_FILE
from offbench.utils import PLAIN_PROGRESS_EVERY_S, atomic_write_json, ensure_dir

if TYPE_CHECKING:  # the leaderboard is imported by --submit alone
    from offbench.leaderboard.spec import BenchmarkSpec

QUEUED, RUNNING, DONE, FAILED, STOPPED = "queued", "running", "done", "failed", "stopped"
TABLE_ROWS = 20  # running and failed runs shown in the live table; the rest are counted


def runs_folder(spec: Sweep, given: Path | None) -> Path:
    """--runs, else the spec's `runs`, else runs/sweeps/<name> (relative paths stay relative, so the paths
    a leaderboard entry records are portable)."""
    return given or spec.runs or Path("runs") / "sweeps" / spec.name


def state_dir(runs: Path) -> Path:
    return runs / ".sweep"


def read_state(runs: Path) -> dict[str, Any]:
    """The sweep's record of failed runs: {"failed": {run: {"attempts": int, "error": str}}}; anything else is a
    one-line error (delete the file to forget the failures)."""
    path = state_dir(runs) / "state.json"
    if not path.is_file():
        return {}
    forget = "delete it to forget recorded failures"
    try:
        state = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise OffbenchError(f"{path}: not valid JSON ({exc}); {forget}") from None
    failed = state.get("failed", {}) if isinstance(state, dict) else None
    if not isinstance(failed, dict):
        raise OffbenchError(f"{path}: must hold an object with a 'failed' object; {forget}")
    for name, record in failed.items():
        attempts = record.get("attempts") if isinstance(record, dict) else None
        if not isinstance(attempts, int) or isinstance(attempts, bool) or attempts < 0 or not isinstance(record.get("error"), str):
            raise OffbenchError(f"{path}: failed run {name!r:.80} needs a non-negative integer 'attempts' and an 'error' text; {forget}")
    return state


def read_summary_note(run_dir: Path) -> tuple[str, str]:
    """(steps, 'metric value') of a finished run's summary.json for the status table; a broken one says so."""
    try:
        summary = json.loads((run_dir / SUMMARY_FILE).read_text())
        final, metric = summary.get("final"), summary.get("score_metric")
        value = final.get(metric) if isinstance(final, dict) and isinstance(metric, str) else None
        note = f"{metric} {value:.4g}" if is_number(value) else ""
        return str(summary.get("steps", "")), note
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, AttributeError):
        return "", f"{SUMMARY_FILE} is unreadable"


# ---------------------------------------------------------------------------------------------- what is on disk
@dataclass
class Progress:
    step: int = 0
    total: int | None = None
    rate: float | None = None  # updates per second between the last two metrics lines


def tail_lines(path: Path, size: int = 4096) -> list[str]:
    try:
        with open(path, "rb") as handle:
            handle.seek(max(0, handle.seek(0, os.SEEK_END) - size))
            return [line for line in handle.read().decode(errors="replace").splitlines() if line.endswith("}")]
    except OSError:
        return []


def read_progress(run_dir: Path, total: int | None) -> Progress:
    """Step and rate from the tail of metrics.jsonl (written every log_every updates)."""
    if total is None and (run_dir / RUN_FILE).is_file():
        try:
            total = int(json.loads((run_dir / RUN_FILE).read_text())["config"]["steps"])
        except (OSError, ValueError, KeyError, TypeError):
            total = None
    lines = []
    for line in tail_lines(run_dir / "metrics.jsonl")[-2:]:
        try:
            lines.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    if not lines:
        return Progress(0, total)
    rate = None
    if len(lines) == 2 and lines[1].get("time_s", 0) > lines[0].get("time_s", 0):
        rate = (lines[1]["step"] - lines[0]["step"]) / (lines[1]["time_s"] - lines[0]["time_s"])
    return Progress(int(lines[-1]["step"]), total, rate)


def is_done(run_dir: Path) -> bool:
    return (run_dir / SUMMARY_FILE).is_file()


def check_existing(run: PlannedRun, run_dir: Path) -> None:
    """A run directory found under a planned name must be that run: same baseline, seed and values."""
    record = read_run_json(run_dir)
    config = record.get("config", {})
    differs = [f"baseline {record.get('baseline')!r}"] if record.get("baseline") != run.baseline else []
    differs += [f"seed {record.get('seed')!r}"] if record.get("seed") != run.seed else []
    differs += [f"{key} = {config.get(key)!r}" for key, value in sorted(run.values.items()) if config.get(key) != value]
    if differs:
        raise OffbenchError(f"{run_dir}: holds another run than the spec plans ({', '.join(differs)}); move it away or change the spec")


def run_job(run: PlannedRun, runs: Path) -> Job:
    """Start the run, or continue it from its last checkpoint when it was started before."""
    run_dir = runs / run.name
    if (run_dir / RUN_FILE).is_file():
        args = ["run", "baseline", run.baseline, "--resume", str(run_dir.resolve())]
    else:
        if run_dir.exists() and not any(run_dir.iterdir()):  # died between mkdir and run.json: nothing to keep
            run_dir.rmdir()
        args = [
            "run",
            "baseline",
            run.baseline,
            "--dataset",
            run.dataset,
            "--seed",
            str(run.seed),
            "--out",
            str(runs.resolve()),
            "--name",
            run.name,
        ]
        if run.config_file is not None:
            args += ["--config", str(run.config_file)]
        for override in run.overrides():
            args += ["--set", override]
    return Job(run.name, offbench_argv(*args), forwarded_env(), state_dir(runs).resolve() / "logs" / f"{run.name}.log")


# ---------------------------------------------------------------------------------------------- the sweep
@dataclass
class Tracker:
    """Each planned run's state in this invocation, and what the table and summary show."""

    runs: list[PlannedRun]
    folder: Path
    state: dict[str, str] = field(default_factory=dict)
    attempts: dict[str, int] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    totals: dict[str, int | None] = field(default_factory=dict)
    finished: list[str] = field(default_factory=list)  # runs that finished in this invocation
    wall_s: float = 0.0

    def count(self, state: str) -> int:
        return sum(1 for s in self.state.values() if s == state)

    def save(self) -> None:
        failed = {
            name: {"attempts": self.attempts.get(name, 0), "error": self.errors[name]} for name, s in self.state.items() if s == FAILED
        }
        atomic_write_json(state_dir(self.folder) / "state.json", {"failed": failed})

    def table(self, title: str) -> Group:
        counts = " ".join(f"{s} {self.count(s)}" for s in (QUEUED, RUNNING, DONE, FAILED) if self.count(s) or s != FAILED)
        table = Table(box=None, header_style="bold", title=None)
        columns: tuple[tuple[str, JustifyMethod], ...] = (
            ("run", "left"),
            ("state", "left"),
            ("step", "right"),
            ("rate", "right"),
            ("note", "left"),
        )
        for column, justify in columns:
            table.add_column(column, justify=justify)
        shown = [r.name for r in self.runs if self.state[r.name] == RUNNING]
        shown += [r.name for r in self.runs if self.state[r.name] == FAILED]
        for name in shown[:TABLE_ROWS]:
            state = self.state[name]
            if state == RUNNING:
                progress = read_progress(self.folder / name, self.totals.get(name))
                self.totals[name] = progress.total
                step = f"{progress.step}/{progress.total}" if progress.total else str(progress.step)
                rate = f"{progress.rate:.0f} it/s" if progress.rate else ""
                note = f"attempt {self.attempts[name] + 1}" if self.attempts.get(name) else ""
                table.add_row(name, f"[cyan]{state}", step, rate, note)
            else:
                table.add_row(name, f"[red]{state}", "", "", escape(self.errors.get(name, "")))
        more = len(shown) - TABLE_ROWS
        header = f"[bold]{escape(title)}[/]\n{counts}" + (f"  (+{more} rows not shown)" if more > 0 else "")
        return Group(header, table) if shown else Group(header)


def execute(spec: Sweep, runs: list[PlannedRun], folder: Path, executor: Executor, console: Console, retries: int | None = None) -> Tracker:
    """Run every planned run not yet done; returns the tracker (raises KeyboardInterrupt after a clean stop)."""
    ensure_dir(state_dir(folder))  # a folder that cannot be made (under /proc, a file in the way) is one line
    lock = FileLock(str(state_dir(folder) / "lock"))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        raise OffbenchError(f"{folder}: another sweep is running on these runs (lock {state_dir(folder) / 'lock'})") from None
    try:
        return _execute_locked(spec, runs, folder, executor, console, spec.retries if retries is None else retries)
    finally:
        lock.release()


def _execute_locked(spec, runs, folder, executor, console, retries) -> Tracker:
    tracker = Tracker(runs, folder)
    queue: deque[PlannedRun] = deque()
    for run in runs:
        run_dir = folder / run.name
        if (run_dir / RUN_FILE).is_file():
            check_existing(run, run_dir)
        tracker.state[run.name] = DONE if is_done(run_dir) else QUEUED
        if tracker.state[run.name] == QUEUED:
            queue.append(run)
    by_name = {run.name: run for run in runs}
    title = f"sweep {spec.name} ({len(runs)} runs, {executor.slots} at once, {executor.threads} thread(s) each) -> {folder}"
    begin = time.monotonic()
    with _display(console, tracker, title) as show:
        try:
            while queue or tracker.count(RUNNING):
                while queue and tracker.count(RUNNING) < executor.slots:
                    run = queue.popleft()
                    executor.start(run_job(run, folder))
                    tracker.state[run.name] = RUNNING
                for ended in executor.wait(timeout=0.5):
                    _settle(tracker, by_name[ended.name], ended, retries, queue)
                    show(ended=ended.name)
                show()
        except KeyboardInterrupt:
            executor.stop()
            for name, state in tracker.state.items():
                if state == RUNNING:
                    tracker.state[name] = STOPPED
            show()
            tracker.save()
            raise
        finally:
            tracker.wall_s = time.monotonic() - begin
    tracker.save()
    return tracker


@contextmanager
def _display(console: Console, tracker: Tracker, title: str) -> Iterator[Callable[..., None]]:
    """Yields `show(ended=None)`, called after each poll and with the name of each run that ended. On a terminal: the
    live table. Off one (a log file under SLURM, a pipe): one plain line per run that ended, and the counts every
    PLAIN_PROGRESS_EVERY_S seconds, so a log shows progress before the sweep ends."""
    if console.is_terminal:
        with Live(tracker.table(title), console=console, refresh_per_second=2, transient=False) as live:
            yield lambda ended=None: live.update(tracker.table(title))
        return
    console.print(title, highlight=False, markup=False, soft_wrap=True)
    last = time.monotonic()

    def show(ended: str | None = None) -> None:
        nonlocal last
        now = time.monotonic()
        if ended is not None:
            state = tracker.state[ended]
            note = f": {tracker.errors[ended]}" if ended in tracker.errors and state != DONE else ""
            console.print(f"{time.strftime('%H:%M:%S')} {ended} {state}{note}", highlight=False, markup=False, soft_wrap=True)
        elif now - last >= PLAIN_PROGRESS_EVERY_S:
            counts = ", ".join(f"{tracker.count(s)} {s}" for s in (DONE, RUNNING, QUEUED, FAILED) if tracker.count(s))
            console.print(f"{time.strftime('%H:%M:%S')} {counts}", highlight=False, markup=False, soft_wrap=True)
        else:
            return
        last = now

    yield show


def _settle(tracker: Tracker, run: PlannedRun, ended: Outcome, retries: int, queue: deque[PlannedRun]) -> None:
    name = run.name
    if ended.returncode == 0 and is_done(tracker.folder / name):
        tracker.state[name] = DONE
        tracker.finished.append(name)
        tracker.errors.pop(name, None)
        return
    tracker.attempts[name] = tracker.attempts.get(name, 0) + 1
    tracker.errors[name] = ended.error or "exited without summary.json"
    if ended.returncode != EXIT_BAD_INPUT and tracker.attempts[name] <= retries:
        tracker.state[name] = QUEUED
        queue.append(run)  # resumes from its last checkpoint
    else:
        tracker.state[name] = FAILED


def print_summary(tracker: Tracker, console: Console) -> None:
    """Counts, this invocation's throughput, then one line per failed run with its error."""
    rate = f", {3600 * len(tracker.finished) / tracker.wall_s:.0f} runs/hour" if tracker.finished and tracker.wall_s else ""
    counts = ", ".join(f"{tracker.count(s)} {s}" for s in (DONE, FAILED, STOPPED, QUEUED) if tracker.count(s) or s == DONE)
    console.print(
        f"[bold]summary[/]: {counts} ({len(tracker.finished)} finished in this sweep's {tracker.wall_s:.0f} s{rate}); "
        f"runs in {escape(str(tracker.folder))}",
        highlight=False,
        soft_wrap=True,
    )
    for name, state in tracker.state.items():
        if state == FAILED:
            console.print(
                f"[red]failed[/] {escape(name)} after {tracker.attempts.get(name, 0)} attempt(s): {escape(tracker.errors[name])}"
                f" (log: {escape(str(state_dir(tracker.folder) / 'logs' / (name + '.log')))})",
                highlight=False,
                soft_wrap=True,
            )


# ---------------------------------------------------------------------------------------------- status
def status_rows(runs: list[PlannedRun], folder: Path) -> list[tuple[str, str, str, str]]:
    """(run, state, step, note) per planned run, from the disk alone."""
    failed = read_state(folder).get("failed", {})
    rows = []
    for run in runs:
        run_dir = folder / run.name
        if is_done(run_dir):
            rows.append((run.name, DONE, *read_summary_note(run_dir)))
        elif run.name in failed:
            rows.append((run.name, FAILED, "", f"{failed[run.name]['attempts']} attempt(s): {failed[run.name]['error']}"))
        elif (run_dir / RUN_FILE).is_file():
            progress = read_progress(run_dir, None)
            rows.append((run.name, STOPPED, f"{progress.step}/{progress.total}", "resumes from its last checkpoint"))
        else:
            rows.append((run.name, QUEUED, "", ""))
    return rows


# ---------------------------------------------------------------------------------------------- submit
def submit_finished(runs: list[PlannedRun], folder: Path, benchmark: str, console: Console) -> list[str]:
    """Submit each (baseline, variant) group whose runs all finished, each run replayed from its checkpoint first
    (`offbench submit --verify`); returns what could not be submitted, each with the reason the leaderboard gave."""
    from offbench.leaderboard.spec import load_spec
    from offbench.leaderboard.submit import submit

    spec = load_spec(benchmark)
    problems = []
    for (baseline, variant), members in _by_row(runs).items():
        label = f"{baseline}-{variant}" if variant else None
        what = f"{baseline}" + (f" ({label})" if label else "")
        unfinished = [run.name for run in members if not is_done(folder / run.name)]
        if unfinished:
            problems.append(f"{what}: not submitted, {len(unfinished)} run(s) unfinished ({unfinished[0]}, ...)")
            continue
        dirs = _not_on_board(spec, [folder / run.name for run in members])
        if not dirs:
            console.print(f"{what}: already on leaderboard {benchmark}", highlight=False)
            continue
        try:
            written = submit(spec, dirs, label=label, verify=True)
        except OffbenchError as exc:
            problems.append(f"{what}: refused: {exc}")
            continue
        console.print(f"{what}: {len(written)} entr{'y' if len(written) == 1 else 'ies'} accepted on {benchmark}", highlight=False)
    return problems


def _by_row(runs: list[PlannedRun]) -> dict[tuple[str, str], list[PlannedRun]]:
    """The planned runs by the leaderboard row they make: (baseline, variant)."""
    by_row: dict[tuple[str, str], list[PlannedRun]] = {}
    for run in runs:
        by_row.setdefault((run.baseline, run.variant), []).append(run)
    return by_row


def _not_on_board(spec: BenchmarkSpec, run_dirs: list[Path]) -> list[Path]:
    """The runs no accepted entry holds. A run is on the leaderboard by what it is (its evaluations and final
    checkpoint, as the duplicate rule finds it), not by its name: another sweep's runs share the names. A run that
    cannot be read is kept, so that submitting it reports why."""
    from offbench.leaderboard.submit import load_entries
    from offbench.tracking.read_run import read_run

    accepted = {_identity_key(record.get("identity")) for _, entry in load_entries(spec) for record in entry["runs"]}
    kept = []
    for run_dir in run_dirs:
        try:
            on_board = _identity_key(read_run(run_dir).identity) in accepted
        except OffbenchError:
            on_board = False
        if not on_board:
            kept.append(run_dir)
    return kept


def _identity_key(identity: dict[str, Any] | None) -> tuple[Any, Any] | None:
    """(evaluations sha256, final checkpoint sha256) of a run or an entry's run record; None when it has none."""
    if not identity or identity.get("evaluations_sha256") is None:
        return None
    return identity["evaluations_sha256"], identity.get("checkpoint_sha256")
