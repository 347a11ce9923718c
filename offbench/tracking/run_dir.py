"""Writing a run directory (docs/run-directory.md): what a run records about itself at its start (run.json, a
`RunRecord`) and at its end (summary.json, a `RunSummary`), whoever runs it (the trainer, `offbench.track`,
`offbench.evaluate`). The records are those `offbench.tracking.read_run` reads them back with."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None  # type: ignore[assignment]

from offbench.errors import OffbenchError
from offbench.evaluation.results import LOWER_IS_BETTER, EvaluationRecord, EvaluationSettings
from offbench.machine import environment_info
from offbench.records import from_dict, to_dict
from offbench.tracking.read_run import evaluation_records, read_evaluations
from offbench.tracking.run_files import (
    RUN_FILE,
    SCHEMA,
    SUMMARY_FILE,
    CodeVersion,
    DatasetRecord,
    EnvironmentInfo,
    MethodRecord,
    RunRecord,
    RunSummary,
    SummaryEntry,
)
from offbench.utils import atomic_write_json, ensure_dir, user_fixable_write_errors


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


class TrainingLock:
    """An exclusive `flock` on a run directory, held while one process trains the run: a second process given the
    same directory (`--resume` twice, a sweep or benchmark queue started twice) is refused with a one-line error
    instead of writing the same files. The kernel drops it when the process dies, so a killed run can be resumed
    at once, and it leaves no file behind. Where `fcntl` is missing (Windows) there is no lock."""

    def __init__(self, run_dir: Path):
        self.fd: int | None = None
        if fcntl is None:
            return
        fd = os.open(run_dir, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise OffbenchError(f"{run_dir}: another process is training this run; wait for it to end or stop it") from None
        self.fd = fd

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def create_run_dir(path: Path) -> Path:
    """Make a new, empty run directory; one that exists is never reused or overwritten. An --out that is a
    file or cannot be written, or a name too long, is a one-line error."""
    ensure_dir(path.parent)
    with user_fixable_write_errors(path):
        try:
            path.mkdir()
        except FileExistsError:
            raise OffbenchError(
                f"{path}: run directory already exists (choose another --name, or continue it with --resume {path})"
            ) from None
    return path


def code_version() -> dict[str, Any]:
    """offbench's version and, when it runs from a git checkout, the commit and whether files were changed."""
    from offbench import __version__

    root = Path(__file__).resolve().parents[2]
    info: dict[str, Any] = {"version": __version__, "git_commit": None, "git_dirty": None}
    if (root / ".git").exists():
        try:
            commit = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
            status = subprocess.run(
                ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True, timeout=10
            )
        except (OSError, subprocess.TimeoutExpired):
            return info
        if commit.returncode == 0:
            info["git_commit"] = commit.stdout.strip()
            info["git_dirty"] = bool(status.stdout.strip())
    return info


def write_run_json(run_dir: Path, record: RunRecord | Mapping[str, Any]) -> None:
    """run.json, atomically. A table (run.json's fields, as a run being trained holds them) is read as a RunRecord
    first, so nothing is written that reading the run back would refuse."""
    path = run_dir / RUN_FILE
    if not isinstance(record, RunRecord):
        record = from_dict(RunRecord, {**record, "schema": SCHEMA}, str(path))
    atomic_write_json(path, to_dict(record))


def new_run_record(
    run_dir: Path,
    *,
    baseline: str,
    method: MethodRecord,
    dataset: Any,
    seed: int,
    config: dict[str, Any],
    config_sources: list[str],
    device: str,
    evaluation: EvaluationSettings,
    loggers: Sequence[str] = (),
) -> RunRecord:
    """run.json of a new run, whoever runs it (the trainer, `offbench.track`, `offbench.evaluate`): `dataset` is
    an opened `offbench.data.resolve.Dataset`."""
    return RunRecord(
        schema=SCHEMA,
        run_id=run_dir.name,
        baseline=baseline,
        method=method,
        dataset=DatasetRecord(id=dataset.id, path=str(dataset.path), content_sha256=dataset.store.content_sha256(), format=dataset.format),
        seed=seed,
        config=config,
        config_sources=list(config_sources),
        code=CodeVersion(**code_version()),
        env=EnvironmentInfo(**environment_info(device)),
        evaluation=evaluation,
        loggers=list(loggers),
        started_at=utc_now(),
    )


def write_summary(run_dir: Path, steps: int, elapsed: float, headline_target: float | None, metric: str) -> RunSummary:
    """summary.json of a finished run, from its evaluations.jsonl."""
    final, best = summarize(evaluation_records(read_evaluations(run_dir), run_dir), headline_target, metric)
    summary = RunSummary(
        status="completed", steps=steps, wall_time_s=round(elapsed, 3), final=final, best=best, score_metric=metric, finished_at=utc_now()
    )
    atomic_write_json(run_dir / SUMMARY_FILE, to_dict(summary))
    return summary


def summarize(
    evaluations: list[EvaluationRecord], headline_target: float | None, metric: str
) -> tuple[SummaryEntry | None, SummaryEntry | None]:
    """`final` (the last evaluation: what tables use) and `best` (best headline score: highest, or lowest for
    LOWER_IS_BETTER metrics; earliest on ties), both at the headline target return for return-conditioned baselines."""
    headline = [line for line in evaluations if line.target_return == headline_target]
    if not headline:
        return None, None
    sign = -1.0 if metric in LOWER_IS_BETTER else 1.0
    best = max(headline, key=lambda line: (sign * getattr(line, metric), -line.step))
    return _summary_entry(headline[-1]), _summary_entry(best)


def _summary_entry(line: EvaluationRecord) -> SummaryEntry:
    return SummaryEntry(
        step=line.step,
        mean_return=line.mean_return,
        normalized_score=line.normalized_score,
        success_rate=line.success_rate,
        target_return=line.target_return,
        regret=line.regret,
    )
