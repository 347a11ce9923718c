"""The small contract every baseline meets, so the trainer, evaluator and tracker stay algorithm-agnostic.

A baseline module (one file, CORL-style) defines a config dataclass and a class with:

    name: str                                  registry key, e.g. "cql"
    Config: type                               dataclass of hyper-parameters (serialisable with asdict)
    sampler: str                               which batches it trains on: "transitions" | "segments" | ...
    action_kinds: tuple[str, ...]              "continuous" and/or "discrete"; data of another kind is refused
    evaluation_protocols: tuple[str, ...]      the protocols it can be evaluated under (offbench.evaluation.protocols):
                                               "single-task", "multi-task", "in-context"; a card calling for
                                               another is refused before training
    return_conditioned: bool                   evaluated once per target return (Config.target_returns; DT)
    __init__(config, spec: DatasetSpec, device)
    update(batch) -> dict[str, float]          one gradient step; returns losses to log
    policy(options: PolicyOptions) -> Policy   a fresh, stateful policy for a batch of evaluation envs
    state_dict() / load_state_dict(state)      everything needed to resume (networks and optimisers)

Optional, read by the trainer when present:

    sampler_options() -> dict                  extra keyword arguments for make_sampler (e.g. segment_length)
    trains: bool = True                        False for an agent with nothing to learn (llm): update() returns {} and
                                               the standard config takes one update, so the run is its evaluation

Optional, read by tests and docs (every built-in has them):

    summary: str                               one sentence for the baseline tables (README.md, baselines/README.md)
    tiny_config: dict                          Config fields making a model that trains and evaluates in seconds: what
                                               `offbench.testing.check_baseline` builds by default and the tests run

Optional, for the memory check (offbench/training/memory.py) and gradient accumulation:

    memory_shape(config) -> TransformerShape   classmethod: the training pass's transformer, for the memory estimate;
                                               a baseline without one is estimated from its Linear layers
    MicroBatching                              a base class: a baseline that splits its updates into micro-batches
                                               (`TrainConfig.micro_batch`; see the class); one without it refuses
                                               micro_batch in one line

A built-in is registered by being here (`offbench.baselines.builtin_baselines` finds it), and its standard configs
are baselines/<name>/*.toml.

On a multi-task card (DatasetSpec.num_tasks > 1) the batches carry `task_ids` and the policy options the rows'
task ids: the single-task baselines then condition on the task (bc is MTBC, dt is MTDT; see each file).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

import torch

from offbench.data.spec import DatasetSpec
from offbench.errors import OffbenchError
from offbench.evaluation.policy import Policy, PolicyOptions

__all__ = [
    "Baseline",
    "DatasetSpec",
    "MicroBatching",
    "Policy",
    "PolicyOptions",
    "SINGLE_AND_MULTI_TASK",
    "TransformerShape",
    "accumulate_backward",
    "micro_batch_refusal",
    "multi_task_spec",
]

SINGLE_AND_MULTI_TASK = ("single-task", "multi-task")


def multi_task_spec(spec: DatasetSpec, baseline: str) -> None:
    """Refuse one-task data for a baseline that only makes sense across tasks (MOORE, Prompt-DT, HarmoDT)."""
    if spec.num_tasks < 2:
        raise OffbenchError(f"{baseline} is a multi-task baseline: the dataset has one task (use a multi-task card, or bc/dt/cql/iql)")


@runtime_checkable
class Baseline(Protocol):
    name: str
    sampler: str
    action_kinds: tuple[str, ...]
    evaluation_protocols: tuple[str, ...]
    return_conditioned: bool

    def update(self, batch: dict[str, torch.Tensor]) -> dict[str, float]: ...

    def policy(self, options: PolicyOptions) -> Policy: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


@dataclass(frozen=True)
class TransformerShape:
    """A sequence baseline's training pass as the memory estimate counts it (offbench/training/memory.py)."""

    tokens: int  # s: tokens of one training sequence
    width: int  # d
    layers: int  # L
    heads: int  # H
    attention: Literal["sdpa", "explicit"]  # fused scaled_dot_product_attention, or a written-out s x s matrix
    attention_dropout: float = 0.0  # the fused kernel keeps the s x s matrix on CPU only with attention dropout


