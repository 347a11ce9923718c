"""Accepted leaderboard entries (`leaderboards/<name>/entries/*.json`), re-checked by every rule whenever they are read.

Entries are files anyone can edit in a pull request, so `load_entries` (what show, build, render and submit read)
runs every rule on every entry file, alone (`check_entry`) and against the others (`check_board`): a broken one is
a one-line `Refused` naming its file and the rule. `offbench leaderboard check` runs the same over every board.

Per entry: every key, type and range of the `LeaderboardEntry` record (rule `schema`: an unknown key, a missing one
or a wrong type is one line naming the file and the field; a verified run records its replay); the benchmark,
metric and score kind; a known method named as the baseline (a built-in baseline must be one offbench registers);
the dataset one of the benchmark's, with the checksum the benchmark pins (else its card's, else the local copy's);
the protocol the benchmark requires; `config_sha256` the digest of `config`; at least `min_seeds` distinct seeds
and no run listed twice; each run's `score` the benchmark's metric of its `final` / `best` block (normalised scores
recomputed from the card's reference scores), the last point of its curve for final scores, and within the
metric's bounds (`_within_bounds`). Across entries: no run in two entries (found by what it is: `same_run`), and a
row (label) holds one baseline and, per dataset, one config and distinct seeds.
Submissions write entries (offbench.leaderboard.submit) by building the same record.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from offbench.errors import OffbenchError
from offbench.evaluation.results import EvaluationSettings
from offbench.leaderboard.spec import SHA256, BenchmarkFile, BenchmarkSpec, Evaluation, MadeOn, Reported, ReportedSource
from offbench.records import Invalid, from_dict, ranged, to_dict, write_field_tables
from offbench.stats import Metric
from offbench.tracking.provenance import METHOD_KINDS
from offbench.tracking.read_run import Refused, same_number
from offbench.tracking.run_files import CodeVersion, EnvironmentInfo, MethodRecord, SummaryEntry
from offbench.utils import safe_component

ENTRY_SCHEMA = 1
VERIFICATION_STATUSES = ("verified", "unverified")
MAX_MAGNITUDE = 1e9  # no metric offbench computes comes near it: a bigger score is an edit (and overflows statistics)
MAX_NORMALISED = 1000.0  # ten times the expert-random span either way: D4RL-style scores stay within a few hundred
DOCS_PAGE = Path(__file__).resolve().parents[2] / "docs" / "leaderboards.md"


# ------------------------------------------------------------------------------ the entry file, as written
@dataclass(frozen=True)
class EntryDataset:
    id: str = ranged(doc="the dataset id, one of the benchmark's")
    content_sha256: str = ranged(doc="the content sha256 of the copy the runs trained on")
    format: str | None = ranged(None, null=True, doc="the dataset's storage format")


@dataclass(frozen=True)
class RunIdentity:
    """What a run is, whatever its name: the leaderboard tells runs apart by it (`same_run`)."""

    evaluations_sha256: str = ranged(doc="sha256 of the run's evaluations.jsonl")
    checkpoint_sha256: str | None = ranged(None, null=True, doc="sha256 of its final checkpoint (none for a black box)")
    weights: list[tuple[str, int]] | None = ranged(
        None, null=True, doc="[sha256 prefix, elements] of the checkpoint's largest tensors (`verify.weights_fingerprint`)"
    )

    def check(self) -> None:
        if not SHA256.match(self.evaluations_sha256):
            raise Invalid("'evaluations_sha256' must be a sha256 hex digest")


@dataclass(frozen=True)
class Verification:
    """Whether the run was replayed from its checkpoint to the same returns (`offbench leaderboard verify`)."""

    status: str = ranged(choices=VERIFICATION_STATUSES, doc="verified or unverified")
    reason: str | None = ranged(None, doc="unverified: why it was not replayed")
    replayed_on: str | None = ranged(None, doc="verified: the device it was replayed on")
    at: str | None = ranged(None, doc="verified: when (UTC, ISO 8601)")
    by: CodeVersion | None = ranged(None, doc="verified: the offbench that replayed it (as run.json `code`)")
    step: int | None = ranged(None, ge=0, doc="verified: the evaluation step replayed")
    episodes: int | None = ranged(None, ge=1, doc="verified: the episodes replayed")

    def check(self) -> None:
        if self.status == "verified" and not (self.replayed_on and self.at and self.by):
            raise Invalid("'status' is verified, but where, when and by which offbench it was replayed is not recorded")


@dataclass(frozen=True)
class Curve:
    step: list[int] = ranged(doc="evaluation steps, at most 64 of them")
    score: list[float] = ranged(doc="the run's score at each of those steps")

    def check(self) -> None:
        if not self.step or len(self.step) != len(self.score):
            raise Invalid("needs equally long, non-empty lists of finite steps and scores")


@dataclass(frozen=True)
class TaskScore:
    task: str = ranged(doc="the task's name")
    score: float = ranged(doc="the run's score on it")


@dataclass(frozen=True, kw_only=True)
class EntryRun:
    """One seed's run, as an entry records it."""

    run_id: str = ranged(doc="the run's name (run.json `run_id`)")
    seed: int = ranged(ge=0, doc="its seed")
    path: str = ranged(doc="its run directory when it was submitted")
    identity: RunIdentity | None = ranged(None, doc="what the run is (table below); entries from before it was recorded have none")
    verification: Verification | None = ranged(None, doc="its replay (table below); none reads unverified")
    code: CodeVersion = ranged(doc="run.json `code`: the offbench that trained it")
    env: EnvironmentInfo | None = ranged(None, null=True, doc="run.json `env`: the machine and libraries")
    started_at: str | None = ranged(None, null=True, doc="run.json `started_at`")
    steps: int = ranged(ge=0, doc="training updates (summary.json `steps`)")
    wall_time_s: float | None = ranged(None, null=True, doc="training wall time in seconds")
    final: SummaryEntry = ranged(doc="summary.json `final`: the last evaluation")
    best: SummaryEntry = ranged(doc="summary.json `best`: the best headline score")
    score: float = ranged(doc="the run's score, the benchmark's metric of its `final` (or `best`) evaluation")
    curve: Curve = ranged(doc="the learning curve, `{ step, score }`")
    in_context_returns: list[float] | None = ranged(None, doc="in-context benchmarks: the return of each in-context episode")
    optimal_return: float | None = ranged(None, doc="the optimal return of the evaluation tasks, where the run recorded one")
    per_task: list[TaskScore] | None = ranged(None, doc="multi-task benchmarks: `{ task, score }` per task")


