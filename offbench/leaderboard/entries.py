"""Accepted leaderboard entries (`leaderboards/<name>/entries/*.json`), re-checked by every rule whenever they are read.

Entries are files anyone can edit in a pull request, so `load_entries` (what show, build, render and submit read)
runs every rule on every entry file, alone (`check_entry`) and against the others (`check_board`): a broken one is
a one-line `Refused` naming its file and the rule. `offbench leaderboard check` runs the same over every board.

Per entry: schema and types; the benchmark, metric and score kind; a known method (a built-in baseline must be one
offbench registers); the dataset one of the benchmark's, with the checksum the benchmark pins (else its card's, else
the local copy's); the protocol the benchmark requires; `config_sha256` the digest of `config`; at least `min_seeds`
distinct seeds and no run listed twice; each run's `score` the benchmark's metric of its `final` / `best` block
(normalised scores recomputed from the card's reference scores), the last point of its curve for final scores, and
within `METRIC_BOUNDS`; a `verification` record of a known status. Across entries: no run in two entries (found by
what it is: `same_run`), and a row (label) holds one baseline and, per dataset, one config and distinct seeds.
Submissions write entries (offbench.leaderboard.submit).
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

from offbench.errors import OffbenchError
from offbench.leaderboard.spec import BenchmarkSpec
from offbench.tracking.provenance import METHOD_KINDS
from offbench.tracking.run_dir import Refused, is_finite, is_number, same_number
from offbench.utils import safe_component

ENTRY_SCHEMA = 1
VERIFICATION_STATUSES = ("verified", "unverified")
MAX_MAGNITUDE = 1e9  # no metric offbench computes comes near it: a bigger score is an edit (and overflows statistics)
MAX_NORMALISED = 1000.0  # ten times the expert-random span either way: D4RL-style scores stay within a few hundred
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


def load_entries(spec: BenchmarkSpec) -> list[tuple[Path, dict[str, Any]]]:
    """Accepted entries, oldest file name first, each checked by every rule (module docstring)."""
    out = []
    for path in sorted(spec.entries_dir.glob("*.json")):
        try:
            entry = json.loads(path.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise Refused(path, "schema", f"accepted entry is not valid JSON ({exc})") from None
        check_entry(path, entry, spec)
        out.append((path, entry))
    check_board(out)
    return out


def entry_config_sha256(config: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()


def check_entry(path: Path, entry: Any, spec: BenchmarkSpec) -> None:
    """Every rule one entry file must meet on its own (module docstring); Refused naming the file and the rule."""
    def refuse(rule: str, detail: str) -> Refused:
        return Refused(path, rule, detail)

    if not isinstance(entry, dict) or entry.get("schema") != ENTRY_SCHEMA or entry.get("benchmark") != spec.name:
        raise refuse("schema", f"not an entry of benchmark {spec.name} (schema {ENTRY_SCHEMA})")
    for key in ("label", "baseline"):
        try:
            safe_component(entry.get(key), f"entry {key}")
        except OffbenchError as exc:
            raise refuse("label", str(exc)) from None
    _check_method(entry, refuse)
    dataset = entry.get("dataset")
    if not isinstance(dataset, dict) or dataset.get("id") not in spec.datasets:
        raise refuse("benchmark-dataset", f"dataset is not one of {spec.name}'s: {', '.join(spec.datasets)}")
    if entry.get("metric") != spec.metric.name or entry.get("score") != spec.score:
        raise refuse("metric", f"scored as {entry.get('score')!r} {entry.get('metric')!r}; the benchmark scores {spec.score} {spec.metric.name}")
    if not isinstance(entry.get("config"), dict) or not isinstance(entry.get("evaluation"), dict) or not isinstance(entry.get("submitted_at"), str):
        raise refuse("schema", "'config' and 'evaluation' must be objects and 'submitted_at' a string")
    if entry.get("config_sha256") != entry_config_sha256(entry["config"]):
        raise refuse("config-consistency", "config_sha256 is not the sha256 of 'config' (the config was edited after submission)")
    runs = entry.get("runs")
    if not isinstance(runs, list) or not runs:
        raise refuse("schema", "'runs' must be a non-empty list")
    for number, run in enumerate(runs, 1):
        _check_run_record(number, run, refuse)
    _check_checksum(spec, dataset, refuse)
    _check_protocol(spec, entry, refuse)
    _check_scores(spec, entry, refuse)
    _check_seeds(spec, entry, refuse)


def _check_method(entry: dict[str, Any], refuse) -> None:
    from offbench.baselines import BASELINES

    method = entry.get("method", {"kind": "built-in", "name": entry["baseline"]})  # entries from before methods were recorded
    if not isinstance(method, dict) or method.get("kind") not in METHOD_KINDS or method.get("name") != entry["baseline"]:
        raise refuse("method", f"'method' must be an object with a kind among {', '.join(METHOD_KINDS)} and the entry's baseline as its name")
    if method["kind"] == "built-in" and entry["baseline"] not in BASELINES:
        raise refuse("baseline", f"baseline {entry['baseline']!r} is not a registered baseline (known: {', '.join(sorted(BASELINES))})")


def _check_run_record(number: int, run: Any, refuse) -> None:
    if not isinstance(run, dict):
        raise refuse("schema", f"run {number} is not an object")
    seed, curve, code, identity = run.get("seed"), run.get("curve"), run.get("code"), run.get("identity")
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise refuse("schema", f"run {number}: seed {seed!r} is not a non-negative integer")
    if not isinstance(run.get("run_id"), str) or not isinstance(code, dict):
        raise refuse("schema", f"run {number}: needs a 'run_id' and a 'code' object")
    if not is_finite(run.get("score")):
        raise refuse("metric-finite", f"run {number}: score {run.get('score')!r} is not a finite number")
    if not isinstance(run.get("steps"), int) or isinstance(run.get("steps"), bool) or run["steps"] < 0:
        raise refuse("schema", f"run {number}: 'steps' is not a non-negative integer")
    for which in ("final", "best"):
        if not isinstance(run.get(which), dict) or not isinstance(run[which].get("step"), int):
            raise refuse("schema", f"run {number}: '{which}' needs at least a 'step'")
    if identity is not None and (not isinstance(identity, dict) or not _SHA256.match(str(identity.get("evaluations_sha256")))):
        raise refuse("schema", f"run {number}: 'identity' needs an evaluations_sha256 digest")
    if (not isinstance(curve, dict) or not isinstance(curve.get("step"), list) or not isinstance(curve.get("score"), list)
            or len(curve["step"]) != len(curve["score"]) or not curve["step"]
            or not all(is_finite(v) for v in curve["score"] + curve["step"])):
        raise refuse("schema", f"run {number}: 'curve' needs equally long, non-empty lists of finite steps and scores")
    if "per_task" in run and (not isinstance(run["per_task"], list) or not all(
            isinstance(t, dict) and isinstance(t.get("task"), str) and is_finite(t.get("score")) for t in run["per_task"])):
        raise refuse("schema", f"run {number}: 'per_task' must list {{task, score}} objects with finite scores")
    if "in_context_returns" in run and (not isinstance(run["in_context_returns"], list)
                                        or not all(is_finite(v) for v in run["in_context_returns"])):
        raise refuse("schema", f"run {number}: 'in_context_returns' must be a list of finite numbers")
    verification = run.get("verification", {"status": "unverified"})
    if not isinstance(verification, dict) or verification.get("status") not in VERIFICATION_STATUSES:
        raise refuse("schema", f"run {number}: 'verification' must be an object with a status among {', '.join(VERIFICATION_STATUSES)}")
    if verification["status"] == "verified" and not all(verification.get(key) for key in ("replayed_on", "at", "by")):
        raise refuse("schema", f"run {number}: a verified run records where, when and by which offbench it was replayed")


def _check_checksum(spec: BenchmarkSpec, dataset: dict[str, Any], refuse) -> None:
    from offbench.leaderboard.scoring import benchmark_card, expected_checksum

    got = dataset.get("content_sha256")
    if not isinstance(got, str) or not _SHA256.match(got):
        raise refuse("dataset-checksum", f"dataset content_sha256 {got!r:.80} is not a sha256 hex digest")
    try:
        expected, source = expected_checksum(spec, benchmark_card(dataset["id"]))
    except OffbenchError as exc:
        raise refuse("dataset-checksum", f"cannot check dataset '{dataset['id']}': {exc}") from None
    if expected is None:
        raise refuse("dataset-checksum", f"cannot check dataset '{dataset['id']}': {source}")
    if got != expected:
        raise refuse("dataset-checksum", f"dataset '{dataset['id']}' content sha256 {got[:12]}... differs from {expected[:12]}... ({source})")


def _check_protocol(spec: BenchmarkSpec, entry: dict[str, Any], refuse) -> None:
    from offbench.leaderboard.scoring import protocol_problem

    evaluation = entry["evaluation"]
    targets = evaluation.get("target_returns")
    if targets is not None and (not isinstance(targets, list) or not all(is_finite(t) for t in targets)):
        raise refuse("schema", "evaluation.target_returns must be null or a list of finite numbers")
    black_box = entry.get("method", {}).get("kind") == "black-box"
    for run in entry["runs"]:
        problem = protocol_problem(spec, entry["baseline"], evaluation, run["steps"], black_box)
        if problem is not None:
            raise refuse("protocol", problem.replace("summary.json steps", f"run {run['run_id']!r:.80} steps").replace("run.json evaluation", "evaluation"))


def _check_scores(spec: BenchmarkSpec, entry: dict[str, Any], refuse) -> None:
    """A final score is the benchmark's metric of the run's `final` block (normalised scores recomputed from the
    card) and the last point of its curve; a best score is not beaten by any point of its curve; both are within
    the metric's bounds."""
    from offbench.leaderboard.scoring import benchmark_card

    metric = spec.metric
    card = benchmark_card(entry["dataset"]["id"]) if metric.name == "normalized_score" else None
    for run in entry["runs"]:
        where = f"run {run['run_id']!r:.80} (seed {run['seed']})"
        score, curve = run["score"], run["curve"]["score"]
        if not _within_bounds(metric.name, score, run.get("optimal_return")):
            raise refuse("metric-range", f"{where}: score {score!r} is outside what a {metric.name} can be")
        if spec.score == "final":
            block = run["final"]
            if metric.name == "normalized_score":
                if not is_finite(block.get("mean_return")) or card.normalise(1.0) is None:
                    raise refuse("metric", f"{where}: no final mean_return (or no reference scores) to normalise")
                expected = float(card.normalise(block["mean_return"]))
                if not is_number(block.get("normalized_score")) or not same_number(block["normalized_score"], expected):
                    raise refuse("consistency", f"{where}: final.normalized_score {block.get('normalized_score')!r} is not "
                                                f"{expected} from its mean_return and the card's reference scores")
            else:
                expected = block.get(metric.field)
            if not is_finite(expected) or not same_number(score, expected):
                raise refuse("consistency", f"{where}: score {score!r} is not its final {metric.field} ({expected!r})")
            if not same_number(curve[-1], score):
                raise refuse("consistency", f"{where}: score {score!r} is not the last point of its learning curve ({curve[-1]!r})")
        elif any(metric.sign * point > metric.sign * score and not same_number(point, score) for point in curve):
            raise refuse("consistency", f"{where}: best score {score!r} is beaten by a point of its own learning curve")


