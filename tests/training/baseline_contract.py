"""The contract every registered baseline meets (d3rlpy-style: one check, called for every algorithm).

`check_baseline_contract(name, store, num_envs, device)` runs the public `offbench.testing.check_baseline` (what a
plugin's own tests run) on the baseline with its own `tiny_config`, on a store of the kind its first evaluation
protocol needs."""

from __future__ import annotations

import dataclasses

import gymnasium as gym
import numpy as np

from offbench.baselines import get_baseline
from offbench.testing import check_baseline


def tiny(name: str, cls: type):
    """Baseline `name`'s Config with its tiny_config applied."""
    assert getattr(cls, "tiny_config", None), f"{name}: give the class a tiny_config (offbench/baselines/base.py)"
    return dataclasses.replace(cls.Config(), **cls.tiny_config)


def check_baseline_contract(name: str, store, num_envs: int = 3, device: str = "cpu") -> None:
    check_baseline(get_baseline(name), None, store, num_envs=num_envs, device=device)


def multi_task_store(num_tasks: int = 3, episodes_per_task: int = 6, length: int = 8, seed: int = 0):
    """Discrete-action multi-task data where the right action is the task id whatever the observation."""
    from offbench.data.store import EpisodeStore

    rng = np.random.default_rng(seed)
    episodes = []
    for task in range(num_tasks):
        for _ in range(episodes_per_task):
            truncations = np.zeros(length, bool)
            truncations[-1] = True
            episodes.append(
                {
                    "observations": rng.normal(size=(length + 1, 4)).astype(np.float32),
                    "actions": np.full(length, task, np.int64),
                    "rewards": rng.uniform(size=length).astype(np.float32) + task,
                    "terminations": np.zeros(length, bool),
                    "truncations": truncations,
                    "task_id": np.full(length, task, np.int64),
                }
            )
    return EpisodeStore.from_episodes(
        episodes, observation_space=gym.spaces.Box(-np.inf, np.inf, (4,), np.float32), action_space=gym.spaces.Discrete(num_tasks)
    )
