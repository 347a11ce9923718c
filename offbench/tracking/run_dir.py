"""The run directory contract (docs/run-directory.md), written and read here only: what a run records about
itself and its summary (the trainer's side), and `read_run` / `check_evaluations` (what leaderboards, plots
and re-evaluation read, with every rule they rely on checked once)."""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import platform
import subprocess
import sys
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import cached_property
from pathlib import Path
from typing import Any

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None  # type: ignore[assignment]

from offbench.errors import OffbenchError
from offbench.tracking.loggers import EVALUATIONS_FILE
from offbench.utils import atomic_write_json, ensure_dir, read_text, user_fixable_write_errors

SCHEMA = 1
RUN_FILE = "run.json"
SUMMARY_FILE = "summary.json"
CHECKPOINT = Path("checkpoints") / "last.pt"
SUMMARY_FIELDS = ("step", "mean_return", "normalized_score", "success_rate", "target_return")
OPTIONAL_SUMMARY_FIELDS = ("regret",)  # in-context evaluations only
LOWER_IS_BETTER = frozenset({"regret"})  # headline metrics where the smaller number is the better run


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
            raise OffbenchError(f"{path}: run directory already exists (choose another --name, or continue it with --resume {path})") from None
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


def environment_info(device: str) -> dict[str, Any]:
    """Where a run ran. Includes the SIMD kernels NumPy and torch dispatch to: NumPy's AVX-512 sin/cos differ
    from its AVX2 ones in the last bits, enough to change a generated pendulum dataset and a run's returns, so
    two runs' numbers are comparable bit for bit only where these agree."""
    import numpy
    import torch
    from numpy._core._multiarray_umath import __cpu_dispatch__, __cpu_features__

    cpu = platform.processor()
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    info = {
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "numpy": numpy.__version__,
        "platform": platform.platform(),
        "cpu": cpu,
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "numpy_simd": [feature for feature in __cpu_dispatch__ if __cpu_features__.get(feature)],
        "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "device": device,
    }
    if device.startswith("cuda"):
        info["gpu"] = torch.cuda.get_device_name(torch.device(device))
    return info


def write_run_json(run_dir: Path, record: dict[str, Any]) -> None:
    atomic_write_json(run_dir / RUN_FILE, {"schema": SCHEMA, **record})


def new_run_record(run_dir: Path, *, baseline: str, method: dict[str, Any], dataset: Any, seed: int, config: dict[str, Any],
                   config_sources: list[str], device: str, evaluation: dict[str, Any], loggers: list[str] = ()) -> dict[str, Any]:
    """run.json of a new run, whoever runs it (the trainer, `offbench.track`, `offbench.evaluate`): `dataset` is
    an opened `offbench.data.resolve.Dataset`."""
    return {
        "run_id": run_dir.name,
        "baseline": baseline,
        "method": method,
        "dataset": {"id": dataset.id, "path": str(dataset.path), "content_sha256": dataset.store.content_sha256(), "format": dataset.format},
        "seed": seed,
        "config": config,
        "config_sources": config_sources,
        "code": code_version(),
        "env": environment_info(device),
        "evaluation": evaluation,
        "loggers": list(loggers),
        "started_at": utc_now(),
    }


def write_summary(run_dir: Path, steps: int, elapsed: float, headline_target: float | None, metric: str) -> dict[str, Any]:
    """summary.json of a finished run, from its evaluations.jsonl."""
    summary = {
        "status": "completed",
        "steps": steps,
        "wall_time_s": round(elapsed, 3),
        **summarize(read_evaluations(run_dir), headline_target, metric),
        "finished_at": utc_now(),
    }
    atomic_write_json(run_dir / SUMMARY_FILE, summary)
    return summary


# What reopening a run (resume, evaluate) reads from run.json: "a.b" is field b of the table a.
_RUN_FIELDS: dict[str, tuple[type, ...]] = {
    "baseline": (str,), "seed": (int,), "config": (dict,), "dataset": (dict,), "dataset.id": (str,), "dataset.path": (str,),
    "dataset.content_sha256": (str,), "env": (dict,), "env.device": (str,), "evaluation": (dict,),
    "evaluation.target_returns": (list, type(None)), "evaluation.episodes": (int,), "evaluation.every_steps": (int,),
}
_OPTIONAL_RUN_FIELDS: dict[str, tuple[type, ...]] = {"code": (dict,), "loggers": (list,), "resumes": (list,)}


