"""linear-bc meets offbench's baseline contract, checked as offbench checks its own baselines."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from offbench_example_plugin.linear_bc import LinearBC

from offbench.data.store import EpisodeStore
from offbench.testing import check_baseline


def tiny_store(discrete: bool, num_tasks: int = 1, episodes: int = 6, length: int = 10) -> EpisodeStore:
    """Random episodes of 4-dimensional observations; each episode's task id in a `task_id` column when num_tasks > 1."""
    rng = np.random.default_rng(0)
    action_space = gym.spaces.Discrete(3, seed=0) if discrete else gym.spaces.Box(-1, 1, (2,), np.float32, seed=0)

    def episode(index: int) -> dict[str, np.ndarray]:
        truncations = np.zeros(length, bool)
        truncations[-1] = True
        columns = {
            "observations": rng.normal(size=(length + 1, 4)).astype(np.float32),
            "actions": np.stack([action_space.sample() for _ in range(length)]),
            "rewards": rng.normal(size=length).astype(np.float32),
            "terminations": np.zeros(length, bool),
            "truncations": truncations,
        }
        if num_tasks > 1:
            columns["task_id"] = np.full(length, index % num_tasks, np.int64)
        return columns

    return EpisodeStore.from_episodes(
        [episode(i) for i in range(episodes)],
        action_space=action_space,
        observation_space=gym.spaces.Box(-np.inf, np.inf, (4,), np.float32),
    )


@pytest.mark.parametrize("hidden_dim", [0, 8])
@pytest.mark.parametrize("num_tasks", [1, 3])
@pytest.mark.parametrize("discrete", [False, True])
def test_linear_bc_meets_the_offbench_contract(discrete, num_tasks, hidden_dim):
    check_baseline(LinearBC, {"hidden_dim": hidden_dim}, tiny_store(discrete, num_tasks))
