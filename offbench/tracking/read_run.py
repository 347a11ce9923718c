"""Reading run directories (docs/run-directory.md): run.json to reopen a run (`read_run_record`), and a finished run
for leaderboards, plots and re-evaluation (`read_run`, `check_evaluations`), with every rule they rely on checked
once. Files are read through the records the writers (`offbench.tracking.run_dir`) build them from; a broken rule
is a `Refused` error naming the run directory, the rule, the file and the field, so `offbench submit` can say
exactly why."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, TypeVar

from offbench.errors import OffbenchError
from offbench.evaluation.results import EvaluationRecord
from offbench.records import from_dict, read_json, to_dict
from offbench.tracking.loggers import EVALUATIONS_FILE
from offbench.tracking.run_files import CHECKPOINT, RUN_FILE, SUMMARY_FILE, RunRecord, RunSummary, SummaryEntry
from offbench.tracking.run_files import MAX_TEXT as MAX_TEXT  # what submit bounds copied strings by

R = TypeVar("R")


class Refused(OffbenchError):
    """A run (or submission) broke one named rule; the leaderboard is left as it was."""

    def __init__(self, where: str | Path, rule: str, detail: str):
        super().__init__(f"{where}: refused ({rule}): {detail}")
        self.rule = rule


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def is_finite(value: Any) -> bool:
    return is_number(value) and math.isfinite(value)


def same_number(a: float, b: float) -> bool:
    """Equal up to float summation order (JSON round trips are exact)."""
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)


# ---------------------------------------------------------------------------------------------- reopening a run
def read_run_record(run_dir: Path) -> RunRecord:
    """run.json of a run directory (to resume or re-evaluate it); a one-line error naming the file and the field."""
    path = Path(run_dir) / RUN_FILE
    if not Path(run_dir).is_dir():
        raise OffbenchError(f"{run_dir}: not a run directory (no such folder)")
    if not path.is_file():
        raise OffbenchError(f"{path}: no such file (is {run_dir} a run directory?)")
    return read_json(path, RunRecord, "run record")


def read_run_json(run_dir: Path) -> dict[str, Any]:
    """`read_run_record` as run.json's table, for callers that index it by key."""
    return to_dict(read_run_record(run_dir))


def read_evaluations(run_dir: Path) -> list[dict[str, Any]]:
    """evaluations.jsonl's lines in file order ([] before the first evaluation); a broken line is a one-line error."""
    path = Path(run_dir) / EVALUATIONS_FILE
    if not path.exists():
        return []
    return _jsonl_rows(path, Path(run_dir))


def evaluation_records(lines: list[Any], run_dir: Path) -> list[EvaluationRecord]:
    """evaluations.jsonl's lines as records; a line that is not one is refused naming its number and field."""
    return [_parsed(run_dir, EvaluationRecord, line, f"{EVALUATIONS_FILE} line {number}") for number, line in enumerate(lines, 1)]


def _jsonl_rows(path: Path, run_dir: Path) -> list[Any]:
    rows = []
    try:
        text = path.read_text()
    except UnicodeDecodeError:
        raise Refused(run_dir, "schema", f"{path.name} is not UTF-8 text") from None
    for number, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise Refused(run_dir, "schema", f"{path.name} line {number} is not valid JSON ({exc})") from None
    return rows


def _parsed(run_dir: Path, cls: type[R], data: Any, where: str) -> R:
    try:
        return from_dict(cls, data, where)
    except OffbenchError as exc:
        raise Refused(run_dir, "schema", str(exc)) from None


# ---------------------------------------------------------------------------------------------- finished runs
def is_run_dir(path: Path) -> bool:
    return (path / RUN_FILE).is_file()


def expand_run_dirs(paths: list[Path]) -> list[Path]:
    """Run directories named directly, or found one level down in a folder of runs (e.g. `runs/`)."""
    found: list[Path] = []
    for path in map(Path, paths):
        if is_run_dir(path):
            found.append(path)
        elif path.is_dir() and any(is_run_dir(child) for child in path.iterdir()):
            found.extend(sorted(child for child in path.iterdir() if is_run_dir(child)))
        elif path.is_dir():
            raise Refused(path, "run-files", "no run.json here or in its sub-folders (not a run directory)")
        else:
            raise OffbenchError(f"{path}: no such run directory")
    return found


