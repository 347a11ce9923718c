"""Submissions: validate run directories against a benchmark, then add them as JSON entries.

An entry is one baseline on one dataset with at least `min_seeds` seeds of one config. It carries
what it takes to trace every number back (config, code version, dataset checksum, per-seed scores,
reduced learning curves, what each run is). Entries are written under the benchmark's lock, each to a
new file (temp file then rename); an accepted entry is never rewritten or deleted, and a refused
submission writes nothing.

Rules, in the order they are checked (the refusal names the rule):
  run-files, schema, completed   the run directory follows docs/run-directory.md (with its final checkpoint)
                                 and finished; fields have their types and ranges, seeds are non-negative
                                 integers, steps agree between config, summary and the last evaluation
  baseline, label                the run's baseline is a registered baseline; the row name (--label, or the
                                 baseline by default) is one safe file-name component
  benchmark-dataset              the run's dataset is one of the benchmark's datasets
  dataset-checksum               the run's dataset content sha256 equals the benchmark's pin, else the
                                 card's recorded checksum, else the checksum stored in the local copy
  metric-finite, metric-range,   every evaluation's returns are finite, as many as the protocol plays, and
  consistency, metric            agree with its mean, success rate, per-task and in-context fields; its score
                                 is recomputed with the benchmark's own card (offbench.leaderboard.scoring)
  protocol                       run.json `evaluation` (and summary `steps`) equal the benchmark's protocol,
                                 and the run was evaluated in the dataset card's environment; an in-context
                                 run on its held-out tasks only (not validation or train: boards report held-out)
  free-text                      every string copied from the run into the entry is at most MAX_TEXT long,
                                 every copied block at most MAX_BLOCK bytes of JSON
  config-consistency             one entry = one baseline and one config (seed aside); a row (label) keeps
                                 one config per dataset across entries: use --label for a variant
  seed-count, duplicate          at least min_seeds distinct seeds; no run twice, found by what it is (its
                                 evaluations and checkpoint), not by its name; no seed of a row twice
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from offbench.errors import OffbenchError
from offbench.leaderboard.entries import ENTRY_SCHEMA, check_against_accepted, entry_record, load_entries, provenance_problems, same_run
from offbench.leaderboard.scoring import ScoredRun, score_run
from offbench.leaderboard.spec import BenchmarkSpec
from offbench.leaderboard.verify import method_of, unverified, verify_run, weights_fingerprint
from offbench.records import to_dict
from offbench.tracking.provenance import METHOD_KINDS
from offbench.tracking.read_run import CHECKPOINT, MAX_TEXT, FinishedRun, Refused, is_finite, read_run
from offbench.utils import atomic_write_json, safe_component

CURVE_POINTS = 64  # learning curves are kept at this many evaluation steps at most
MAX_BLOCK = 32 * 1024  # bytes of JSON of any one block copied from a run (config, code, env, evaluation)
NOT_CONFIG = ("seed",)  # config keys that may differ between the seeds of one entry


def config_without_seed(run: FinishedRun) -> dict[str, Any]:
    return {k: v for k, v in run.info["config"].items() if k not in NOT_CONFIG}


def config_sha256(config: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()


def check_method(run: FinishedRun) -> dict[str, Any]:
    """Where the run's method comes from (run.json `method`, docs/submitting.md): a built-in baseline must be one
    offbench registers; a plugin names its distribution and version; own code and black boxes name themselves.
    The name labels rows and entry files, so it is one safe file-name component whatever the kind."""
    from offbench.baselines import BASELINES

    method = method_of(run)
    kind = method.get("kind")
    if kind not in METHOD_KINDS:
        raise Refused(run.path, "method", f"run.json method.kind {kind!r:.40} is not one of {', '.join(METHOD_KINDS)}")
    if method.get("name", run.baseline) != run.baseline:
        raise Refused(run.path, "method", f"run.json method.name {method.get('name')!r:.80} differs from baseline {run.baseline!r:.80}")
    if kind == "built-in" and run.baseline not in BASELINES:
        raise Refused(
            run.path, "baseline", f"baseline {run.baseline!r:.80} is not a registered baseline (known: {', '.join(sorted(BASELINES))})"
        )
    if kind == "plugin" and not all(isinstance(method.get(key), str) and method[key] for key in ("distribution", "version")):
        raise Refused(run.path, "method", "a plugin run's method must name its 'distribution' and 'version'")
    try:
        safe_component(run.baseline, "baseline")
    except OffbenchError as exc:
        raise Refused(run.path, "baseline", str(exc)) from None
    return method


def row_label(label: str | None, baseline: str) -> str:
    """The row name: --label, else the baseline's name; either way one safe file-name component."""
    return safe_component(baseline if label is None else label, "label")