def read_run_json(run_dir: Path) -> dict[str, Any]:
    """run.json of a run directory, with the fields a run is reopened from checked (a one-line error naming
    the first missing or mistyped one)."""
    path = Path(run_dir) / RUN_FILE
    if not Path(run_dir).is_dir():
        raise OffbenchError(f"{run_dir}: not a run directory (no such folder)")
    if not path.is_file():
        raise OffbenchError(f"{path}: no such file (is {run_dir} a run directory?)")
    try:
        record = json.loads(read_text(path, "run record"))
    except json.JSONDecodeError as exc:
        raise OffbenchError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(record, dict) or record.get("schema") != SCHEMA:
        schema = record.get("schema") if isinstance(record, dict) else None
        raise OffbenchError(f"{path}: unsupported run schema {schema!r} (expected {SCHEMA})")
    for name, types in {**_RUN_FIELDS, **{k: v for k, v in _OPTIONAL_RUN_FIELDS.items() if k in record}}.items():
        table, _, key = name.rpartition(".")
        holder = record[table] if table else record
        value = holder.get(key, ...)
        if value is ... or not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            problem = "missing" if value is ... else f"must be {' or '.join(t.__name__ for t in types)}, got {value!r}"[:200]
            raise OffbenchError(f"{path}: field '{name}' {problem}")
    if not 0 <= record["seed"] < 2**32:  # numpy's global seed and the evaluation episode seeds need it
        raise OffbenchError(f"{path}: field 'seed' must be between 0 and 2**32 - 1, got {record['seed']}")
    targets = record["evaluation"]["target_returns"]
    if targets is not None and not all(is_finite(t) for t in targets):
        raise OffbenchError(f"{path}: field 'evaluation.target_returns' must hold finite numbers, got {targets!r:.120}")
    return record


def read_evaluations(run_dir: Path) -> list[dict[str, Any]]:
    """evaluations.jsonl's lines in file order ([] before the first evaluation); a broken line is a one-line error."""
    path = Path(run_dir) / EVALUATIONS_FILE
    if not path.exists():
        return []
    return _jsonl_rows(path, Path(run_dir))


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


def score_metric(evaluations: list[dict[str, Any]], has_reference_scores: bool) -> str:
    """The headline field: normalised score where the card has reference scores, else success rate where
    the environment reports success, else the raw mean return."""
    if has_reference_scores:
        return "normalized_score"
    if any(record.get("success_rate") is not None for record in evaluations):
        return "success_rate"
    return "mean_return"


def summarize(evaluations: list[dict[str, Any]], headline_target: float | None, metric: str) -> dict[str, Any]:
    """`final` (the last evaluation: what tables use) and `best` (best headline score: highest, or lowest for
    LOWER_IS_BETTER metrics; earliest on ties), both at the headline target return for return-conditioned baselines."""
    headline = [record for record in evaluations if record.get("target_return") == headline_target]
    if not headline:
        return {"final": None, "best": None, "score_metric": metric}
    sign = -1.0 if metric in LOWER_IS_BETTER else 1.0
    best = max(headline, key=lambda record: (sign * record[metric], -record["step"]))
    return {"final": _summary_entry(headline[-1]), "best": _summary_entry(best), "score_metric": metric}


def _summary_entry(record: dict[str, Any]) -> dict[str, Any]:
    return {**{key: record.get(key) for key in SUMMARY_FIELDS}, **{key: record[key] for key in OPTIONAL_SUMMARY_FIELDS if key in record}}


# ---------------------------------------------------------------------------------------------- reading
# Everything below reads finished run directories for leaderboards, plots and re-evaluation. A broken rule is
# a `Refused` error naming the run directory and the rule, so `offbench submit` can say exactly why.

MAX_TEXT = 512  # characters of any one string copied from a run into a leaderboard entry
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


