"""Submissions: validate run directories against a benchmark, then add them as JSON entries.

An entry is one baseline on one dataset with at least `min_seeds` seeds of one config. It carries
what it takes to trace every number back (config, code version, dataset checksum, per-seed scores,
reduced learning curves). Entries are written under a file lock, each to a new file (temp file then
rename); an accepted entry is never rewritten or deleted, and a refused submission writes nothing.

Rules, in the order they are checked (the refusal names the rule):
  run-files, schema, completed   the run directory follows docs/run-directory.md and finished
  benchmark-dataset              the run's dataset is one of the benchmark's datasets
  dataset-checksum               the run's dataset content sha256 equals the benchmark's pin, else the
                                 card's recorded checksum, else the checksum stored in the local copy
  protocol                       run.json `evaluation` (and summary `steps`) equal the benchmark's protocol,
                                 and the run was evaluated in the dataset card's environment
  metric-finite, metric-range    the score and its learning curve are finite numbers (success in [0, 1])
  config-consistency             one entry = one baseline and one config (seed aside); a row (label) keeps
                                 one config per dataset across entries: use --label for a variant
  seed-count, duplicate          at least min_seeds distinct seeds; no run, and no seed of a row, twice
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from offbench.errors import OffbenchError, require
from offbench.leaderboard.runs import Refused, RunRecord, read_run
from offbench.leaderboard.spec import BenchmarkSpec
from offbench.utils import atomic_write_json

ENTRY_SCHEMA = 1
CURVE_POINTS = 64  # learning curves are kept at this many evaluation steps at most
NOT_CONFIG = ("seed",)  # config keys that may differ between the seeds of one entry
_LABEL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")


def config_without_seed(run: RunRecord) -> dict[str, Any]:
    return {k: v for k, v in run.info["config"].items() if k not in NOT_CONFIG}


def config_sha256(config: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()


def expected_checksum(spec: BenchmarkSpec, dataset_id: str) -> tuple[str | None, str]:
    """(checksum, where it came from) a run's dataset must match; None when nothing can vouch for it."""
    if dataset_id in spec.dataset_checksums:
        return spec.dataset_checksums[dataset_id], f"{spec.path} dataset_checksums"
    from offbench.data.cards import get_card
    from offbench.data.resolve import native_path
    from offbench.data.store import is_native, stored_checksum

    card = get_card(dataset_id)
    recorded = card.extra.get("content_sha256")
    if isinstance(recorded, str):
        return recorded, f"card {card.card_path}"
    local = native_path(card)
    if is_native(local):
        return stored_checksum(local), f"local copy {local}"
    return None, f"no checksum pinned in {spec.path} or the card, and no local copy (run `offbench download {dataset_id}`)"


def check_run(run: RunRecord, spec: BenchmarkSpec) -> float:
    """Apply the per-run rules; return the run's score under the benchmark's metric."""
    where = run.path
    if run.dataset_id not in spec.datasets:
        raise Refused(where, "benchmark-dataset", f"dataset '{run.dataset_id}' is not one of {spec.name}'s: {', '.join(spec.datasets)}")
    expected, source = expected_checksum(spec, run.dataset_id)
    if expected is None:
        raise Refused(where, "dataset-checksum", f"cannot check dataset '{run.dataset_id}': {source}")
    if run.dataset_sha256 != expected:
        raise Refused(
            where, "dataset-checksum",
            f"dataset '{run.dataset_id}' content sha256 {run.dataset_sha256[:12]}... differs from {expected[:12]}... ({source})",
        )
    _check_protocol(run, spec)
    field = spec.metric.field
    score = run.score(field, spec.score)
    if not isinstance(score, (int, float)) or isinstance(score, bool) or not math.isfinite(score):
        raise Refused(where, "metric-finite", f"{spec.score} {field} is {score!r}, not a finite number")
    for row in run.curve_rows(spec.score):
        value = row.get(field)
        if not isinstance(value, (int, float)) or not math.isfinite(value):
            raise Refused(where, "metric-finite", f"evaluations.jsonl step {row['step']}: {field} is {value!r}")
    if spec.metric.name == "success_rate" and not 0.0 <= score <= 1.0:
        raise Refused(where, "metric-range", f"success_rate {score} is outside [0, 1]")
    if spec.metric.name == "in_context_return":
        returns = run.in_context_returns(spec.score)
        if returns is None or len(returns) != spec.protocol["in_context_episodes"]:
            raise Refused(where, "protocol", f"the {spec.score} evaluation has no in_context_returns of length {spec.protocol['in_context_episodes']}")
        if not all(isinstance(v, (int, float)) and math.isfinite(v) for v in returns):
            raise Refused(where, "metric-finite", "in_context_returns holds a value that is not a finite number")
        if not math.isclose(returns[-1], score, rel_tol=1e-9, abs_tol=1e-12):
            raise Refused(where, "schema", f"{spec.score} mean_return {score} is not the last in-context episode's return {returns[-1]}")
    return float(score)


