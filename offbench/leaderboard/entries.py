"""Accepted leaderboard entries (`leaderboards/<name>/entries/*.json`), read and checked for what tables rely on.

Entries are files anyone can edit in a pull request, so every one is checked again whenever it is read;
a broken one is an error naming its file. Submissions write them (offbench.leaderboard.submit).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from offbench.errors import OffbenchError
from offbench.leaderboard.spec import BenchmarkSpec
from offbench.tracking.run_dir import is_finite
from offbench.utils import safe_component

ENTRY_SCHEMA = 1


def load_entries(spec: BenchmarkSpec) -> list[tuple[Path, dict[str, Any]]]:
    """Accepted entries, oldest file name first; a malformed entry file is an error naming it."""
    out = []
    for path in sorted(spec.entries_dir.glob("*.json")):
        try:
            entry = json.loads(path.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise OffbenchError(f"{path}: accepted entry is not valid JSON ({exc})") from None
        check_entry(path, entry, spec)
        out.append((path, entry))
    return out


def check_entry(path: Path, entry: Any, spec: BenchmarkSpec) -> None:
    """What tables and pages rely on in an accepted entry (entries are files anyone can edit in a pull request)."""
    def bad(detail: str) -> OffbenchError:
        return OffbenchError(f"{path}: {detail}")

    if not isinstance(entry, dict) or entry.get("schema") != ENTRY_SCHEMA or entry.get("benchmark") != spec.name:
        raise bad(f"not an entry of benchmark {spec.name} (schema {ENTRY_SCHEMA})")
    for key in ("label", "baseline"):
        safe_component(entry.get(key), f"{path}: entry {key}")
    dataset = entry.get("dataset")
    if not isinstance(dataset, dict) or dataset.get("id") not in spec.datasets:
        raise bad(f"dataset is not one of {spec.name}'s: {', '.join(spec.datasets)}")
    if entry.get("metric") != spec.metric.name or entry.get("score") != spec.score:
        raise bad(f"scored as {entry.get('score')!r} {entry.get('metric')!r}; the benchmark scores {spec.score} {spec.metric.name}")
    if not isinstance(entry.get("config_sha256"), str) or not isinstance(entry.get("submitted_at"), str):
        raise bad("config_sha256 and submitted_at must be strings")
    runs = entry.get("runs")
    if not isinstance(runs, list) or not runs:
        raise bad("'runs' must be a non-empty list")
    for number, run in enumerate(runs, 1):
        if not isinstance(run, dict):
            raise bad(f"run {number} is not an object")
        seed, curve, code = run.get("seed"), run.get("curve"), run.get("code")
        if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
            raise bad(f"run {number}: seed {seed!r} is not a non-negative integer")
        if not is_finite(run.get("score")) or not isinstance(run.get("run_id"), str) or not isinstance(code, dict):
            raise bad(f"run {number}: needs a finite 'score', a 'run_id' and a 'code' object")
        if (not isinstance(curve, dict) or not isinstance(curve.get("step"), list) or not isinstance(curve.get("score"), list)
                or len(curve["step"]) != len(curve["score"]) or not all(is_finite(v) for v in curve["score"] + curve["step"])):
            raise bad(f"run {number}: 'curve' needs equally long lists of finite steps and scores")
        if "per_task" in run and (not isinstance(run["per_task"], list) or not all(
                isinstance(t, dict) and isinstance(t.get("task"), str) and is_finite(t.get("score")) for t in run["per_task"])):
            raise bad(f"run {number}: 'per_task' must list {{task, score}} objects with finite scores")
        if "in_context_returns" in run and (not isinstance(run["in_context_returns"], list)
                                            or not all(is_finite(v) for v in run["in_context_returns"])):
            raise bad(f"run {number}: 'in_context_returns' must be a list of finite numbers")