class Refused(OffbenchError):
    """A run (or submission) broke one named rule; the leaderboard is left as it was."""

    def __init__(self, where: str | Path, rule: str, detail: str):
        super().__init__(f"{where}: refused ({rule}): {detail}")
        self.rule = rule


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


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def is_finite(value: Any) -> bool:
    return is_number(value) and math.isfinite(value)


def same_number(a: float, b: float) -> bool:
    """Equal up to float summation order (JSON round trips are exact)."""
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)


@dataclass
class RunRecord:
    """One finished run as leaderboards and plots see it."""

    path: Path
    info: dict[str, Any]  # run.json
    evaluations: list[dict[str, Any]]  # evaluations.jsonl, in file order
    summary: dict[str, Any]  # summary.json

    @property
    def run_id(self) -> str:
        return self.info["run_id"]

    @property
    def baseline(self) -> str:
        return self.info["baseline"]

    @property
    def dataset_id(self) -> str:
        return self.info["dataset"]["id"]

    @property
    def dataset_sha256(self) -> str:
        return self.info["dataset"]["content_sha256"]

    @property
    def seed(self) -> int:
        return self.info["seed"]

    @property
    def protocol(self) -> str:
        """The evaluation protocol of run.json (runs from before protocols were recorded: in-context where they
        have in-context episodes, else single-task)."""
        evaluation = self.info["evaluation"]
        return evaluation.get("protocol") or ("in-context" if "in_context_episodes" in evaluation else "single-task")

    @property
    def headline_target(self) -> float | None:
        """The target return of the headline curve: the first of run.json's target_returns, else None."""
        targets = self.info["evaluation"].get("target_returns")
        return targets[0] if targets else None

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

    def score(self, field: str, which: str) -> Any:
        """summary.json's `final` or `best` value of one field (may be None or NaN; callers check)."""
        return self.summary[which].get(field)

    def curve_rows(self, which: str = "final") -> list[dict[str, Any]]:
        """Evaluation lines of one learning curve: those at the target return the summary's score used."""
        target = self.summary[which].get("target_return")
        return [row for row in self.evaluations if row.get("target_return") == target]

    def in_context_returns(self, which: str = "final") -> list[float] | None:
        """Return per in-context episode at the summary's step (optional field, see docs/run-directory.md)."""
        step = self.summary[which]["step"]
        for row in self.curve_rows(which):
            if row["step"] == step and row.get("in_context_returns") is not None:
                return row["in_context_returns"]
        return None

    def optimal_return(self) -> float | None:
        values = [row["optimal_return"] for row in self.evaluations if is_number(row.get("optimal_return"))]
        return values[-1] if values else None


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def read_run(path: str | Path) -> RunRecord:
    """Read and schema-check one finished run directory; raises Refused naming the rule that failed."""
    path = Path(path)
    if not path.is_dir():
        raise OffbenchError(f"{path}: no such run directory")
    info = _read_json(path / RUN_FILE, path)
    if not (path / EVALUATIONS_FILE).is_file():
        raise Refused(path, "run-files", f"no {EVALUATIONS_FILE} (not a complete run directory)")
    evaluations = _jsonl_rows(path / EVALUATIONS_FILE, path)
    summary = _read_json(path / SUMMARY_FILE, path)
    _check_run_json(path, info)
    _check_lines(path, evaluations)
    _check_summary(path, info, evaluations, summary)
    return RunRecord(path=path, info=info, evaluations=evaluations, summary=summary)


def _read_json(path: Path, run_dir: Path) -> Any:
    if not path.is_file():
        reason = "the run did not finish" if path.name == SUMMARY_FILE else "not a complete run directory"
        raise Refused(run_dir, "run-files", f"no {path.name} ({reason})")
    try:
        return json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise Refused(run_dir, "schema", f"{path.name} is not valid JSON ({exc})") from None


