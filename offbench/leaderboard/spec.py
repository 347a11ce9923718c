"""Benchmark definitions: `leaderboards/<name>/benchmark.toml` says which runs a leaderboard may show.

    title = "Pendulum, scripted controller data"
    description = "..."
    datasets = ["pendulum-scripted"]      # dataset ids (cards); one table column each
    metric = "normalized_score"           # normalized_score | success_rate | mean_return | in_context_return | regret
    score = "final"                       # final (default) | best; a table never mixes the two
    min_seeds = 3                         # seeds a submission must bring for one baseline and dataset
    bootstrap_reps = 2000                 # stratified-bootstrap replications for every interval (optional)
    [evaluation]                          # the protocol; every key given must equal the run's run.json
    episodes = 10                         # evaluation episodes per evaluation (optional)
    every_steps = 1000                    # schedule (optional)
    steps = 5000                          # training updates, summary.json `steps` (optional)
    target_returns = [6000.0, 12000.0]    # return-conditioned runs (DT) must use exactly these (optional)
    in_context_episodes = 20              # in-context benchmarks only
    [evaluation.baseline.dt]              # optional: what differs for one baseline (its source's protocol)
    episodes = 100
    [dataset_checksums]                   # optional pins of each dataset's content sha256
    "pendulum-scripted" = "..."
    [populate]                            # how scripts/populate_leaderboards.py runs our own baselines
    baselines = ["bc", "iql"]
    seeds = [0, 1, 2]
    set = ["key=value"]                   # extra `--set` options for `offbench run baseline`
    [[reported]]                          # published numbers shown beside ours, marked, never in our statistics
    label = "CQL"
    source = { paper = "...", table = "...", version = "...", url = "https://..." }   # url optional
    note = "..."                          # optional: what differs from our protocol
    scores = { "pendulum-scripted" = { mean = 47.0, std = 0.2 } }   # std optional; in the benchmark metric's units
"""

from __future__ import annotations

import math
import os
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from filelock import FileLock

from offbench.errors import OffbenchError
from offbench.paths import builtin_dir
from offbench.stats import BOOTSTRAP_REPS, METRICS, Metric

REPORTED_TEXT = 300  # characters of any one field of a reported row's source or note
SOURCE_KEYS = ("paper", "table", "version")  # what every reported row must say about where its numbers come from
SCORE_KINDS = ("final", "best")
PROTOCOL_KEYS = ("episodes", "every_steps", "steps", "target_returns", "in_context_episodes")
_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]*$")


@dataclass(frozen=True)
class ReportedRow:
    """Published numbers (not our runs): shown in the tables, marked as reported, never in our statistics."""

    label: str
    source: dict[str, str]  # paper, table, version; url optional
    scores: dict[str, tuple[float, float | None]]  # dataset -> (mean, spread as published, or None)
    note: str = ""


@dataclass(frozen=True)
class BenchmarkSpec:
    name: str
    title: str
    description: str
    datasets: tuple[str, ...]
    metric: Metric
    score: str
    min_seeds: int
    protocol: dict[str, Any]
    dataset_checksums: dict[str, str] = field(default_factory=dict)
    bootstrap_reps: int = BOOTSTRAP_REPS
    populate: dict[str, Any] = field(default_factory=dict)
    reported: tuple[ReportedRow, ...] = ()
    path: Path | None = None

    @property
    def folder(self) -> Path:
        assert self.path is not None
        return self.path.parent

    @property
    def entries_dir(self) -> Path:
        return self.folder / "entries"

    @property
    def lock(self) -> FileLock:
        """The one lock that submissions and re-renders of this benchmark take, so none interleave."""
        return FileLock(str(self.folder / ".submit.lock"))

    def protocol_for(self, baseline: str) -> dict[str, Any]:
        """The protocol a run of `baseline` must follow: the benchmark's, with that baseline's own keys over it."""
        return {**{k: v for k, v in self.protocol.items() if k != "baseline"},
                **self.protocol.get("baseline", {}).get(baseline, {})}

    @property
    def score_label(self) -> str:
        """What every cell holds, e.g. 'final normalised score (0 = random, 100 = expert reference)'."""
        return f"{self.score} {self.metric.label}"