def check_run(run: FinishedRun, spec: BenchmarkSpec) -> ScoredRun:
    """Apply the per-run rules; return the run scored the benchmark's way."""
    method = check_method(run)
    if run.identity["checkpoint_sha256"] is None and method["kind"] in ("built-in", "plugin"):
        raise Refused(
            run.path, "run-files", "no checkpoints/last.pt (a leaderboard tells runs apart by their evaluations and final checkpoint)"
        )
    return score_run(run, spec)


def bounded(value: Any, what: str, run: FinishedRun) -> Any:
    """`value` (copied from a run into an entry) if no string in it is longer than MAX_TEXT and its JSON is at
    most MAX_BLOCK bytes; else Refused (free-text)."""

    def strings(item: Any):
        if isinstance(item, str):
            yield item
        elif isinstance(item, dict):
            for key, inner in item.items():
                yield str(key)
                yield from strings(inner)
        elif isinstance(item, list):
            for inner in item:
                yield from strings(inner)

    if any(len(text) > MAX_TEXT for text in strings(value)):
        raise Refused(run.path, "free-text", f"{what} holds a string longer than {MAX_TEXT} characters")
    if len(json.dumps(value, allow_nan=False)) > MAX_BLOCK:
        raise Refused(run.path, "free-text", f"{what} is longer than {MAX_BLOCK} bytes of JSON")
    return value


def _reduced(values: list[Any]) -> list[Any]:
    """At most CURVE_POINTS evenly spaced items, first and last kept."""
    if len(values) <= CURVE_POINTS:
        return list(values)
    keep = np.unique(np.linspace(0, len(values) - 1, CURVE_POINTS).round().astype(int))
    return [values[i] for i in keep]


def run_identity(run: FinishedRun) -> dict[str, Any]:
    """What the run is (FinishedRun.identity) and the fingerprint of its checkpoint's weights (verify.weights_fingerprint)."""
    return {**run.identity, "weights": weights_fingerprint(run.path / CHECKPOINT)}


def _run_record(spec: BenchmarkSpec, scored: ScoredRun, verification: dict[str, Any]) -> dict[str, Any]:
    run = scored.run
    curve = _reduced(scored.curve)
    record = {
        "run_id": bounded(run.run_id, "run.json run_id", run),
        "seed": run.seed,
        "path": bounded(str(run.path), "the run directory's path", run),
        "identity": run_identity(run),
        "verification": verification,
        "code": bounded(run.info["code"], "run.json code", run),
        "env": bounded(run.info.get("env"), "run.json env", run),
        "started_at": bounded(run.info.get("started_at"), "run.json started_at", run),
        "steps": run.summary["steps"],
        "wall_time_s": run.summary.get("wall_time_s") if is_finite(run.summary.get("wall_time_s")) else None,
        "final": bounded(run.summary["final"], "summary.json final", run),
        "best": bounded(run.summary["best"], "summary.json best", run),
        "score": scored.score,
        "curve": {"step": [step for step, _ in curve], "score": [score for _, score in curve]},
    }
    in_context, optimal = scored.row.get("in_context_returns"), run.optimal_return()
    if in_context is not None:
        record["in_context_returns"] = in_context
    if optimal is not None:
        record["optimal_return"] = optimal
    if scored.per_task is not None:
        record["per_task"] = bounded(scored.per_task, "per_task", run)
    return record


def make_entry(spec: BenchmarkSpec, label: str, scored: list[ScoredRun], verifications: dict[Path, dict[str, Any]]) -> dict[str, Any]:
    """The JSON entry for one baseline, dataset and config, with one record per seed: built as the LeaderboardEntry
    record every reader checks entries with (a run block it refuses is Refused, schema), and written as it reads."""
    first = scored[0].run
    config = bounded(config_without_seed(first), "run.json config", first)
    entry = entry_record(
        {
            "schema": ENTRY_SCHEMA,
            "benchmark": spec.name,
            "label": label,
            "baseline": first.baseline,
            "method": bounded(method_of(first), "run.json method", first),
            "dataset": bounded({k: first.info["dataset"].get(k) for k in ("id", "content_sha256", "format")}, "run.json dataset", first),
            "metric": spec.metric.name,
            "score": spec.score,
            "evaluation": bounded(first.info["evaluation"], "run.json evaluation", first),
            "config": config,
            "config_sha256": config_sha256(config),
            "submitted_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "runs": [_run_record(spec, s, verifications[s.run.path]) for s in sorted(scored, key=lambda s: s.run.seed)],
        },
        first.path,
    )
    return to_dict(entry)


