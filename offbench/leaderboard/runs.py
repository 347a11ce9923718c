"""Reading run directories (docs/run-directory.md): run.json, evaluations.jsonl, summary.json, and nothing else.

Every problem is a `Refused` error that names the run directory and the rule that failed, so
`offbench submit` and the leaderboard preview can say exactly why a run is not shown.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from offbench.errors import OffbenchError

RUN_FILES = ("run.json", "evaluations.jsonl", "summary.json")
RUN_SCHEMA = 1
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


class Refused(OffbenchError):
    """A run (or submission) broke one named rule; the leaderboard is left as it was."""

    def __init__(self, where: str | Path, rule: str, detail: str):
        super().__init__(f"{where}: refused ({rule}): {detail}")
        self.rule = rule


def is_run_dir(path: Path) -> bool:
    return (path / "run.json").is_file()


def expand_run_dirs(paths: list[Path]) -> list[Path]:
    """Run directories named directly, or found one level down in a folder of runs (e.g. `runs/`)."""
    found: list[Path] = []
    for path in paths:
        path = Path(path)
        if is_run_dir(path):
            found.append(path)
        elif path.is_dir() and any(is_run_dir(child) for child in path.iterdir()):
            found.extend(sorted(child for child in path.iterdir() if is_run_dir(child)))
        elif path.is_dir():
            raise Refused(path, "run-files", "no run.json here or in its sub-folders (not a run directory)")
        else:
            raise OffbenchError(f"{path}: no such run directory")
    return found


def _read_json(path: Path, run_dir: Path) -> Any:
    if not path.is_file():
        reason = "the run did not finish" if path.name == "summary.json" else "not a complete run directory"
        raise Refused(run_dir, "run-files", f"no {path.name} ({reason})")
    try:
        return json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise Refused(run_dir, "schema", f"{path.name} is not valid JSON ({exc})") from None


def _read_jsonl(path: Path, run_dir: Path) -> list[Any]:
    if not path.is_file():
        raise Refused(run_dir, "run-files", f"no {path.name} (not a complete run directory)")
    rows = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise Refused(run_dir, "schema", f"{path.name} line {number} is not valid JSON ({exc})") from None
    return rows


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


@dataclass
class RunRecord:
    """One finished run as the leaderboard sees it."""

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

    @cached_property
    def fingerprint(self) -> str:
        """sha256 of the three files the leaderboard reads: the same run submitted twice is caught."""
        digest = hashlib.sha256()
        for name in RUN_FILES:
            digest.update((self.path / name).read_bytes())
        return digest.hexdigest()

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
        values = [row["optimal_return"] for row in self.evaluations if _is_number(row.get("optimal_return"))]
        return values[-1] if values else None


def read_run(path: str | Path) -> RunRecord:
    """Read and schema-check one run directory; raises Refused naming the rule that failed."""
    path = Path(path)
    if not path.is_dir():
        raise OffbenchError(f"{path}: no such run directory")
    info = _read_json(path / "run.json", path)
    evaluations = _read_jsonl(path / "evaluations.jsonl", path)
    summary = _read_json(path / "summary.json", path)
    _check_schema(path, info, evaluations, summary)
    return RunRecord(path=path, info=info, evaluations=evaluations, summary=summary)


def _check_schema(path: Path, info: Any, evaluations: list[Any], summary: Any) -> None:
    def bad(detail: str) -> Refused:
        return Refused(path, "schema", detail)

    if not isinstance(info, dict):
        raise bad("run.json must hold a JSON object")
    if info.get("schema") != RUN_SCHEMA:
        raise bad(f"run.json schema is {info.get('schema')!r}, this offbench reads schema {RUN_SCHEMA}")
    for key, kind in (("run_id", str), ("baseline", str), ("seed", int), ("config", dict), ("code", dict),
                      ("dataset", dict), ("evaluation", dict)):
        if not isinstance(info.get(key), kind) or isinstance(info.get(key), bool):
            raise bad(f"run.json '{key}' is missing or not a {kind.__name__}")
    dataset = info["dataset"]
    if not isinstance(dataset.get("id"), str) or not dataset["id"]:
        raise bad("run.json dataset.id is missing")
    if not isinstance(dataset.get("content_sha256"), str) or not _SHA256.match(dataset["content_sha256"]):
        raise bad("run.json dataset.content_sha256 is not a sha256 hex digest")
    if not isinstance(info["evaluation"].get("episodes"), int):
        raise bad("run.json evaluation.episodes is missing")
    if not evaluations:
        raise bad("evaluations.jsonl holds no evaluation")
    previous: tuple[int, Any] | None = None
    for number, row in enumerate(evaluations, 1):
        if not isinstance(row, dict) or not isinstance(row.get("step"), int) or not _is_number(row.get("mean_return")):
            raise bad(f"evaluations.jsonl line {number} needs an integer 'step' and a numeric 'mean_return'")
        key = (row["step"], row.get("target_return"))
        if previous is not None and (row["step"] < previous[0] or key == previous):
            raise bad(f"evaluations.jsonl line {number}: steps go backwards or repeat (step {row['step']})")
        previous = key
    if not isinstance(summary, dict):
        raise bad("summary.json must hold a JSON object")
    if summary.get("status") != "completed":
        raise Refused(path, "completed", f"summary.json status is {summary.get('status')!r}, not 'completed'")
    if not isinstance(summary.get("steps"), int):
        raise bad("summary.json 'steps' is missing")
    for which in ("final", "best"):
        block = summary.get(which)
        if not isinstance(block, dict) or not isinstance(block.get("step"), int):
            raise bad(f"summary.json '{which}' needs at least a 'step'")
        at_step = [r for r in evaluations if r["step"] == block["step"] and r.get("target_return") == block.get("target_return")]
        if not at_step:
            raise bad(f"summary.json '{which}' (step {block['step']}) matches no line of evaluations.jsonl")
        for field in ("mean_return", "normalized_score", "success_rate"):
            value = block.get(field)
            if _is_number(value) and _is_number(at_step[0].get(field)) and not _same(value, at_step[0][field]):
                raise bad(f"summary.json {which}.{field} = {value} disagrees with evaluations.jsonl ({at_step[0][field]})")
    last = evaluations[-1]["step"]
    if summary["final"]["step"] != last:
        raise bad(f"summary.json final step {summary['final']['step']} is not the last evaluation (step {last})")


def _same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