@dataclass(frozen=True, kw_only=True)
class LeaderboardEntry:
    """`leaderboards/<name>/entries/*.json`: one row's runs of one baseline and config on one dataset."""

    schema: int = ranged(choices=(ENTRY_SCHEMA,), doc="the entry format's version")
    benchmark: str = ranged(doc="the benchmark it belongs to")
    label: str = ranged(doc="the row it is shown in")
    baseline: str = ranged(doc="the method's name")
    method: MethodRecord | None = ranged(None, doc="run.json `method`: where the method comes from; none: a built-in baseline")
    dataset: EntryDataset = ranged(doc="`{ id, content_sha256, format }`: the dataset the runs trained on")
    metric: str = ranged(doc="the benchmark's metric")
    score: str = ranged(doc="the benchmark's score kind, final or best")
    evaluation: EvaluationSettings = ranged(doc="run.json `evaluation` of the runs: their protocol")
    config: dict[str, Any] = ranged(doc="the runs' config, seed aside")
    config_sha256: str = ranged(doc="sha256 of `config` (sorted-key JSON)")
    submitted_at: str = ranged(doc="when it was accepted (UTC, ISO 8601)")
    runs: list[EntryRun] = ranged(doc="one record per seed (table below)")

    def check(self) -> None:
        if not self.runs:
            raise Invalid("'runs' must be a non-empty list")

    def method_or_builtin(self) -> MethodRecord:
        """The entry's method; entries from before methods were recorded hold built-in baselines."""
        return self.method or MethodRecord(kind="built-in", name=self.baseline)


LEADERBOARD_RECORDS = (
    BenchmarkFile,
    Evaluation,
    Reported,
    ReportedSource,
    MadeOn,
    LeaderboardEntry,
    EntryRun,
    RunIdentity,
    Verification,
)  # their field tables are in docs/leaderboards.md