@dataclass
class FinishedRun:
    """One finished run as leaderboards and plots see it: its files as records, and as the tables they hold (what
    the run's identity is computed from, and what entries copy)."""

    path: Path
    record: RunRecord  # run.json
    lines: list[EvaluationRecord]  # evaluations.jsonl, in file order
    result: RunSummary  # summary.json
    info: dict[str, Any]  # run.json as read
    evaluations: list[dict[str, Any]]  # evaluations.jsonl as read
    summary: dict[str, Any]  # summary.json as read

    @property
    def run_id(self) -> str:
        return self.record.run_id

    @property
    def baseline(self) -> str:
        return self.record.baseline

    @property
    def dataset_id(self) -> str:
        return self.record.dataset.id

    @property
    def dataset_sha256(self) -> str:
        return self.record.dataset.content_sha256

    @property
    def seed(self) -> int:
        return self.record.seed

    @property
    def protocol(self) -> str:
        return self.record.evaluation.protocol_name

    @property
    def headline_target(self) -> float | None:
        return self.record.evaluation.headline_target

    @cached_property
    def identity(self) -> dict[str, str | None]:
        """What the run is, whatever it is called: sha256 of its evaluations (parsed, so re-formatting the file
        changes nothing) and of its final checkpoint. Renaming a run or relabelling it keeps both."""
        evaluations = json.dumps(self.evaluations, sort_keys=True, separators=(",", ":")).encode()
        checkpoint = self.path / CHECKPOINT
        return {
            "evaluations_sha256": hashlib.sha256(evaluations).hexdigest(),
            "checkpoint_sha256": _file_sha256(checkpoint) if checkpoint.is_file() else None,
        }

    def entry(self, which: str) -> SummaryEntry:
        """summary.json's `final` or `best` (read_run refuses a run without them, through this)."""
        entry = self.result.final if which == "final" else self.result.best
        if entry is None:
            raise _bad_summary(self, f"'{which}' needs at least a 'step'")
        return entry

    def score(self, field: str, which: str) -> Any:
        """summary.json's `final` or `best` value of one field (may be None; callers check)."""
        return getattr(self.entry(which), field, None)

    def curve_rows(self, which: str = "final") -> list[dict[str, Any]]:
        """Evaluation lines of one learning curve: those at the target return the summary's score used."""
        target = self.entry(which).target_return
        return [row for row in self.evaluations if row.get("target_return") == target]

    def in_context_returns(self, which: str = "final") -> list[float] | None:
        """Return per in-context episode at the summary's step (optional field, see docs/run-directory.md)."""
        entry = self.entry(which)
        for line in self.lines:
            if line.step == entry.step and line.target_return == entry.target_return and line.in_context_returns is not None:
                return line.in_context_returns
        return None

    def optimal_return(self) -> float | None:
        values = [line.optimal_return for line in self.lines if line.optimal_return is not None]
        return values[-1] if values else None


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def read_run(path: str | Path) -> FinishedRun:
    """Read and check one finished run directory; raises Refused naming the rule that failed."""
    path = Path(path)
    if not path.is_dir():
        raise OffbenchError(f"{path}: no such run directory")
    info = _read_json(path / RUN_FILE, path)
    if not (path / EVALUATIONS_FILE).is_file():
        raise Refused(path, "run-files", f"no {EVALUATIONS_FILE} (not a complete run directory)")
    evaluations = _jsonl_rows(path / EVALUATIONS_FILE, path)
    summary = _read_json(path / SUMMARY_FILE, path)
    for name, value in [*((f"{EVALUATIONS_FILE} line {n}", row) for n, row in enumerate(evaluations, 1)), (SUMMARY_FILE, summary)]:
        if (field := _non_finite(value, "")) is not None:
            raise Refused(path, "metric-finite", f"{name}: '{field}' is not a finite number")
    run = FinishedRun(
        path=path,
        record=_parsed(path, RunRecord, info, RUN_FILE),
        lines=evaluation_records(evaluations, path),
        result=_parsed(path, RunSummary, summary, SUMMARY_FILE),
        info=info,
        evaluations=evaluations,
        summary=summary,
    )
    if run.record.evaluation.episodes < 1:
        raise Refused(
            path, "schema", f"{RUN_FILE}: 'evaluation.episodes' must be at least 1 for a scored run, got {run.record.evaluation.episodes}"
        )
    _check_steps(run)
    _check_summary(run)
    return run


def _read_json(path: Path, run_dir: Path) -> Any:
    if not path.is_file():
        reason = "the run did not finish" if path.name == SUMMARY_FILE else "not a complete run directory"
        raise Refused(run_dir, "run-files", f"no {path.name} ({reason})")
    try:
        return json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise Refused(run_dir, "schema", f"{path.name} is not valid JSON ({exc})") from None


