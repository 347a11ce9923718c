"""What evaluation records (docs/run-directory.md): how a run is evaluated (`EvaluationSettings`, run.json's
`evaluation` block) and what one evaluation scored (`EvaluationRecord`, a line of evaluations.jsonl), as the
protocols build them and every reader reads them back; and which field is a run's headline (`score_metric`).

One record serves every protocol: the single-task fields are always there, the multi-task and in-context ones only
where that protocol writes them. Fields a protocol measured but could not give a value (no reference scores, no
success signal, an unknown optimum) are written as null rather than left out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from offbench.records import ranged

PROTOCOL_NAMES = ("single-task", "multi-task", "in-context")
LOWER_IS_BETTER = frozenset({"regret"})  # headline metrics where the smaller number is the better run
SCORE_METRICS = ("normalized_score", "success_rate", "mean_return", "regret")


@dataclass(kw_only=True)
class EvaluationSettings:
    """run.json's `evaluation` block: the protocol a run is evaluated under and its settings."""

    protocol: str | None = ranged(
        None,
        choices=PROTOCOL_NAMES,
        doc="the evaluation protocol (runs from before it was recorded: in-context where they have in_context_episodes, else single-task)",
    )
    episodes: int = ranged(ge=0, doc="episodes per evaluation (multi-task: per task; in-context: consecutive episodes per task)")
    every_steps: int = ranged(ge=0, doc="steps between evaluations (0: at the last step only)")
    target_returns: list[float] | None = ranged(
        null=True, doc="the return-conditioned baseline's target returns, headline first; null for the others"
    )
    deterministic: bool = ranged(True, doc="greedy / mean actions (false: sampled)")
    env: dict[str, Any] | None = ranged(None, null=True, doc="the card's environment spec")
    episode_seeds: str | None = ranged(None, doc="how episode seeds follow from the run's seed")
    tasks: list[str] | str | None = ranged(
        None, doc="multi-task: the task names in task-id order; in-context: the split evaluated (held-out, validation or train)"
    )
    task_target_returns: list[float] | None = ranged(
        None,
        null=lambda settings: settings.protocol == "multi-task",
        doc="multi-task, return-conditioned without a target: each task's best return in the data",
    )
    in_context_episodes: int | None = ranged(None, ge=1, doc="in-context: consecutive episodes per task")
    task_ids: list[int] | None = ranged(None, doc="in-context: the evaluated tasks' ids")
    env_seed: int | None = ranged(None, doc="in-context: the seed of the batched environment")

    @property
    def protocol_name(self) -> str:
        """The protocol, also for runs from before it was recorded."""
        return self.protocol or ("in-context" if self.in_context_episodes is not None else "single-task")

    @property
    def headline_target(self) -> float | None:
        """The target return of the headline curve: the first of `target_returns`, else None."""
        return self.target_returns[0] if self.target_returns else None


def _in_context(line: EvaluationRecord) -> bool:
    return line.in_context_returns is not None


@dataclass(kw_only=True)
class TaskScores:
    """One task's episodes of a multi-task evaluation line (`per_task`)."""

    task_id: int = ranged(doc="the task's id in the data")
    returns: list[float] = ranged(doc="each episode's return")
    successes: list[bool] | None = ranged(None, null=True, doc="each episode's success; null where the environment reports none")
    mean_return: float = ranged(doc="mean of `returns`")
    success_rate: float | None = ranged(None, null=True, doc="fraction of `successes`; null where there are none")


@dataclass(kw_only=True)
class EvaluationRecord:
    """One line of evaluations.jsonl: one evaluation at one step (and one target return)."""

    step: int = ranged(ge=0, doc="training step of the evaluation")
    returns: list[float] = ranged(doc="per-episode returns (multi-task: task-major; in-context: each task's last episode)")
    lengths: list[int] = ranged(doc="per-episode lengths, one per return")
    mean_return: float = ranged(doc="mean of `returns` (multi-task: mean over tasks; in-context: `in_context_returns[-1]`)")
    normalized_score: float | None = ranged(
        None, null=True, doc="100 * (R - ref_min) / (ref_max - ref_min) of `mean_return`, where the card has reference scores"
    )
    success_rate: float | None = ranged(None, null=True, doc="fraction of episodes that succeeded, where the environment reports success")
    target_return: float | None = ranged(None, null=True, doc="the return the policy was conditioned on (return-conditioned baselines)")
    per_task: dict[str, TaskScores] | None = ranged(None, doc="multi-task: each task's scores, in task-id order")
    in_context_returns: list[float] | None = ranged(None, doc="in-context: mean over tasks of each consecutive episode's return")
    optimal_return: float | None = ranged(
        None, null=_in_context, doc="in-context: mean over tasks of the optimal return; null where unknown"
    )
    tasks: str | None = ranged(None, doc="in-context: which split was evaluated (held-out, validation or train)")
    task_returns: list[list[float]] | None = ranged(None, doc="in-context: per task, each episode's return")
    regret: float | None = ranged(
        None, null=_in_context, doc="in-context: cumulative regret over all episodes (lower is better); null where the optimum is unknown"
    )
    in_context_regret: list[float] | None = ranged(None, null=_in_context, doc="in-context: the cumulative regret after each episode")
    policy_usage: dict[str, float | list[float]] | None = ranged(
        None,
        doc="what a policy that reports it (`usage()`) spent on this evaluation: a language model's requests, tokens (also per episode), re-asks and fallback draws",
    )


def score_metric(evaluations: Sequence[Mapping[str, Any]], has_reference_scores: bool) -> str:
    """The single-task headline field: normalised score where the card has reference scores, else success rate
    where the environment reports success, else the raw mean return."""
    if has_reference_scores:
        return "normalized_score"
    if any(line.get("success_rate") is not None for line in evaluations):
        return "success_rate"
    return "mean_return"