def leaderboards_root(root: str | Path | None = None) -> Path:
    """Folder holding one sub-folder per benchmark: --root, else $OFFBENCH_LEADERBOARDS, else the checkout's."""
    if root is not None:
        return Path(root)
    if os.environ.get("OFFBENCH_LEADERBOARDS"):
        return Path(os.environ["OFFBENCH_LEADERBOARDS"])
    return builtin_dir("leaderboards")


def known_benchmarks(root: str | Path | None = None) -> list[str]:
    folder = leaderboards_root(root)
    return sorted(p.parent.name for p in folder.glob("*/benchmark.toml")) if folder.is_dir() else []


def load_spec(name: str, root: str | Path | None = None) -> BenchmarkSpec:
    """The benchmark called `name`; an unknown name is a one-line error listing the known ones."""
    folder = leaderboards_root(root)
    path = folder / name / "benchmark.toml"
    if not _NAME.match(name) or not path.is_file():
        known = ", ".join(known_benchmarks(root)) or "none"
        raise OffbenchError(f"unknown benchmark '{name}' in {folder} (known: {known})")
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise OffbenchError(f"{path}: malformed TOML ({exc})") from None
    return spec_from_dict(name, data, path)


def spec_from_dict(name: str, data: dict[str, Any], path: Path | None = None) -> BenchmarkSpec:
    where = str(path or f"benchmark '{name}'")

    def fail(problem: str) -> OffbenchError:
        return OffbenchError(f"{where}: {problem}")

    datasets = data.get("datasets")
    if not isinstance(datasets, list) or not datasets or not all(isinstance(d, str) and d for d in datasets):
        raise fail("'datasets' must be a non-empty list of dataset ids")
    if len(set(datasets)) != len(datasets):
        raise fail("'datasets' lists a dataset twice")
    metric = data.get("metric")
    if metric not in METRICS:
        raise fail(f"'metric' must be one of {', '.join(METRICS)}, got {metric!r}")
    score = data.get("score", "final")
    if score not in SCORE_KINDS:
        raise fail(f"'score' must be 'final' or 'best', got {score!r}")
    min_seeds = data.get("min_seeds", 3)
    if not isinstance(min_seeds, int) or min_seeds < 1:
        raise fail("'min_seeds' must be a positive integer")
    reps = data.get("bootstrap_reps", BOOTSTRAP_REPS)
    if not isinstance(reps, int) or reps < 100:
        raise fail("'bootstrap_reps' must be an integer >= 100")
    protocol = data.get("evaluation")
    if not isinstance(protocol, dict) or not protocol:
        raise fail(f"[evaluation] must give the protocol (any of {', '.join(PROTOCOL_KEYS)})")
    per_baseline = protocol.get("baseline", {})
    if not isinstance(per_baseline, dict) or not all(isinstance(v, dict) for v in per_baseline.values()):
        raise fail("[evaluation.baseline.NAME] tables must hold protocol keys")
    for where, keys in [("evaluation", {k: v for k, v in protocol.items() if k != "baseline"}),
                        *((f"evaluation.baseline.{name}", keys) for name, keys in per_baseline.items())]:
        _check_protocol_keys(where, keys, fail)
    if metric in ("in_context_return", "regret") and "in_context_episodes" not in protocol:
        raise fail(f"metric '{metric}' needs evaluation.in_context_episodes")
    checksums = data.get("dataset_checksums", {})
    for dataset_id, sha in checksums.items():
        if dataset_id not in datasets:
            raise fail(f"dataset_checksums names '{dataset_id}', which is not in 'datasets'")
        if not (isinstance(sha, str) and re.fullmatch(r"[0-9a-f]{64}", sha)):
            raise fail(f"dataset_checksums.{dataset_id} must be 64 lowercase hex characters")
    return BenchmarkSpec(
        name=name,
        title=str(data.get("title", name)),
        description=str(data.get("description", "")).strip(),
        datasets=tuple(datasets),
        metric=METRICS[metric],
        score=score,
        min_seeds=min_seeds,
        protocol=dict(protocol),
        dataset_checksums=dict(checksums),
        bootstrap_reps=reps,
        populate=dict(data.get("populate", {})),
        reported=tuple(_reported_row(row, datasets, fail) for row in _reported_list(data.get("reported", []), fail)),
        path=path,
    )