def write_field_docs(page: Path = DOCS_PAGE) -> Path:
    """Regenerate the field tables of docs/leaderboards.md from the records' `doc=`s (tests/test_leaderboard_records.py
    fails while they differ)."""
    return write_field_tables(page, *LEADERBOARD_RECORDS)


def entry_record(data: Any, where: Path) -> LeaderboardEntry:
    """`data` as a LeaderboardEntry, or Refused (schema) naming `where` and the field: what every reader and the
    writer of entries go through."""
    try:
        return from_dict(LeaderboardEntry, data, str(where))
    except OffbenchError as exc:
        raise Refused(where, "schema", str(exc).removeprefix(f"{where}: ")) from None


def load_entries(spec: BenchmarkSpec) -> list[tuple[Path, dict[str, Any]]]:
    """Accepted entries, oldest file name first, each checked by every rule (module docstring); as the files hold
    them (what `leaderboard verify --write` writes back with only `verification` changed)."""
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


def check_entry(path: Path, data: Any, spec: BenchmarkSpec) -> LeaderboardEntry:
    """Every rule one entry file must meet on its own (module docstring); Refused naming the file and the rule."""

    def refuse(rule: str, detail: str) -> Refused:
        return Refused(path, rule, detail)

    entry = entry_record(data, path)
    if entry.benchmark != spec.name:
        raise refuse("schema", f"not an entry of benchmark {spec.name} (schema {ENTRY_SCHEMA})")
    for key in ("label", "baseline"):
        try:
            safe_component(getattr(entry, key), f"entry {key}")
        except OffbenchError as exc:
            raise refuse("label", str(exc)) from None
    _check_method(entry, refuse)
    if entry.dataset.id not in spec.datasets:
        raise refuse("benchmark-dataset", f"dataset is not one of {spec.name}'s: {', '.join(spec.datasets)}")
    if entry.metric != spec.metric.name or entry.score != spec.score:
        raise refuse("metric", f"scored as {entry.score!r} {entry.metric!r}; the benchmark scores {spec.score} {spec.metric.name}")
    if entry.config_sha256 != entry_config_sha256(entry.config):
        raise refuse("config-consistency", "config_sha256 is not the sha256 of 'config' (the config was edited after submission)")
    _check_checksum(spec, entry.dataset, refuse)
    _check_protocol(spec, entry, refuse)
    _check_scores(spec, entry, refuse)
    _check_seeds(spec, entry, refuse)
    return entry


def _check_method(entry: LeaderboardEntry, refuse) -> None:
    from offbench.baselines import BASELINES

    method = entry.method_or_builtin()
    if method.name != entry.baseline:
        raise refuse(
            "method", f"'method' must be an object with a kind among {', '.join(METHOD_KINDS)} and the entry's baseline as its name"
        )
    if method.kind == "built-in" and entry.baseline not in BASELINES:
        raise refuse("baseline", f"baseline {entry.baseline!r} is not a registered baseline (known: {', '.join(sorted(BASELINES))})")


def _check_checksum(spec: BenchmarkSpec, dataset: EntryDataset, refuse) -> None:
    from offbench.leaderboard.scoring import benchmark_card, expected_checksum

    got = dataset.content_sha256
    if not SHA256.match(got):
        raise refuse("dataset-checksum", f"dataset content_sha256 {got!r:.80} is not a sha256 hex digest")
    try:
        expected, source = expected_checksum(spec, benchmark_card(dataset.id))
    except OffbenchError as exc:
        raise refuse("dataset-checksum", f"cannot check dataset '{dataset.id}': {exc}") from None
    if expected is None:
        raise refuse("dataset-checksum", f"cannot check dataset '{dataset.id}': {source}")
    if got != expected:
        raise refuse(
            "dataset-checksum",
            f"dataset '{dataset.id}' content sha256 {got[:12]}... differs from {expected[:12]}... ({source}){spec.made_on_note(dataset.id)}",
        )


def _check_protocol(spec: BenchmarkSpec, entry: LeaderboardEntry, refuse) -> None:
    from offbench.leaderboard.scoring import protocol_problem

    black_box, evaluation = entry.method_or_builtin().kind == "black-box", to_dict(entry.evaluation)
    for run in entry.runs:
        problem = protocol_problem(spec, entry.baseline, entry.dataset.id, evaluation, run.steps, black_box)
        if problem is not None:
            raise refuse(
                "protocol",
                problem.replace("summary.json steps", f"run {run.run_id!r:.80} steps").replace("run.json evaluation", "evaluation"),
            )