def _within_bounds(metric: str, score: float, optimal_return: Any) -> bool:
    """What a score of each metric can be: a success rate a fraction, a regret non-negative, a normalised score within
    MAX_NORMALISED of the reference span, a return at most the optimum where the run recorded one."""
    if abs(score) > MAX_MAGNITUDE:
        return False
    if metric == "success_rate":
        return 0.0 <= score <= 1.0
    if metric == "regret":
        return score >= 0.0
    if metric == "normalized_score":
        return abs(score) <= MAX_NORMALISED
    return not is_finite(optimal_return) or score <= optimal_return + 1e-9 * max(1.0, abs(optimal_return))


def _check_seeds(spec: BenchmarkSpec, entry: dict[str, Any], refuse) -> None:
    seen_ids, seen_seeds = set(), set()
    for run in entry["runs"]:
        identity = run.get("identity") or {}
        key = identity.get("checkpoint_sha256") or identity.get("evaluations_sha256") or run["run_id"]
        if run["run_id"] in seen_ids or key in seen_ids:
            raise refuse("duplicate", f"run {run['run_id']!r:.80} is listed more than once")
        if run["seed"] in seen_seeds:
            raise refuse("duplicate", f"seed {run['seed']} is listed more than once")
        seen_ids.update({run["run_id"], key})
        seen_seeds.add(run["seed"])
    if len(seen_seeds) < spec.min_seeds:
        raise refuse("seed-count", f"{len(seen_seeds)} seed(s); benchmark {spec.name} needs at least {spec.min_seeds}")


