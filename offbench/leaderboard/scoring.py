"""What a run scores on a benchmark: recomputed from its per-episode returns with the benchmark's own card.

Nothing a run says about its own score is taken on trust. The run directory is read and checked by
`offbench.tracking.read_run` (the same code plots use); here every evaluation line is scored again from
its `returns` with the card the benchmark means (the built-in card of that id, so a user card in
$OFFBENCH_HOME that shadows it with other reference scores or another environment changes nothing),
and a line whose recorded score disagrees is refused. `final` is the last evaluation of the headline
curve, `best` the best one under the benchmark's metric (lowest where lower is better; earliest on ties).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

from offbench.data.cards import DatasetCard, builtin_cards, get_card
from offbench.leaderboard.spec import BenchmarkSpec
from offbench.records import to_dict
from offbench.tracking.read_run import FinishedRun, Refused, check_evaluations, same_number

PER_TASK_FIELDS = {"success_rate": "success_rate", "mean_return": "mean_return"}  # metric -> per_task field


def benchmark_card(dataset_id: str) -> DatasetCard:
    """The card a leaderboard scores `dataset_id` with: the built-in one where it exists, else the registered one."""
    return builtin_cards().get(dataset_id) or get_card(dataset_id)


def expected_checksum(spec: BenchmarkSpec, card: DatasetCard) -> tuple[str | None, str]:
    """(checksum, where it came from) a run's dataset must match; None when nothing can vouch for it."""
    if card.id in spec.dataset_checksums:
        return spec.dataset_checksums[card.id], f"{spec.path} dataset_checksums"
    from offbench.data.resolve import native_path
    from offbench.data.store import is_native, stored_checksum

    recorded = card.extra.get("content_sha256")
    if isinstance(recorded, str):
        return recorded, f"card {card.card_path}"
    local = native_path(card)
    if is_native(local):
        return stored_checksum(local), f"local copy {local}"
    return None, f"no checksum pinned in {spec.path} or the card, and no local copy (run `offbench download {card.id}`)"


def copies_off_the_pins(spec: BenchmarkSpec, dataset_ids: Iterable[str]) -> list[str]:
    """One line per local copy of a dataset `spec` pins whose content is another: runs on it would train, then be
    refused at submission. (A dataset not yet here is made or fetched by the runs; a generation warns then.)"""
    from offbench.data.resolve import native_path
    from offbench.data.store import is_native, stored_checksum

    problems = []
    for dataset_id in dict.fromkeys(dataset_ids):
        pinned = spec.dataset_checksums.get(dataset_id)
        local = None if pinned is None else native_path(benchmark_card(dataset_id))
        got = stored_checksum(local) if local is not None and is_native(local) else None
        if got is not None and got != pinned:
            problems.append(
                f"{local}: content sha256 {got[:12]}... is not the {str(pinned)[:12]}... leaderboard '{spec.name}' pins for "
                f"{dataset_id}{spec.made_on_note(dataset_id)}"
            )
    return problems


@dataclass
class ScoredRun:
    """A run that passed every per-run rule, with its scores as the benchmark computes them."""

    run: FinishedRun
    score: float  # the benchmark's score: final or best, under its metric
    row: dict[str, Any]  # the evaluations.jsonl line that score comes from
    curve: list[tuple[int, float]]  # (step, score) of every evaluation of the headline curve
    metric_name: str

    @property
    def per_task(self) -> list[dict[str, Any]] | None:
        """[{task, score}] at the scored evaluation, in task-id order (multi-task runs, metrics defined per task)."""
        field = PER_TASK_FIELDS.get(self.metric_name)
        per_task = self.row.get("per_task")
        if field is None or not per_task:
            return None
        return [{"task": name, "score": block[field]} for name, block in per_task.items() if block.get(field) is not None] or None