# ---------------------------------------------------------------------------------------------- micro-batches
class MicroBatching:
    """Gradient accumulation (`TrainConfig.micro_batch`): the trainer sets `micro_batch` on the instance, and the
    baseline's update computes its gradient through `accumulate_backward`, which splits the batch into micro-batches
    of that many rows and adds up their gradients to the whole batch's before the optimisers step once.

    Why one helper called from each update rather than a loop in the trainer: every built-in update takes a single
    backward pass between `zero_grad` and its optimiser steps (CQL, IQL and MOORE-IQL compute every loss from the
    parameters before the update, so one pass serves critic, actor and temperature alike), while what comes around
    it (learning-rate schedules, clipping, HarmoDT's masks, target updates, CQL's noise) belongs to the baseline.
    Wrapping only that pass keeps each update's code and order, and the stepped result is the whole batch's."""

    micro_batch: int | None = None  # rows per backward pass; None: the whole batch at once

    @classmethod
    def batch_coupling(cls, config: Any) -> str | None:
        """Why `config`'s gradient couples the rows of a batch, so that no sum over micro-batches equals it; None
        when micro-batches add up to the whole batch's gradient."""
        if getattr(config, "gradient", "mean") == "pcgrad":
            return "gradient=pcgrad projects each task's gradient over the whole batch off the other tasks'"
        return None


def micro_batch_refusal(baseline_cls: type, config: Any) -> str | None:
    """Why `baseline_cls` cannot split a batch into micro-batches with the whole batch's gradient under `config`
    (its Config), or None when it can."""
    if not (isinstance(baseline_cls, type) and issubclass(baseline_cls, MicroBatching)):
        return "its update does not split a batch (a baseline does through offbench.baselines.base.MicroBatching)"
    return baseline_cls.batch_coupling(config)


def batch_rows(batch: dict[str, Any]) -> int:
    """Rows of a batch: the leading size its tensors share (every sampler puts rows first)."""
    return next(value.shape[0] for value in batch.values() if isinstance(value, torch.Tensor) and value.dim() > 0)


def micro_batches(batch: dict[str, Any], size: int) -> list[dict[str, Any]]:
    """`batch` cut into consecutive parts of `size` rows (the last one smaller when `size` does not divide the
    rows); values that are not per-row tensors go to every part as they are."""
    rows = batch_rows(batch)
    per_row = {key for key, value in batch.items() if isinstance(value, torch.Tensor) and value.dim() > 0 and value.shape[0] == rows}
    return [
        {key: value[start : start + size] if key in per_row else value for key, value in batch.items()} for start in range(0, rows, size)
    ]


def accumulate_backward(
    loss_fn: Callable[[dict[str, Any]], dict[str, torch.Tensor]],
    batch: dict[str, Any],
    micro_batch: int | None,
    units: Callable[[dict[str, Any]], Any] = batch_rows,
) -> dict[str, torch.Tensor]:
    """Backward of `loss_fn(batch)["loss"]`, the whole batch at once or micro-batch by micro-batch (`micro_batch`
    rows each), with the same gradients: `loss_fn` gives means over what `units` counts (rows by default; real steps
    for the DT family), so each micro-batch's loss is weighted by its share of those units. Returns every value
    `loss_fn` gives, detached, as the whole batch's (each micro-batch's weighted by the same share).

    The same holds only where the loss's randomness is the same per row however the batch is split: dropout draws
    other masks for other shapes (equal with dropout off), and noise drawn inside `loss_fn` comes in another order
    (CQL draws its noise for the whole batch first and passes it in the batch)."""
    if micro_batch is None or micro_batch >= batch_rows(batch):
        values = loss_fn(batch)
        values["loss"].backward()
        return {key: value.detach() for key, value in values.items()}
    parts = micro_batches(batch, micro_batch)
    counts = [float(units(part)) for part in parts]
    total, combined = sum(counts), {}
    for part, count in zip(parts, counts):
        if count == 0:  # nothing of this part enters the mean
            continue
        share = count / total
        values = loss_fn(part)
        (values["loss"] * share).backward()
        for key, value in values.items():
            combined[key] = combined.get(key, 0.0) + value.detach() * share
    return combined