def _check_run_json(path: Path, info: Any) -> None:
    def bad(detail: str) -> Refused:
        return Refused(path, "schema", f"run.json {detail}")

    if not isinstance(info, dict):
        raise bad("must hold a JSON object")
    if info.get("schema") != SCHEMA:
        raise bad(f"schema is {info.get('schema')!r}, this offbench reads schema {SCHEMA}")
    for key, kind in (("run_id", str), ("baseline", str), ("seed", int), ("config", dict), ("code", dict),
                      ("dataset", dict), ("evaluation", dict)):
        if not isinstance(info.get(key), kind) or isinstance(info.get(key), bool):
            raise bad(f"'{key}' is missing or not a {kind.__name__}")
    for key in ("run_id", "baseline"):
        if not info[key] or len(info[key]) > MAX_TEXT or any(c in info[key] for c in "\n\r"):
            raise bad(f"'{key}' must be one line of 1-{MAX_TEXT} characters")
    if info["seed"] < 0:
        raise bad(f"seed {info['seed']} is negative")
    config_seed = info["config"].get("seed", info["seed"])
    if config_seed != info["seed"] or isinstance(config_seed, bool):
        raise bad(f"seed {info['seed']} differs from config.seed {config_seed!r}")
    dataset = info["dataset"]
    if not isinstance(dataset.get("id"), str) or not dataset["id"]:
        raise bad("dataset.id is missing")
    if not isinstance(dataset.get("content_sha256"), str) or not _SHA256.match(dataset["content_sha256"]):
        raise bad("dataset.content_sha256 is not a sha256 hex digest")
    evaluation = info["evaluation"]
    episodes = evaluation.get("episodes")
    if not isinstance(episodes, int) or isinstance(episodes, bool) or episodes < 1:
        raise bad(f"evaluation.episodes is {episodes!r}, not a positive integer")
    if "eval_episodes" in info["config"] and info["config"]["eval_episodes"] != episodes:
        raise bad(f"evaluation.episodes {episodes} differs from config.eval_episodes {info['config']['eval_episodes']!r}")
    targets = evaluation.get("target_returns")
    if targets is not None and (not isinstance(targets, list) or not all(is_finite(t) for t in targets)):
        raise bad("evaluation.target_returns must be null or a list of finite numbers")


def _check_lines(path: Path, evaluations: list[Any]) -> None:
    if not evaluations:
        raise Refused(path, "schema", f"{EVALUATIONS_FILE} holds no evaluation")
    previous: tuple[int, Any] | None = None
    for number, row in enumerate(evaluations, 1):
        if (not isinstance(row, dict) or not isinstance(row.get("step"), int) or isinstance(row["step"], bool)
                or row["step"] < 0 or not is_number(row.get("mean_return"))):
            raise Refused(path, "schema", f"{EVALUATIONS_FILE} line {number} needs a non-negative integer 'step' and a numeric 'mean_return'")
        key = (row["step"], row.get("target_return"))
        if previous is not None and (row["step"] < previous[0] or key == previous):
            raise Refused(path, "schema", f"{EVALUATIONS_FILE} line {number}: steps go backwards or repeat (step {row['step']})")
        previous = key


def _check_summary(path: Path, info: dict[str, Any], evaluations: list[dict[str, Any]], summary: Any) -> None:
    def bad(detail: str) -> Refused:
        return Refused(path, "schema", f"summary.json {detail}")

    if not isinstance(summary, dict):
        raise bad("must hold a JSON object")
    if summary.get("status") != "completed":
        raise Refused(path, "completed", f"summary.json status is {summary.get('status')!r}, not 'completed'")
    steps = summary.get("steps")
    if not isinstance(steps, int) or isinstance(steps, bool) or steps < 0:
        raise bad(f"'steps' is {steps!r}, not a non-negative integer")
    if "steps" in info["config"] and info["config"]["steps"] != steps:
        raise bad(f"steps {steps} differ from run.json config.steps {info['config']['steps']!r}")
    last = evaluations[-1]["step"]
    if last != steps:
        raise bad(f"steps {steps} differ from the last evaluation's step {last} (every run is evaluated at its last step)")
    targets = info["evaluation"].get("target_returns")
    headline = targets[0] if targets else None
    for which in ("final", "best"):
        block = summary.get(which)
        if not isinstance(block, dict) or not isinstance(block.get("step"), int):
            raise bad(f"'{which}' needs at least a 'step'")
        if block.get("target_return") != headline:
            raise bad(f"{which}.target_return {block.get('target_return')!r} is not the headline target {headline!r}")
        at_step = [r for r in evaluations if r["step"] == block["step"] and r.get("target_return") == headline]
        if not at_step:
            raise bad(f"'{which}' (step {block['step']}) matches no line of {EVALUATIONS_FILE}")
        for field in ("mean_return", "normalized_score", "success_rate", "regret"):
            value, line = block.get(field), at_step[0].get(field)
            if is_number(value) and is_number(line) and not (value == line or (math.isnan(value) and math.isnan(line))):
                raise bad(f"{which}.{field} = {value} disagrees with {EVALUATIONS_FILE} ({line})")
    if summary["final"]["step"] != last:
        raise bad(f"final step {summary['final']['step']} is not the last evaluation (step {last})")