def _check_scores(spec: BenchmarkSpec, entry: LeaderboardEntry, refuse) -> None:
    """A final score is the benchmark's metric of the run's `final` block (normalised scores recomputed from the
    card) and the last point of its curve; a best score is not beaten by any point of its curve; both are within
    the metric's bounds."""
    from offbench.leaderboard.scoring import benchmark_card

    metric = spec.metric
    card = benchmark_card(entry.dataset.id) if metric.name == "normalized_score" else None
    for run in entry.runs:
        where = f"run {run.run_id!r:.80} (seed {run.seed})"
        score, curve = run.score, run.curve.score
        if not _within_bounds(metric.name, score, run.optimal_return):
            raise refuse("metric-range", f"{where}: score {score!r} is outside what a {metric.name} can be")
        if spec.score == "final":
            expected = _final_score(run.final, metric, card, where, refuse)
            if expected is None or not same_number(score, expected):
                raise refuse("consistency", f"{where}: score {score!r} is not its final {metric.field} ({expected!r})")
            if not same_number(curve[-1], score):
                raise refuse("consistency", f"{where}: score {score!r} is not the last point of its learning curve ({curve[-1]!r})")
        elif any(metric.sign * point > metric.sign * score and not same_number(point, score) for point in curve):
            raise refuse("consistency", f"{where}: best score {score!r} is beaten by a point of its own learning curve")


def _final_score(block: SummaryEntry, metric: Metric, card: Any, where: str, refuse) -> float | None:
    """The benchmark's metric of a run's final evaluation; a normalised score must be the one the card's reference
    scores give its mean_return."""
    if metric.name != "normalized_score":
        return getattr(block, metric.field)
    if card.normalise(1.0) is None:
        raise refuse("metric", f"{where}: the card has no reference scores to normalise its final mean_return with")
    expected = float(card.normalise(block.mean_return))
    if block.normalized_score is None or not same_number(block.normalized_score, expected):
        raise refuse(
            "consistency",
            f"{where}: final.normalized_score {block.normalized_score!r} is not "
            f"{expected} from its mean_return and the card's reference scores",
        )
    return expected


def _within_bounds(metric: str, score: float, optimal_return: float | None) -> bool:
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
    return optimal_return is None or score <= optimal_return + 1e-9 * max(1.0, abs(optimal_return))


def _check_seeds(spec: BenchmarkSpec, entry: LeaderboardEntry, refuse) -> None:
    seen_ids, seen_seeds = set(), set()
    for run in entry.runs:
        identity = run.identity
        key = (identity and (identity.checkpoint_sha256 or identity.evaluations_sha256)) or run.run_id
        if run.run_id in seen_ids or key in seen_ids:
            raise refuse("duplicate", f"run {run.run_id!r:.80} is listed more than once")
        if run.seed in seen_seeds:
            raise refuse("duplicate", f"seed {run.seed} is listed more than once")
        seen_ids.update({run.run_id, key})
        seen_seeds.add(run.seed)
    if len(seen_seeds) < spec.min_seeds:
        raise refuse("seed-count", f"{len(seen_seeds)} seed(s); benchmark {spec.name} needs at least {spec.min_seeds}")


# ---------------------------------------------------------------------------------------------- across entries
def same_run(new: dict[str, Any], old: dict[str, Any], same_setting: bool, same_acting: bool = True) -> str | None:
    """What makes one run record the same run as another, if anything: the same final checkpoint file or the same
    weights (re-saved under other keys or beside an extra one: `verify.same_weights`) acting by the same rule (one
    network acting greedily and by draws from its distribution is two policies, `same_acting`); the same evaluations under
    another seed (episode seeds depend on the seed, so identical returns are a copy); the same evaluations at the
    same seed in the same setting, i.e. config and dataset (two methods can score the very same episodes: greedy
    policies on a discrete suite; and a policy that ignores its data scores the same on every dataset of one
    environment); or, for entries from before runs carried an identity, the same seed, final and best evaluations
    and learning curve."""
    from offbench.leaderboard.verify import same_weights

    ours, theirs = new.get("identity"), old.get("identity")
    if ours is not None and theirs is not None:
        if same_acting and ours.get("checkpoint_sha256") is not None and ours["checkpoint_sha256"] == theirs.get("checkpoint_sha256"):
            return "final checkpoint"
        if same_acting and same_weights(ours.get("weights"), theirs.get("weights")):
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


