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

A built-in is registered by being here (`offbench.baselines.builtin_baselines` finds it), and its standard configs
are baselines/<name>/*.toml.

On a multi-task card (DatasetSpec.num_tasks > 1) the batches carry `task_ids` and the policy options the rows'
task ids: the single-task baselines then condition on the task (bc is MTBC, dt is MTDT; see each file).
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import torch

from offbench.data.spec import DatasetSpec
from offbench.errors import OffbenchError
from offbench.evaluation.policy import Policy, PolicyOptions

__all__ = ["Baseline", "DatasetSpec", "Policy", "PolicyOptions", "SINGLE_AND_MULTI_TASK", "multi_task_spec"]

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