def score_run(run: FinishedRun, spec: BenchmarkSpec) -> ScoredRun:
    """Apply the per-run rules (dataset, checksum, consistency, protocol) and score the run; raises Refused."""
    if run.dataset_id not in spec.datasets:
        raise Refused(run.path, "benchmark-dataset", f"dataset '{run.dataset_id}' is not one of {spec.name}'s: {', '.join(spec.datasets)}")
    card = benchmark_card(run.dataset_id)
    expected, source = expected_checksum(spec, card)
    if expected is None:
        raise Refused(run.path, "dataset-checksum", f"cannot check dataset '{run.dataset_id}': {source}")
    if run.dataset_sha256 != expected:
        raise Refused(
            run.path,
            "dataset-checksum",
            f"dataset '{run.dataset_id}' content sha256 {run.dataset_sha256[:12]}... differs from {expected[:12]}... ({source})",
        )
    _check_protocol(run, spec, card)
    check_evaluations(run)
    headline = [row for row in run.evaluations if row.get("target_return") == run.headline_target]
    curve = [(row["step"], line_score(run, row, spec, card)) for row in headline]
    sign = spec.metric.sign
    index = len(curve) - 1 if spec.score == "final" else max(range(len(curve)), key=lambda i: (sign * curve[i][1], -i))
    return ScoredRun(run=run, score=curve[index][1], row=headline[index], curve=curve, metric_name=spec.metric.name)


def line_score(run: FinishedRun, row: dict[str, Any], spec: BenchmarkSpec, card: DatasetCard) -> float:
    """One evaluation line's score under the benchmark's metric, from its returns (check_evaluations has
    already tied `mean_return` to them); a recorded normalised score must agree with the card's."""
    where = f"evaluations.jsonl step {row['step']}"
    metric = spec.metric
    if metric.name == "normalized_score":
        if card.ref_min_score is None or card.ref_max_score is None:
            raise Refused(run.path, "metric", f"card '{card.id}' has no reference scores, so no normalised score")
        recomputed = float(card.normalise(row["mean_return"]))
        recorded = row.get("normalized_score")
        if recorded is None or not same_number(recorded, recomputed):
            raise Refused(
                run.path,
                "consistency",
                f"{where}: normalized_score {recorded!r} is not {recomputed} = 100 * (mean return - {card.ref_min_score}) / "
                f"({card.ref_max_score} - {card.ref_min_score}) from the card of '{card.id}' (scored with another card?)",
            )
        return recomputed
    value = row.get(metric.field)
    if value is None:
        raise Refused(run.path, "metric", f"{where}: no {metric.field}, which benchmark {spec.name} scores")
    return float(value)


def _check_protocol(run: FinishedRun, spec: BenchmarkSpec, card: DatasetCard) -> None:
    evaluation = run.info["evaluation"]
    black_box = (run.info.get("method") or {}).get("kind") == "black-box"
    problem = protocol_problem(spec, run.baseline, card.id, evaluation, run.summary["steps"], black_box)
    if problem is not None:
        raise Refused(run.path, "protocol", problem)
    card_env = _environment(to_dict(card.env))
    run_env = evaluation.get("env")
    if card_env["id"] and (not isinstance(run_env, dict) or _environment(run_env) != card_env):
        shown = _environment(run_env) if isinstance(run_env, dict) else run_env
        raise Refused(run.path, "protocol", f"evaluated in {shown}, but the dataset card's environment is {card_env}")


TRAINING_KEYS = ("steps", "every_steps")  # the training budget and schedule: a black box has none to match


def protocol_problem(
    spec: BenchmarkSpec, baseline: str, dataset: str, evaluation: dict[str, Any], steps: Any, black_box: bool
) -> str | None:
    """How a run's `evaluation` block (and training `steps`) differ from the benchmark's protocol, or None. Boards
    report held-out tasks, so an in-context run evaluated on its validation or training tasks is refused."""
    if evaluation.get("protocol") == "in-context" and evaluation.get("tasks") != "held-out":
        return f"run.json evaluation.tasks is {evaluation.get('tasks')!r}; benchmark {spec.name} reports the held-out tasks"
    for key, wanted in spec.protocol_for(baseline, dataset).items():
        if key in TRAINING_KEYS and black_box:
            continue
        if key == "steps":
            got = steps
        elif key == "target_returns":  # binds return-conditioned runs only: BC or CQL runs have none
            if not evaluation.get("target_returns"):
                continue
            got = sorted(float(v) for v in evaluation["target_returns"])
            wanted = sorted(float(v) for v in wanted)
        else:
            got = evaluation.get(key)
        if got != wanted:
            what = "summary.json steps" if key == "steps" else f"run.json evaluation.{key}"
            return f"{what} is {got!r}; benchmark {spec.name} requires {wanted!r}"
    return None


def _environment(env: dict[str, Any]) -> dict[str, Any]:
    """What defines an evaluation environment in a card's [env] table (notes and the like aside)."""
    return {"id": env.get("id"), "suite": env.get("suite", "gymnasium"), "kwargs": env.get("kwargs") or {}}
