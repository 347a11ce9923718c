"""What a baseline needs to know about its data to build networks: spaces, sizes, statistics, no arrays."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import gymnasium as gym
import numpy as np

from offbench.errors import OffbenchError

if TYPE_CHECKING:
    from offbench.data.store import EpisodeStore, InPlaceStore


@dataclass(frozen=True)
class DatasetSpec:
    """What a baseline needs to know about its data to build networks (no arrays)."""

    observation_space: gym.Space | None  # None: the file records none (observation_shape still holds)
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
    def from_store(cls, store: EpisodeStore | InPlaceStore) -> DatasetSpec:
        from offbench.data.store import EpisodeStore

        if not isinstance(store, EpisodeStore):  # read in place, too large for a pass over the data (XLand): the store says
            return store.dataset_spec()
        space = store.action_space
        if space is None or space.shape is None:
            raise OffbenchError(
                f"{store.path or 'the dataset'}: a baseline sizes its networks by an action space of fixed shape, got {space}"
            )
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