def acting_rule(entry: dict[str, Any]) -> bool:
    """Whether an entry's runs acted greedily (True, the default) or by draws from their policies' distributions."""
    return bool((entry.get("evaluation") or {}).get("deterministic", True))


def check_against_accepted(entry: dict[str, Any], accepted: list[tuple[Path, dict[str, Any]]], where: Path | None = None) -> None:
    """The rules between a new entry and the accepted ones: no run twice, one baseline per row, one config and
    distinct seeds per row and dataset. `where` names the new entry (its file); else each run's directory."""
    row, dataset_id = entry["label"], entry["dataset"]["id"]
    first = where or entry["runs"][0]["path"]
    for path, old in accepted:
        for record in entry["runs"]:
            for old_record in old["runs"]:
                same_setting = old.get("config_sha256") == entry["config_sha256"] and old["dataset"]["id"] == dataset_id
                same = same_run(record, old_record, same_setting, acting_rule(old) == acting_rule(entry))
                if same is not None:
                    raise Refused(
                        where or record["path"],
                        "duplicate",
                        f"run {record['run_id']} is run {old_record['run_id']} of accepted entry {path.name} (same {same}), whatever its name",
                    )
        if old["label"] == row and old["baseline"] != entry["baseline"]:
            raise Refused(
                first,
                "config-consistency",
                f"row '{row}' holds baseline {old['baseline']} ({path.name}), not {entry['baseline']}; choose another --label",
            )
        if old["label"] == row and old["dataset"]["id"] == dataset_id:
            if old["config_sha256"] != entry["config_sha256"]:
                raise Refused(
                    first,
                    "config-consistency",
                    f"row '{row}' on {dataset_id} already holds another config ({path.name}); submit this one with --label NAME",
                )
            old_seeds = {r["seed"] for r in old["runs"]}
            for record in entry["runs"]:
                if record["seed"] in old_seeds:
                    raise Refused(
                        where or record["path"], "duplicate", f"row '{row}' on {dataset_id} already has seed {record['seed']} ({path.name})"
                    )


def check_board(entries: list[tuple[Path, dict[str, Any]]]) -> None:
    """The rules between entries, over a whole board: each entry against the ones before it."""
    for index, (path, entry) in enumerate(entries):
        check_against_accepted(entry, entries[:index], where=path)


def entry_verified(entry: dict[str, Any]) -> bool:
    """Whether every run of an entry was replayed from its checkpoint to the same returns."""
    return all((run.get("verification") or {}).get("status") == "verified" for run in entry["runs"])


def provenance_problems(codes: list[dict[str, Any]]) -> list[str]:
    """What keeps runs (their run.json `code` blocks, or an entry's runs' ones) from tracing to one clean commit: a
    dirty tree, seeds made at different commits. Runs from an installed distribution (no git commit) trace to its version."""
    problems = []
    if any(code.get("git_dirty") for code in codes):
        problems.append("dirty tree")
    if len({code.get("git_commit") or code.get("version") for code in codes}) > 1:
        problems.append("mixed commits")
    return problems


def entry_provenance(entry: dict[str, Any]) -> str:
    """One word or two for an entry's page row: "clean", or what `provenance_problems` found."""
    return ", ".join(provenance_problems([run.get("code") or {} for run in entry["runs"]])) or "clean"


def method_summary(entry: dict[str, Any]) -> str:
    """Where an entry's method comes from, in a few words: offbench, a plugin, someone's repository, a black box."""
    method: dict[str, Any] = entry.get("method") or {"kind": "built-in"}
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
        script = script[len(repository.rstrip("/")) + 1 :]  # runs that recorded their checkout's folder: the path inside it
    origin = (repository if shareable else None) or source.get("distribution") or script or "unknown source"
    commit = source.get("git_commit") or source.get("version")
    label = "own code" if kind == "own-code" else "black box"
    return f"{label}: {origin}" + (f" @ {str(commit)[:12]}" if commit else "")