def _check_protocol_keys(where: str, protocol: dict[str, Any], fail) -> None:
    unknown = set(protocol) - set(PROTOCOL_KEYS)
    if unknown:
        raise fail(f"[{where}] has unknown keys {sorted(unknown)} (known: {', '.join(PROTOCOL_KEYS)})")
    for key, value in protocol.items():
        if key == "target_returns":
            if not isinstance(value, list) or not all(isinstance(v, (int, float)) for v in value):
                raise fail(f"{where}.target_returns must be a list of numbers ([] for none)")
        elif not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise fail(f"{where}.{key} must be a positive integer")


def _reported_list(rows: Any, fail) -> list[dict[str, Any]]:
    if not isinstance(rows, list) or not all(isinstance(row, dict) for row in rows):
        raise fail("[[reported]] must be an array of tables")
    labels = [row.get("label") for row in rows]
    if len(set(map(str, labels))) != len(labels):
        raise fail("[[reported]] names a label twice")
    return rows


def _one_line(value: Any, what: str, fail, limit: int = REPORTED_TEXT) -> str:
    if not isinstance(value, str) or not value.strip() or len(value) > limit or any(c in value for c in "\n\r"):
        raise fail(f"{what} must be one line of 1-{limit} characters, got {value!r:.80}")
    return value


def _reported_row(row: dict[str, Any], datasets: list[str], fail) -> ReportedRow:
    label = _one_line(row.get("label"), "reported label", fail, limit=64)
    source = row.get("source")
    if not isinstance(source, dict) or any(key not in source for key in SOURCE_KEYS):
        raise fail(f"reported row '{label}': source needs {', '.join(SOURCE_KEYS)} (and optionally url)")
    unknown = set(source) - {*SOURCE_KEYS, "url"}
    if unknown:
        raise fail(f"reported row '{label}': unknown source keys {sorted(unknown)}")
    clean_source = {key: _one_line(value, f"reported row '{label}' source.{key}", fail) for key, value in source.items()}
    if "url" in clean_source and not clean_source["url"].startswith("https://"):
        raise fail(f"reported row '{label}': source.url must start with https://")
    scores = row.get("scores")
    if not isinstance(scores, dict) or not scores:
        raise fail(f"reported row '{label}': scores must map dataset ids to {{ mean = ..., std = ... }}")
    parsed = {}
    for dataset_id, value in scores.items():
        if dataset_id not in datasets:
            raise fail(f"reported row '{label}': '{dataset_id}' is not one of the benchmark's datasets")
        value = value if isinstance(value, dict) else {"mean": value}
        mean, spread = value.get("mean"), value.get("std")
        if set(value) - {"mean", "std"} or not _finite(mean) or (spread is not None and not (_finite(spread) and spread >= 0)):
            raise fail(f"reported row '{label}': scores.{dataset_id} must be a finite mean and an optional std >= 0")
        parsed[dataset_id] = (float(mean), None if spread is None else float(spread))
    note = "" if row.get("note") is None else _one_line(row["note"], f"reported row '{label}' note", fail)
    unknown = set(row) - {"label", "source", "scores", "note"}
    if unknown:
        raise fail(f"reported row '{label}': unknown keys {sorted(unknown)}")
    return ReportedRow(label=label, source=clean_source, scores=parsed, note=note)


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
