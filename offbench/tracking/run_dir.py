"""The run directory contract (docs/run-directory.md): what a run records about itself, and its summary."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from offbench.errors import OffbenchError
from offbench.tracking.loggers import EVALUATIONS_FILE
from offbench.utils import atomic_write_json

SCHEMA = 1
RUN_FILE = "run.json"
SUMMARY_FILE = "summary.json"
CHECKPOINT = Path("checkpoints") / "last.pt"
SUMMARY_FIELDS = ("step", "mean_return", "normalized_score", "success_rate", "target_return")
OPTIONAL_SUMMARY_FIELDS = ("regret",)  # in-context evaluations only
LOWER_IS_BETTER = frozenset({"regret"})  # headline metrics where the smaller number is the better run


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def create_run_dir(path: Path) -> Path:
    """Make a new, empty run directory; one that exists is never reused or overwritten."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
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
    import numpy
    import torch

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
        "device": device,
    }
    if device.startswith("cuda"):
        info["gpu"] = torch.cuda.get_device_name(torch.device(device))
    return info


def write_run_json(run_dir: Path, record: dict[str, Any]) -> None:
    atomic_write_json(run_dir / RUN_FILE, {"schema": SCHEMA, **record})


def read_run_json(run_dir: Path) -> dict[str, Any]:
    path = Path(run_dir) / RUN_FILE
    try:
        record = json.loads(path.read_text())
    except FileNotFoundError:
        raise OffbenchError(f"{path}: no such file (is {run_dir} a run directory?)") from None
    except json.JSONDecodeError as exc:
        raise OffbenchError(f"{path}: not valid JSON ({exc})") from None
    if record.get("schema") != SCHEMA:
        raise OffbenchError(f"{path}: unsupported run schema {record.get('schema')!r} (expected {SCHEMA})")
    return record


def read_evaluations(run_dir: Path) -> list[dict[str, Any]]:
    path = Path(run_dir) / EVALUATIONS_FILE
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


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