def _non_finite(value: Any, at: str) -> str | None:
    """The dotted path of the first number in parsed JSON `value` that is NaN or infinite, or None."""
    if isinstance(value, float):
        return at if not math.isfinite(value) else None
    if isinstance(value, dict):
        inner = ((f"{at}.{key}" if at else str(key), item) for key, item in value.items())
    elif isinstance(value, list):
        inner = ((f"{at}[{index}]", item) for index, item in enumerate(value))
    else:
        return None
    return next((found for where, item in inner if (found := _non_finite(item, where)) is not None), None)


def _check_steps(run: FinishedRun) -> None:
    if not run.lines:
        raise Refused(run.path, "schema", f"{EVALUATIONS_FILE} holds no evaluation")
    for number, (before, line) in enumerate(zip(run.lines, run.lines[1:]), 2):
        if line.step < before.step or (line.step, line.target_return) == (before.step, before.target_return):
            raise Refused(run.path, "schema", f"{EVALUATIONS_FILE} line {number}: steps go backwards or repeat (step {line.step})")


def _check_summary(run: FinishedRun) -> None:
    summary, config = run.result, run.record.config
    if summary.status != "completed":
        raise Refused(run.path, "completed", f"{SUMMARY_FILE} status is {summary.status!r}, not 'completed'")
    if config.get("steps", summary.steps) != summary.steps:
        raise _bad_summary(run, f"steps {summary.steps} differ from run.json config.steps {config['steps']!r}")
    last = run.lines[-1].step
    if last != summary.steps:
        raise _bad_summary(
            run, f"steps {summary.steps} differ from the last evaluation's step {last} (every run is evaluated at its last step)"
        )
    for which in ("final", "best"):
        _check_entry(run, which)
    final = run.entry("final")
    if final.step != last:
        raise _bad_summary(run, f"final step {final.step} is not the last evaluation (step {last})")


def _bad_summary(run: FinishedRun, detail: str) -> Refused:
    return Refused(run.path, "schema", f"{SUMMARY_FILE} {detail}")


def _check_entry(run: FinishedRun, which: str) -> None:
    """summary.json `final` or `best` is a line of evaluations.jsonl at the headline target, and agrees with it."""
    entry = run.entry(which)
    if entry.target_return != run.headline_target:
        raise _bad_summary(run, f"{which}.target_return {entry.target_return!r} is not the headline target {run.headline_target!r}")
    line = next((line for line in run.lines if (line.step, line.target_return) == (entry.step, run.headline_target)), None)
    if line is None:
        raise _bad_summary(run, f"'{which}' (step {entry.step}) matches no line of {EVALUATIONS_FILE}")
    for field in ("mean_return", "normalized_score", "success_rate", "regret"):
        value, recorded = getattr(entry, field), getattr(line, field)
        if value is not None and recorded is not None and value != recorded:
            raise _bad_summary(run, f"{which}.{field} = {value} disagrees with {EVALUATIONS_FILE} ({recorded})")


# ---------------------------------------------------------------------------------------------- each evaluation line
Refuse = Callable[[str, str], Refused]


def check_evaluations(run: FinishedRun) -> None:
    """Every evaluation line agrees with itself and with the protocol in run.json: per-episode returns are as many
    as the protocol plays, `mean_return` is their mean, success rates are fractions of episodes, and the multi-task
    (`per_task`) and in-context fields add up (docs/run-directory.md). read_run has checked they are finite."""
    settings = run.record.evaluation
    for number, line in enumerate(run.lines, 1):

        def refuse(rule: str, detail: str, where: str = f"{EVALUATIONS_FILE} line {number} (step {line.step})") -> Refused:
            return Refused(run.path, rule, f"{where}: {detail}")

        if not line.returns:
            raise refuse("consistency", "'returns' is empty")
        if len(line.lengths) != len(line.returns) or not all(n >= 1 for n in line.lengths):
            raise refuse("consistency", "'lengths' must hold one positive integer per return")
        if line.success_rate is not None and not 0.0 <= line.success_rate <= 1.0:
            raise refuse("metric-range", f"success_rate {line.success_rate} is outside [0, 1]")
        if run.protocol == "multi-task":
            _check_per_task(line, settings.tasks, settings.episodes, refuse)
        elif run.protocol == "in-context":
            _check_in_context(line, settings.in_context_episodes or settings.episodes, settings.task_ids, refuse)
        else:
            _check_episodes(line.returns, line.success_rate, settings.episodes, refuse)
        mean = sum(line.returns) / len(line.returns)
        if not same_number(mean, line.mean_return):
            raise refuse("consistency", f"mean_return {line.mean_return} is not the mean of its {len(line.returns)} returns ({mean})")