def check_evaluations(run: RunRecord) -> None:
    """Every evaluation line agrees with itself and with the protocol in run.json: per-episode returns are
    finite and as many as the protocol plays, `mean_return` is their mean, success rates are fractions of
    episodes, and the multi-task (`per_task`) and in-context fields add up (docs/run-directory.md)."""
    evaluation = run.info["evaluation"]
    for number, row in enumerate(run.evaluations, 1):
        where = f"{EVALUATIONS_FILE} line {number} (step {row['step']})"

        def refuse(rule: str, detail: str) -> Refused:
            return Refused(run.path, rule, f"{where}: {detail}")

        returns = _finite_list(row.get("returns"), "returns", refuse)
        if not returns:
            raise refuse("consistency", "'returns' is empty")
        lengths = row.get("lengths")
        if not isinstance(lengths, list) or len(lengths) != len(returns) or not all(
                isinstance(n, int) and not isinstance(n, bool) and n >= 1 for n in lengths):
            raise refuse("consistency", "'lengths' must hold one positive integer per return")
        for field in ("normalized_score", "success_rate", "target_return", "regret"):
            if row.get(field) is not None and not is_finite(row[field]):
                raise refuse("metric-finite", f"{field} is {row[field]!r}, not a finite number or null")
        if not is_finite(row["mean_return"]):
            raise refuse("metric-finite", f"mean_return is {row['mean_return']!r}")
        rate = row.get("success_rate")
        if rate is not None and not 0.0 <= rate <= 1.0:
            raise refuse("metric-range", f"success_rate {rate} is outside [0, 1]")
        if run.protocol == "multi-task":
            _check_per_task(row, evaluation, returns, refuse)
        elif run.protocol == "in-context":
            _check_in_context(row, evaluation, returns, refuse)
        else:
            _check_episodes(returns, rate, evaluation["episodes"], refuse)
        if not same_number(sum(returns) / len(returns), row["mean_return"]):
            raise refuse("consistency", f"mean_return {row['mean_return']} is not the mean of its {len(returns)} returns "
                                        f"({sum(returns) / len(returns)})")


def _finite_list(values: Any, name: str, refuse) -> list[float]:
    if not isinstance(values, list) or not all(is_number(v) for v in values):
        raise refuse("schema", f"'{name}' must be a list of numbers")
    if not all(math.isfinite(v) for v in values):
        raise refuse("metric-finite", f"'{name}' holds a value that is not a finite number")
    return values


def _check_episodes(returns: list[float], rate: float | None, episodes: int, refuse) -> None:
    if len(returns) != episodes:
        raise refuse("consistency", f"{len(returns)} returns, but run.json evaluation.episodes is {episodes}")
    if rate is not None and abs(rate * episodes - round(rate * episodes)) > 1e-6:
        raise refuse("consistency", f"success_rate {rate} is not a whole number of successes out of {episodes} episodes")


