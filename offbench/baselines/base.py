"""The small contract every baseline meets, so the trainer, evaluator and tracker stay algorithm-agnostic.

A baseline module (one file, CORL-style) defines a config dataclass and a class with:

    name: str                                  registry key, e.g. "cql"
    Config: type                               dataclass of hyper-parameters (serialisable with asdict)
    sampler: str                               which batches it trains on: "transitions" | "segments" | ...
    __init__(config, spec: DatasetSpec, device)
    update(batch) -> dict[str, float]          one gradient step; returns losses to log
    policy(**eval_options) -> Policy           a fresh, stateful policy for a batch of evaluation envs
    state_dict() / load_state_dict(state)      everything needed to resume (networks and optimisers)

Optional, read by the trainer when present:

    action_kinds: tuple[str, ...]              ("continuous", "discrete") by default; a dataset of
                                               another kind is refused before training
    sampler_options() -> dict                  extra keyword arguments for make_sampler (e.g. segment_length)
    Config.target_returns                      return-conditioned baselines (DT) are evaluated once per target
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import gymnasium as gym
import numpy as np
import torch



@dataclass(frozen=True)
class DatasetSpec:
    """What a baseline needs to know about its data to build networks (no arrays)."""

    observation_space: gym.Space
    action_space: gym.Space
    observation_shape: tuple[int, ...]
    action_dim: int  # size of a continuous action, or number of discrete actions
    discrete: bool
    max_episode_length: int
    num_tasks: int = 1
    # Per-dimension observation mean and std over the dataset (no epsilon added), for baselines that
    # normalise states as CORL does: (obs - mean) / (std + eps), eps chosen by the baseline.
    observation_mean: np.ndarray | None = field(default=None, compare=False)
    observation_std: np.ndarray | None = field(default=None, compare=False)
    # (min, max) of the episode returns, for baselines that scale rewards by it (IQL, CQL: normalize_reward)
    return_range: tuple[float, float] | None = None

    @classmethod
    def from_store(cls, store) -> DatasetSpec:
        space = store.action_space
        discrete = isinstance(space, gym.spaces.Discrete)
        action_dim = int(space.n) if discrete else int(np.prod(space.shape))
        num_tasks = int(np.max(store.columns["task_id"])) + 1 if "task_id" in store.columns else 1
        mean, std = store.observation_mean_std()
        returns = store.episode_returns()
        return cls(
            observation_space=store.observation_space,
            action_space=space,
            observation_shape=tuple(store.observations.shape[1:]),
            action_dim=action_dim,
            discrete=discrete,
            max_episode_length=int(store.episode_lengths.max()),
            num_tasks=num_tasks,
            observation_mean=mean,
            observation_std=std,
            return_range=(float(returns.min()), float(returns.max())),
        )


@runtime_checkable
class Policy(Protocol):
    """Acts in a batch of environments; stateful baselines (DT, AD) keep their context here."""

    def reset(self, num_envs: int) -> None: ...

    def act(self, observations: np.ndarray) -> np.ndarray: ...

    def observe(self, rewards: np.ndarray, dones: np.ndarray) -> None: ...


@runtime_checkable
class Baseline(Protocol):
    name: str
    sampler: str

    def update(self, batch: dict[str, torch.Tensor]) -> dict[str, float]: ...

    def policy(self, **options: Any) -> Policy: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...