def _check_episodes(returns: list[float], rate: float | None, episodes: int, refuse: Refuse) -> None:
    if len(returns) != episodes:
        raise refuse("consistency", f"{len(returns)} returns, but run.json evaluation.episodes is {episodes}")
    if rate is not None and abs(rate * episodes - round(rate * episodes)) > 1e-6:
        raise refuse("consistency", f"success_rate {rate} is not a whole number of successes out of {episodes} episodes")


def _same_rate(recorded: float | None, expected: float | None) -> bool:
    if recorded is None or expected is None:
        return recorded is None and expected is None
    return same_number(recorded, expected)


def _check_per_task(line: EvaluationRecord, tasks: Any, episodes: int, refuse: Refuse) -> None:
    """Multi-task: each task plays `episodes` episodes; the line's mean return and success rate are means over tasks."""
    if not line.per_task:
        raise refuse("schema", "a multi-task evaluation needs 'per_task'")
    if isinstance(tasks, list) and list(line.per_task) != tasks:
        raise refuse("consistency", "'per_task' does not list run.json evaluation.tasks, in order")
    rates = []
    for name, block in line.per_task.items():
        if block.successes is not None and len(block.successes) != len(block.returns):
            raise refuse("schema", f"per_task[{name!r}].successes must be null or one true/false per return")
        _check_episodes(block.returns, None, episodes, refuse)
        mean = sum(block.returns) / len(block.returns)
        if not same_number(block.mean_return, mean):
            raise refuse("consistency", f"per_task[{name!r}].mean_return is not the mean of its returns ({mean})")
        rate = None if block.successes is None else sum(block.successes) / len(block.successes)
        if not _same_rate(block.success_rate, rate):
            raise refuse(
                "consistency", f"per_task[{name!r}].success_rate {block.success_rate!r} is not the fraction of its successes ({rate})"
            )
        rates.append(rate)
    blocks = list(line.per_task.values())
    if len(line.returns) != episodes * len(blocks):
        raise refuse("consistency", f"{len(line.returns)} returns, but {len(blocks)} tasks x {episodes} episodes")
    if not same_number(line.mean_return, sum(block.mean_return for block in blocks) / len(blocks)):
        raise refuse("consistency", "mean_return is not the mean over tasks of their mean returns")
    overall = None if None in rates else sum(rates) / len(rates)
    if not _same_rate(line.success_rate, overall):
        raise refuse("consistency", f"success_rate {line.success_rate!r} is not the mean over tasks of their success rates ({overall})")


def _check_in_context(line: EvaluationRecord, episodes: int, task_ids: list[int] | None, refuse: Refuse) -> None:
    """In-context: `in_context_returns` has one mean over tasks per episode, the last of which is `mean_return`;
    `returns` holds each task's last episode; the cumulative `regret` curve ends at `regret`."""
    curve = line.in_context_returns
    if curve is None:
        raise refuse("schema", "an in-context evaluation needs 'in_context_returns'")
    if len(curve) != episodes:
        raise refuse("consistency", f"{len(curve)} in_context_returns, but run.json says {episodes} in-context episodes")
    if not same_number(curve[-1], line.mean_return):
        raise refuse("consistency", f"mean_return {line.mean_return} is not the last in-context episode's return {curve[-1]}")
    if task_ids is not None and len(line.returns) != len(task_ids):
        raise refuse("consistency", f"{len(line.returns)} returns, but run.json evaluates {len(task_ids)} tasks (one return each)")
    if line.task_returns is not None:
        _check_task_returns(line.task_returns, line.returns, curve, episodes, refuse)
    if line.regret is not None:
        regret_curve = line.in_context_regret
        if regret_curve is None or len(regret_curve) != episodes or not same_number(regret_curve[-1], line.regret):
            raise refuse("consistency", f"regret {line.regret} is not the end of in_context_regret (one value per episode)")


def _check_task_returns(rows: list[list[float]], returns: list[float], curve: list[float], episodes: int, refuse: Refuse) -> None:
    """In-context `task_returns` (`rows`): per task, one return per episode, the last in `returns`; their mean is the
    `in_context_returns` curve."""
    if len(rows) != len(returns):
        raise refuse("consistency", "'task_returns' needs one list of returns per task")
    if any(len(r) != episodes for r in rows) or any(not same_number(r[-1], last) for r, last in zip(rows, returns)):
        raise refuse("consistency", "'task_returns' rows must have one return per in-context episode, the last equal to 'returns'")
    if not all(same_number(sum(column) / len(column), mean) for column, mean in zip(zip(*rows), curve)):
        raise refuse("consistency", "in_context_returns is not the mean over tasks of task_returns")