# ---------------------------------------------------------------------------------------------- across entries
def same_run(new: dict[str, Any], old: dict[str, Any], same_setting: bool) -> str | None:
    """What makes one run record the same run as another, if anything: the same final checkpoint file; the same
    weights (re-saved under other keys or beside an extra one: `verify.same_weights`); the same evaluations under
    another seed (episode seeds depend on the seed, so identical returns are a copy); the same evaluations at the
    same seed in the same setting, i.e. config and dataset (two methods can score the very same episodes: greedy
    policies on a discrete suite; and a policy that ignores its data scores the same on every dataset of one
    environment); or, for entries from before runs carried an identity, the same seed, final and best evaluations
    and learning curve."""
    from offbench.leaderboard.verify import same_weights

    ours, theirs = new.get("identity"), old.get("identity")
    if ours is not None and theirs is not None:
        if ours.get("checkpoint_sha256") is not None and ours["checkpoint_sha256"] == theirs.get("checkpoint_sha256"):
            return "final checkpoint"
        if same_weights(ours.get("weights"), theirs.get("weights")):
            return "checkpoint weights"
        if ours["evaluations_sha256"] == theirs.get("evaluations_sha256"):
            if new["seed"] != old["seed"]:
                return "evaluations under another seed"
            if same_setting:
                return "evaluations"
        return None
    if all(new.get(key) == old.get(key) for key in ("seed", "final", "best", "curve")):
        return "seed, evaluations and learning curve"
    return None