def _check_protocol(run: RunRecord, spec: BenchmarkSpec) -> None:
    evaluation = run.info["evaluation"]
    for key, wanted in spec.protocol.items():
        if key == "steps":
            got = run.summary["steps"]
        elif key == "target_returns":  # binds return-conditioned runs only: BC or CQL runs have none
            if not evaluation.get("target_returns"):
                continue
            got = sorted(float(v) for v in evaluation["target_returns"])
            wanted = sorted(float(v) for v in wanted)
        else:
            got = evaluation.get(key)
        if got != wanted:
            what = "summary.json steps" if key == "steps" else f"run.json evaluation.{key}"
            raise Refused(run.path, "protocol", f"{what} is {got!r}; benchmark {spec.name} requires {wanted!r}")
    from offbench.data.cards import get_card

    card_env = _environment(get_card(run.dataset_id).env)
    run_env = evaluation.get("env")
    if card_env["id"] and isinstance(run_env, dict) and _environment(run_env) != card_env:
        raise Refused(run.path, "protocol", f"evaluated in {_environment(run_env)}, but the dataset card's environment is {card_env}")


def _environment(env: dict[str, Any]) -> dict[str, Any]:
    """What defines an evaluation environment in a card's [env] table (notes and the like aside)."""
    return {"id": env.get("id"), "suite": env.get("suite", "gymnasium"), "kwargs": env.get("kwargs") or {}}


def _reduced(values: list[Any]) -> list[Any]:
    """At most CURVE_POINTS evenly spaced items, first and last kept."""
    if len(values) <= CURVE_POINTS:
        return list(values)
    keep = np.unique(np.linspace(0, len(values) - 1, CURVE_POINTS).round().astype(int))
    return [values[i] for i in keep]


def make_entry(spec: BenchmarkSpec, label: str, runs: list[RunRecord], scores: list[float]) -> dict[str, Any]:
    """The JSON entry for one baseline, dataset and config, with one record per seed."""
    first = runs[0]
    records = []
    for run, score in sorted(zip(runs, scores), key=lambda pair: pair[0].seed):
        curve = _reduced(run.curve_rows(spec.score))
        record = {
            "run_id": run.run_id,
            "seed": run.seed,
            "path": str(run.path),
            "fingerprint": run.fingerprint,
            "code": run.info["code"],
            "env": run.info.get("env"),
            "started_at": run.info.get("started_at"),
            "steps": run.summary["steps"],
            "wall_time_s": run.summary.get("wall_time_s"),
            "final": run.summary["final"],
            "best": run.summary["best"],
            "score": score,
            "curve": {"step": [r["step"] for r in curve], "score": [r[spec.metric.field] for r in curve]},
        }
        in_context, optimal = run.in_context_returns(spec.score), run.optimal_return()
        if in_context is not None:
            record["in_context_returns"] = in_context
        if optimal is not None:
            record["optimal_return"] = optimal
        records.append(record)
    config = config_without_seed(first)
    return {
        "schema": ENTRY_SCHEMA,
        "benchmark": spec.name,
        "label": label,
        "baseline": first.baseline,
        "dataset": {k: first.info["dataset"].get(k) for k in ("id", "content_sha256", "format")},
        "metric": spec.metric.name,
        "score": spec.score,
        "evaluation": first.info["evaluation"],
        "config": config,
        "config_sha256": config_sha256(config),
        "submitted_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "runs": records,
    }