def validate_runs(
    spec: BenchmarkSpec, runs: list[FinishedRun], label: str | None = None, verify: bool = False, allow_dirty: bool = False
) -> list[dict[str, Any]]:
    """Entries for a set of runs (grouped by baseline, dataset and config); raises Refused on the first broken rule.
    With `verify`, each run's final evaluation is replayed from its checkpoint (offbench.leaderboard.verify). Runs
    from a dirty tree, or seeds made at different commits, are refused unless `allow_dirty` (the page then marks the
    entry's provenance)."""
    for run in runs:
        check_method(run)
    if label is not None:
        safe_component(label, "label")
        if len({run.baseline for run in runs}) > 1:
            raise OffbenchError(f"--label {label} names one row, but the runs hold several baselines: submit them separately")
    scored = {run.path: check_run(run, spec) for run in runs}
    _refuse_repeated_runs(runs)
    groups: dict[tuple[str, str], list[FinishedRun]] = defaultdict(list)
    for run in runs:
        groups[(run.baseline, run.dataset_id)].append(run)
    for (baseline, dataset_id), members in groups.items():
        _check_group(spec, baseline, dataset_id, members)
        if not (allow_dirty or os.environ.get(ALLOW_DIRTY_VARIABLE) == "1"):
            _check_provenance(baseline, dataset_id, members)
    verifications = {run.path: verify_run(run) if verify else _not_replayed(run) for run in runs}
    return [
        make_entry(spec, row_label(label, baseline), [scored[r.path] for r in members], verifications)
        for (baseline, dataset_id), members in groups.items()
    ]


def _not_replayed(run: FinishedRun) -> dict[str, Any]:
    if method_of(run)["kind"] == "black-box":
        return unverified("black box: no code to rebuild the policy from")
    return unverified("submitted without --verify")


def _check_group(spec: BenchmarkSpec, baseline: str, dataset_id: str, members: list[FinishedRun]) -> None:
    """One entry = one method, one config (seed aside), distinct seeds, at least min_seeds of them."""
    configs = {config_sha256(config_without_seed(r)) for r in members}
    if len(configs) > 1:
        raise Refused(
            members[0].path,
            "config-consistency",
            f"the {baseline} runs on {dataset_id} use {len(configs)} different configs; submit each config separately (with --label)",
        )
    kinds = {method_of(r)["kind"] for r in members}
    if len(kinds) > 1:
        raise Refused(
            members[0].path,
            "config-consistency",
            f"the {baseline} runs on {dataset_id} come from methods of kinds {', '.join(sorted(kinds))}; one entry is one method",
        )
    seen: dict[int, Path] = {}
    for run in members:
        if run.seed in seen:
            raise Refused(run.path, "duplicate", f"seed {run.seed} is also submitted by {seen[run.seed]}")
        seen[run.seed] = run.path
    if len(seen) < spec.min_seeds:
        raise Refused(
            members[0].path,
            "seed-count",
            f"{baseline} on {dataset_id} has {len(seen)} seed(s); benchmark {spec.name} needs at least {spec.min_seeds}",
        )


ALLOW_DIRTY_VARIABLE = "OFFBENCH_ALLOW_DIRTY"  # "1": every submission as with --allow-dirty (the test suite runs from a working tree)


def _check_provenance(baseline: str, dataset_id: str, members: list[FinishedRun]) -> None:
    """A leaderboard row traces to one clean commit of the code that made it (offbench's, and the method's own for
    own-code runs), so a reader can check out that commit and re-run it."""
    for code_of, whose in (
        (lambda run: run.info.get("code") or {}, "offbench"),
        (lambda run: method_of(run).get("source") or {}, "the method's"),
    ):
        codes = [code_of(run) for run in members]
        dirty = next((run for run, code in zip(members, codes) if code.get("git_dirty")), None)
        if dirty is not None:
            raise Refused(
                dirty.path,
                "provenance",
                f"made from {whose} code with uncommitted changes (commit "
                f"{str(code_of(dirty).get('git_commit'))[:12]}): commit, re-run, and submit again; or submit with "
                "--allow-dirty, and the entry is marked on the page",
            )
        if "mixed commits" in provenance_problems(codes):
            commits = sorted({str(code.get("git_commit") or code.get("version"))[:12] for code in codes})
            raise Refused(
                members[0].path,
                "provenance",
                f"the {baseline} runs on {dataset_id} were made at different commits of "
                f"{whose} code ({', '.join(commits)}): re-run the seeds at one commit, or submit with --allow-dirty",
            )