def check_against_accepted(entry: dict[str, Any], accepted: list[tuple[Path, dict[str, Any]]], where: Path | None = None) -> None:
    """The rules between a new entry and the accepted ones: no run twice, one baseline per row, one config and
    distinct seeds per row and dataset. `where` names the new entry (its file); else each run's directory."""
    row, dataset_id = entry["label"], entry["dataset"]["id"]
    first = where or entry["runs"][0]["path"]
    for path, old in accepted:
        for record in entry["runs"]:
            for old_record in old["runs"]:
                same_setting = old.get("config_sha256") == entry["config_sha256"] and old["dataset"]["id"] == dataset_id
                same = same_run(record, old_record, same_setting)
                if same is not None:
                    raise Refused(where or record["path"], "duplicate",
                                  f"run {record['run_id']} is run {old_record['run_id']} of accepted entry {path.name} (same {same}), whatever its name")
        if old["label"] == row and old["baseline"] != entry["baseline"]:
            raise Refused(first, "config-consistency",
                          f"row '{row}' holds baseline {old['baseline']} ({path.name}), not {entry['baseline']}; choose another --label")
        if old["label"] == row and old["dataset"]["id"] == dataset_id:
            if old["config_sha256"] != entry["config_sha256"]:
                raise Refused(first, "config-consistency",
                              f"row '{row}' on {dataset_id} already holds another config ({path.name}); submit this one with --label NAME")
            old_seeds = {r["seed"] for r in old["runs"]}
            for record in entry["runs"]:
                if record["seed"] in old_seeds:
                    raise Refused(where or record["path"], "duplicate", f"row '{row}' on {dataset_id} already has seed {record['seed']} ({path.name})")


def check_board(entries: list[tuple[Path, dict[str, Any]]]) -> None:
    """The rules between entries, over a whole board: each entry against the ones before it."""
    for index, (path, entry) in enumerate(entries):
        check_against_accepted(entry, entries[:index], where=path)


def entry_verified(entry: dict[str, Any]) -> bool:
    """Whether every run of an entry was replayed from its checkpoint to the same returns."""
    return all((run.get("verification") or {}).get("status") == "verified" for run in entry["runs"])


def method_summary(entry: dict[str, Any]) -> str:
    """Where an entry's method comes from, in a few words: offbench, a plugin, someone's repository, a black box."""
    method = entry.get("method") or {"kind": "built-in"}
    kind = method.get("kind")
    if kind == "built-in":
        return "offbench"
    if kind == "plugin":
        return f"plugin {method.get('distribution')} {method.get('version')}"
    source = method.get("source") or {}
    repository = source.get("repository")
    shareable = isinstance(repository, str) and ("://" in repository or "@" in repository)  # a remote, not a local folder
    script = source.get("script")
    if not shareable and isinstance(repository, str) and isinstance(script, str) and script.startswith(repository.rstrip("/") + "/"):
        script = script[len(repository.rstrip("/")) + 1:]  # runs that recorded their checkout's folder: the path inside it
    origin = (repository if shareable else None) or source.get("distribution") or script or "unknown source"
    commit = source.get("git_commit") or source.get("version")
    label = "own code" if kind == "own-code" else "black box"
    return f"{label}: {origin}" + (f" @ {str(commit)[:12]}" if commit else "")

