"""The data's own score: what a board's `[behaviour]` row holds, computed from the dataset as offbench opens it.

A reader of a board must see whether a method beats the data. The behaviour policy's score is the dataset's own
episodes scored in the board's metric: for success_rate (a multi-task dataset) the mean over tasks of the fraction
of each task's episodes that succeed (the generators' `task_stats`), for normalized_score the mean episode return
normalised with the card's reference scores (`DatasetCard.normalise`, as a run's evaluations are). `offbench
leaderboard behaviour NAME` prints the `[behaviour]` table to paste; `offbench leaderboard check` compares the
written values with the data where it is on this machine, and never downloads or generates it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from offbench.errors import OffbenchError
from offbench.leaderboard.spec import BEHAVIOUR_METRICS, BenchmarkSpec

if TYPE_CHECKING:
    from offbench.data.resolve import Dataset

TOLERANCE = {"success_rate": 5e-4, "normalized_score": 0.05}  # what a written value may differ from the data's by
DECIMALS = {"success_rate": 3, "normalized_score": 2}  # how `leaderboard behaviour` writes them: well inside the tolerance


def behaviour_score(dataset: Dataset, metric: str) -> float:
    """The dataset's own episodes scored in `metric` (module docstring); a dataset that cannot have that score is a
    one-line OffbenchError naming it."""
    from offbench.data.store import EpisodeStore
    from offbench.envs.multitask import task_names
    from offbench.generators.multitask import task_stats

    store, card = dataset.store, dataset.card
    where = f"{dataset.path} ({dataset.id})"
    if not isinstance(store, EpisodeStore):
        raise OffbenchError(f"{where}: read in place, its episodes have no behaviour score")
    if metric == "success_rate":
        missing = [column for column in ("task_id", "infos/success") if column not in store.columns]
        if missing or card is None or card.env.kwargs is None:
            what = f"no {' or '.join(missing)} column" if missing else "no task list in its card's [env] table"
            raise OffbenchError(f"{where}: {what}, so the data's per-task success rate cannot be computed")
        per_task = task_stats(store, task_names(dict(card.env)))
        return float(np.mean([stats["success_rate"] for stats in per_task.values()]))
    if metric == "normalized_score":
        normalised = None if card is None else card.normalise(float(store.episode_returns().mean()))
        if normalised is None:
            raise OffbenchError(f"{where}: its card has no reference scores (scores.ref_min, scores.ref_max), so no normalised score")
        return float(normalised)
    raise OffbenchError(f"the data has no '{metric}' score (behaviour scores: {', '.join(BEHAVIOUR_METRICS)})")


def local_dataset(dataset_id: str) -> Dataset | None:
    """The registered dataset opened from this machine's copy, or None where it has none (nothing is fetched)."""
    from offbench.data.cards import get_card
    from offbench.data.resolve import is_local, open_dataset

    return open_dataset(dataset_id) if is_local(get_card(dataset_id)) else None


@dataclass(frozen=True)
class BehaviourScore:
    """One dataset's score from its data on this machine, or None where it could not be scored (`skipped` says why)."""

    dataset: str
    computed: float | None
    skipped: str = ""


def compute_behaviour(spec: BenchmarkSpec, datasets: tuple[str, ...] | None = None) -> list[BehaviourScore]:
    """Each of `datasets` (default: those of the board's `[behaviour]`) scored from its data on this machine. A copy
    whose content differs from the board's `[dataset_checksums]` pin is skipped: it is not the data the board holds."""
    scores = []
    for dataset_id in spec.behaviour if datasets is None else datasets:
        dataset = local_dataset(dataset_id)
        if dataset is None:
            scores.append(BehaviourScore(dataset_id, None, "not on this machine"))
            continue
        pinned = spec.dataset_checksums.get(dataset_id)
        if pinned is not None and dataset.store.content_sha256() != pinned:
            scores.append(
                BehaviourScore(dataset_id, None, f"the copy at {dataset.path} is not the pinned content{spec.made_on_note(dataset_id)}")
            )
            continue
        scores.append(BehaviourScore(dataset_id, behaviour_score(dataset, spec.metric.name)))
    return scores


def check_lines(spec: BenchmarkSpec, scores: list[BehaviourScore]) -> tuple[list[str], list[str]]:
    """(problems, notes) of `leaderboard check` for the board's `[behaviour]` values and their `scores`: a problem
    names the file, the dataset, the written and the computed value; a note says what agreed or was skipped. A board
    without such values (whatever its metric: regret, in-context return) has nothing to compare."""
    if not scores:
        return [], []
    tolerance, problems, notes = TOLERANCE[spec.metric.name], [], []
    for score in scores:
        written = spec.behaviour[score.dataset]
        if score.computed is None:
            notes.append(f"{spec.name}: [behaviour] '{score.dataset}' not compared: {score.skipped}")
        elif abs(written - score.computed) <= tolerance + 1e-12:  # a value rounded to the tolerance's last digit agrees
            notes.append(f"{spec.name}: [behaviour] '{score.dataset}' = {written:g} agrees with the data ({score.computed:.4f})")
        else:
            problems.append(
                f"{spec.path}: [behaviour] '{score.dataset}' = {written:g}, but the data gives {score.computed:.4f} "
                f"(tolerance {tolerance:g}; `offbench leaderboard behaviour {spec.name}` prints the table)"
            )
    return problems, notes


def behaviour_toml(spec: BenchmarkSpec, scores: list[BehaviourScore]) -> str:
    """The `[behaviour]` table to paste into benchmark.toml, from the datasets that were scored."""
    decimals = DECIMALS[spec.metric.name]
    lines = ["[behaviour]"]
    lines += [f"{json.dumps(s.dataset)} = {s.computed:.{decimals}f}" for s in scores if s.computed is not None]
    return "\n".join(lines) + "\n"