def _refuse_repeated_runs(runs: list[FinishedRun]) -> None:
    """One run submitted twice in one go (copied to another folder, renamed, its seed edited, its checkpoint
    re-saved): `entries.same_run` on every pair."""
    seen: list[tuple[FinishedRun, dict[str, Any], tuple[str, str]]] = []
    for run in runs:
        record, setting = {"seed": run.seed, "identity": run_identity(run)}, (config_sha256(config_without_seed(run)), run.dataset_id)
        for other, other_record, other_setting in seen:
            same = same_run(record, other_record, setting == other_setting)
            if same is not None:
                raise Refused(run.path, "duplicate", f"this run is the same run as {other.path} (same {same})")
        seen.append((run, record, setting))


def _entry_filename(entry: dict[str, Any]) -> str:
    """`<UTC stamp>--<label>--<dataset slug>--<digest>.json`: every part one safe component."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S")
    dataset_slug = re.sub(r"[^A-Za-z0-9._+-]+", "-", entry["dataset"]["id"]).strip(".-")[:64] or "dataset"
    digest = hashlib.sha256(json.dumps([r["identity"] for r in entry["runs"]], sort_keys=True).encode()).hexdigest()[:10]
    return f"{stamp}--{safe_component(entry['label'], 'label')}--{dataset_slug}--{digest}.json"


def submit(
    spec: BenchmarkSpec,
    run_dirs: list[Path],
    label: str | None = None,
    render: bool = True,
    verify: bool = False,
    allow_dirty: bool = False,
) -> list[Path]:
    """Validate run directories and add them as new entries (with `verify`, each replayed from its checkpoint first;
    with `allow_dirty`, runs that do not trace to one clean commit too, marked); re-render the tables. Returns the
    entry files."""
    if render:  # fail before anything is accepted, not half-way
        from offbench.errors import require

        require("rliable", "stats")
    runs = [read_run(path) for path in run_dirs]
    entries = validate_runs(spec, runs, label, verify=verify, allow_dirty=allow_dirty)
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


def _find_run(record: dict[str, Any], folders: list[Path]) -> Path | None:
    """The run directory of an entry's run record: its recorded path, or a folder named by its run id under `folders`."""
    candidates = [Path(record["path"]), *(Path(folder) / record["run_id"] for folder in folders)]
    return next((path for path in candidates if (path / "run.json").is_file()), None)


def verify_entries(spec: BenchmarkSpec, folders: list[Path], write: bool = False) -> list[tuple[str, str, int, str, str]]:
    """Replay every run of every entry whose run directory is at hand (`offbench leaderboard verify`): one
    (entry, run, seed, status, detail) per run, status verified / unverified / refused. With `write`, the runs'
    `verification` fields are updated in place (nothing else in an entry changes) and the board re-rendered."""
    outcomes, changed = [], []
    with spec.lock:
        for path, entry in load_entries(spec):
            updated = False
            for record in entry["runs"]:
                found = _find_run(record, folders)
                if found is None:
                    outcomes.append((path.name, record["run_id"], record["seed"], "unverified", "run directory not found"))
                    continue
                try:
                    run = read_run(found)
                    if run.identity["evaluations_sha256"] != (record.get("identity") or {}).get(
                        "evaluations_sha256", run.identity["evaluations_sha256"]
                    ):
                        raise Refused(found, "verify", "its evaluations are not the ones the entry records (another run?)")
                    verification = verify_run(run)
                except Refused as exc:
                    outcomes.append((path.name, record["run_id"], record["seed"], "refused", str(exc)))
                    continue
                outcomes.append(
                    (
                        path.name,
                        record["run_id"],
                        record["seed"],
                        verification["status"],
                        verification.get("reason") or f"replayed on {verification['replayed_on']}",
                    )
                )
                if verification["status"] == "verified" and record.get("verification") != verification:
                    record["verification"], updated = verification, True
            if updated:
                changed.append((path, entry))
        if write and changed:
            for path, entry in changed:
                atomic_write_json(path, entry)
            from offbench.leaderboard.render import render_benchmark

            render_benchmark(spec)
    return outcomes