def validate_runs(spec: BenchmarkSpec, runs: list[RunRecord], label: str | None = None) -> list[dict[str, Any]]:
    """Entries for a set of runs (grouped by baseline, dataset and config); raises Refused on the first broken rule."""
    if label is not None and not _LABEL.match(label):
        raise OffbenchError(f"label {label!r}: use letters, digits and . _ + - (it names the table row)")
    if label is not None and len({run.baseline for run in runs}) > 1:
        raise OffbenchError(f"--label {label} names one row, but the runs hold several baselines: submit them separately")
    scores = {run.path: check_run(run, spec) for run in runs}
    groups: dict[tuple[str, str], list[RunRecord]] = defaultdict(list)
    for run in runs:
        groups[(run.baseline, run.dataset_id)].append(run)
    entries = []
    for (baseline, dataset_id), members in groups.items():
        configs = {config_sha256(config_without_seed(r)) for r in members}
        if len(configs) > 1:
            raise Refused(
                members[0].path, "config-consistency",
                f"the {baseline} runs on {dataset_id} use {len(configs)} different configs; submit each config separately (with --label)",
            )
        seen: dict[int, Path] = {}
        for run in members:
            if run.seed in seen:
                raise Refused(run.path, "duplicate", f"seed {run.seed} is also submitted by {seen[run.seed]}")
            seen[run.seed] = run.path
        if len(seen) < spec.min_seeds:
            raise Refused(
                members[0].path, "seed-count",
                f"{baseline} on {dataset_id} has {len(seen)} seed(s); benchmark {spec.name} needs at least {spec.min_seeds}",
            )
        entries.append(make_entry(spec, label or baseline, members, [scores[r.path] for r in members]))
    return entries


def load_entries(spec: BenchmarkSpec) -> list[tuple[Path, dict[str, Any]]]:
    """Accepted entries, oldest file name first; a malformed entry file is an error naming it."""
    out = []
    for path in sorted(spec.entries_dir.glob("*.json")):
        try:
            entry = json.loads(path.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise OffbenchError(f"{path}: accepted entry is not valid JSON ({exc})") from None
        if not isinstance(entry, dict) or entry.get("schema") != ENTRY_SCHEMA or entry.get("benchmark") != spec.name:
            raise OffbenchError(f"{path}: not an entry of benchmark {spec.name} (schema {ENTRY_SCHEMA})")
        out.append((path, entry))
    return out


def check_against_accepted(entry: dict[str, Any], accepted: list[tuple[Path, dict[str, Any]]]) -> None:
    row, dataset_id = entry["label"], entry["dataset"]["id"]
    for path, old in accepted:
        old_runs = {(r["run_id"], r["fingerprint"]) for r in old["runs"]}
        for record in entry["runs"]:
            if any(record["run_id"] == rid or record["fingerprint"] == fp for rid, fp in old_runs):
                raise Refused(record["path"], "duplicate", f"run {record['run_id']} is already in accepted entry {path.name}")
        if old["label"] == row and old["baseline"] != entry["baseline"]:
            raise Refused(
                entry["runs"][0]["path"], "config-consistency",
                f"row '{row}' holds baseline {old['baseline']} ({path.name}), not {entry['baseline']}; choose another --label",
            )
        if old["label"] == row and old["dataset"]["id"] == dataset_id:
            if old["config_sha256"] != entry["config_sha256"]:
                raise Refused(
                    entry["runs"][0]["path"], "config-consistency",
                    f"row '{row}' on {dataset_id} already holds another config ({path.name}); submit this one with --label NAME",
                )
            old_seeds = {r["seed"] for r in old["runs"]}
            for record in entry["runs"]:
                if record["seed"] in old_seeds:
                    raise Refused(record["path"], "duplicate", f"row '{row}' on {dataset_id} already has seed {record['seed']} ({path.name})")


def _entry_filename(entry: dict[str, Any]) -> str:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S")
    dataset_slug = re.sub(r"[^A-Za-z0-9._-]+", "-", entry["dataset"]["id"])
    digest = hashlib.sha256("".join(r["fingerprint"] for r in entry["runs"]).encode()).hexdigest()[:10]
    return f"{stamp}--{entry['label']}--{dataset_slug}--{digest}.json"


def submit(spec: BenchmarkSpec, run_dirs: list[Path], label: str | None = None, render: bool = True) -> list[Path]:
    """Validate run directories and add them as new entries; re-render the tables. Returns the entry files."""
    if render:  # fail before anything is accepted, not half-way
        require("rliable", "stats")
        require("tabulate", "stats")
    runs = [read_run(path) for path in run_dirs]
    entries = validate_runs(spec, runs, label)
    written: list[Path] = []
    spec.entries_dir.mkdir(parents=True, exist_ok=True)
    with spec.lock:
        accepted = load_entries(spec)
        for entry in entries:  # check all before writing any: a refusal leaves the leaderboard as it was
            check_against_accepted(entry, accepted)
        for entry in entries:
            path = spec.entries_dir / _entry_filename(entry)
            if path.exists():  # never rewrite an accepted entry
                raise OffbenchError(f"{path}: an entry with this name already exists")
            written.append(atomic_write_json(path, entry))
        if render:
            from offbench.leaderboard.render import render_benchmark

            render_benchmark(spec)
    return written