def _check_per_task(row: dict[str, Any], evaluation: dict[str, Any], returns: list[float], refuse) -> None:
    """Multi-task: each task plays `episodes` episodes; the line's mean return and success rate are means over tasks."""
    per_task = row.get("per_task")
    if not isinstance(per_task, dict) or not per_task:
        raise refuse("schema", "a multi-task evaluation needs 'per_task'")
    tasks = evaluation.get("tasks")
    if isinstance(tasks, list) and list(per_task) != [str(t) for t in tasks]:
        raise refuse("consistency", "'per_task' does not list run.json evaluation.tasks, in order")
    means, rates = [], []
    for name, block in per_task.items():
        if not isinstance(block, dict) or not isinstance(block.get("task_id"), int):
            raise refuse("schema", f"per_task[{name!r}] needs an integer 'task_id'")
        task_returns = _finite_list(block.get("returns"), f"per_task[{name!r}].returns", refuse)
        successes = block.get("successes")
        if successes is not None and (not isinstance(successes, list) or not all(isinstance(s, bool) for s in successes)
                                      or len(successes) != len(task_returns)):
            raise refuse("schema", f"per_task[{name!r}].successes must be null or one true/false per return")
        _check_episodes(task_returns, None, evaluation["episodes"], refuse)
        mean = sum(task_returns) / len(task_returns)
        if not is_finite(block.get("mean_return")) or not same_number(block["mean_return"], mean):
            raise refuse("consistency", f"per_task[{name!r}].mean_return is not the mean of its returns ({mean})")
        rate = None if successes is None else sum(successes) / len(successes)
        if block.get("success_rate") != rate and not (rate is not None and is_number(block.get("success_rate"))
                                                      and same_number(block["success_rate"], rate)):
            raise refuse("consistency", f"per_task[{name!r}].success_rate {block.get('success_rate')!r} is not the fraction "
                                        f"of its successes ({rate})")
        means.append(mean)
        rates.append(rate)
    if len(returns) != evaluation["episodes"] * len(per_task):
        raise refuse("consistency", f"{len(returns)} returns, but {len(per_task)} tasks x {evaluation['episodes']} episodes")
    if not same_number(row["mean_return"], sum(means) / len(means)):
        raise refuse("consistency", "mean_return is not the mean over tasks of their mean returns")
    overall = None if None in rates else sum(rates) / len(rates)
    if (overall is None) != (row.get("success_rate") is None) or (overall is not None and not same_number(row["success_rate"], overall)):
        raise refuse("consistency", f"success_rate {row.get('success_rate')!r} is not the mean over tasks of their success rates ({overall})")


def _check_in_context(row: dict[str, Any], evaluation: dict[str, Any], returns: list[float], refuse) -> None:
    """In-context: `in_context_returns` has one mean over tasks per episode, the last of which is `mean_return`;
    `returns` holds each task's last episode; the cumulative `regret` curve ends at `regret`."""
    episodes = evaluation.get("in_context_episodes", evaluation["episodes"])
    curve = _finite_list(row.get("in_context_returns"), "in_context_returns", refuse)
    if len(curve) != episodes:
        raise refuse("consistency", f"{len(curve)} in_context_returns, but run.json says {episodes} in-context episodes")
    if not same_number(curve[-1], row["mean_return"]):
        raise refuse("consistency", f"mean_return {row['mean_return']} is not the last in-context episode's return {curve[-1]}")
    task_ids = evaluation.get("task_ids")
    if isinstance(task_ids, list) and len(returns) != len(task_ids):
        raise refuse("consistency", f"{len(returns)} returns, but run.json evaluates {len(task_ids)} tasks (one return each)")
    task_returns = row.get("task_returns")
    if task_returns is not None:
        if not isinstance(task_returns, list) or len(task_returns) != len(returns):
            raise refuse("consistency", "'task_returns' needs one list of returns per task")
        rows = [_finite_list(r, "task_returns", refuse) for r in task_returns]
        if any(len(r) != episodes for r in rows) or any(not same_number(r[-1], last) for r, last in zip(rows, returns)):
            raise refuse("consistency", "'task_returns' rows must have one return per in-context episode, the last equal to 'returns'")
        if not all(same_number(sum(column) / len(column), mean) for column, mean in zip(zip(*rows), curve)):
            raise refuse("consistency", "in_context_returns is not the mean over tasks of task_returns")
    if row.get("regret") is not None:
        regret_curve = _finite_list(row.get("in_context_regret"), "in_context_regret", refuse)
        if len(regret_curve) != episodes or not same_number(regret_curve[-1], row["regret"]):
            raise refuse("consistency", f"regret {row['regret']} is not the end of in_context_regret (one value per episode)")
