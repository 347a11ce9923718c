"""The episodes of a multi-task suite: lanes, their reset seeds, task names, and a pool of environments per task.

Every episode is a *lane*: (task id, episode index, reset seed). Playing a policy in lanes is evaluation's
(`offbench.evaluation.lanes`); the environments here only step.

The reset seed of episode e of task `name` under seed s is `episode_seed(s, name, e)`: it chooses the
Meta-World goal or the MiniGrid layout. It hashes the task *name*, so a task has the same episodes in a
subset of a suite as in the whole suite.
"""

from __future__ import annotations

import zlib
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

from offbench.envs.factory import make_env
from offbench.errors import OffbenchError


@dataclass(frozen=True)
class Lane:
    task_id: int
    episode: int
    seed: int  # the reset seed: Meta-World goal or MiniGrid layout


def episode_seed(seed: int, task: str, episode: int) -> int:
    """The reset seed of one episode: independent of which other tasks run, of chunking and of workers."""
    state = np.random.SeedSequence([int(seed), zlib.crc32(task.encode()), int(episode)]).generate_state(2)
    return int(state[0]) << 31 | int(state[1]) >> 1  # 63 bits: fits int64 columns


def task_names(env_spec: dict[str, Any]) -> list[str]:
    """The task list of a multi-task card's [env] table (task id i is the i-th name)."""
    tasks = env_spec.get("kwargs", {}).get("tasks")
    if not tasks:
        raise OffbenchError(f"the [env] table of suite '{env_spec.get('suite')}' has no kwargs.tasks list")
    return list(tasks)


def task_by_id(names: list[str], task: int | str | None, where: str) -> str:
    """A task name from an id (index into `names`) or a name, with errors that list what exists."""
    if task is None:
        raise OffbenchError(f"{where} is multi-task: say which task (an id 0..{len(names) - 1} or a name)")
    if isinstance(task, str):
        if task not in names:
            raise OffbenchError(f"unknown task '{task}' in {where} (known: {', '.join(names)})")
        return task
    if not 0 <= int(task) < len(names):
        raise OffbenchError(f"task id {task} out of range in {where} ({len(names)} tasks)")
    return names[int(task)]


class EnvPool:
    """Environments per task id, built on first use from the card's [env] table and reused."""

    def __init__(self, env_spec: dict[str, Any]):
        self.env_spec = env_spec
        self._free: dict[int, list[gym.Env]] = defaultdict(list)
        self._all: list[gym.Env] = []

    def take(self, task_id: int) -> gym.Env:
        if self._free[task_id]:
            return self._free[task_id].pop()
        env = make_env(self.env_spec, task_id)
        self._all.append(env)
        return env

    def give_back(self, task_id: int, env: gym.Env) -> None:
        self._free[task_id].append(env)

    def close(self) -> None:
        for env in self._all:
            env.close()
