"""Run many episodes of many tasks of a multi-task suite in one process, in lock-step.

Every episode is a *lane*: (task id, episode index, reset seed). A round steps up to `max_envs` lanes together
and asks the policy for all their actions in one batched call, so a network evaluates the whole round at once
(MuJoCo and MiniGrid environments step one at a time; the policy is where batching pays). Environments are
kept per task and reused across rounds. The same loop collects the multi-task datasets (`record=True`), so a
dataset's recorded success rate is, by construction, what `evaluate_tasks` measures for the behaviour policy
with the recipe's seed.

The reset seed of episode e of task `name` under seed s is `episode_seed(s, name, e)`: it chooses the
Meta-World goal or the MiniGrid layout. It hashes the task *name*, so a task has the same episodes in a
subset of a suite as in the whole suite.
"""

from __future__ import annotations

import zlib
from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Sequence

import gymnasium as gym
import numpy as np
import pandas as pd

from offbench.envs.factory import make_env
from offbench.envs.live_rows import LiveRows
from offbench.errors import OffbenchError

if TYPE_CHECKING:  # the protocol only; importing it would pull in torch
    from offbench.evaluation.policy import Policy


@dataclass(frozen=True)
class Lane:
    task_id: int
    episode: int
    seed: int  # the reset seed: Meta-World goal or MiniGrid layout


PolicyFactory = Callable[[Sequence[Lane], Sequence[gym.Env]], "Policy"]
"""Makes a fresh policy for one round of lanes, e.g. `lambda lanes, envs: baseline.policy(task_ids=[...])`.

It also gets the lanes' environments, for privileged behaviour policies (the MiniGrid planner reads the full
grid); a learned policy must not look at them."""


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


def run_lanes(
    pool: EnvPool,
    lanes: Sequence[Lane],
    policy_factory: PolicyFactory,
    max_envs: int = 64,
    record: bool = False,
) -> list[dict[str, Any]]:
    """Play every lane to its end; one result per lane, in lane order.

    A result holds `return`, `success` (Meta-World's definition: `info["success"]` true at any step), `length`
    and `reset_info`; with `record=True` also the episode's arrays (observations with T + 1 rows, actions,
    rewards, terminations, truncations, success per step). Lanes that finished before the others in their
    round report reward 0 and done=True to the policy until the round ends; their actions are ignored.
    """
    results: list[dict[str, Any]] = []
    for lo in range(0, len(lanes), max_envs):
        results.extend(_run_round(pool, lanes[lo : lo + max_envs], policy_factory, record))
    return results


def _run_round(pool: EnvPool, lanes: Sequence[Lane], policy_factory: PolicyFactory, record: bool) -> list[dict[str, Any]]:
    n = len(lanes)
    envs = [pool.take(lane.task_id) for lane in lanes]
    try:
        starts = [env.reset(seed=lane.seed) for env, lane in zip(envs, lanes)]
        obs = np.stack([o for o, _ in starts])
        results: list[dict[str, Any]] = [
            {"return": 0.0, "success": False, "length": 0, "reset_info": info} for _, info in starts
        ]
        if record:  # (the reset observations themselves: rows of `obs` are overwritten as lanes step)
            for result, (o, _) in zip(results, starts):
                result.update(observations=[o], actions=[], rewards=[], terminations=[], truncations=[], step_success=[])
        policy = LiveRows(policy_factory(lanes, envs), n)
        active = np.ones(n, dtype=bool)
        while active.any():
            actions = policy.act(obs)
            rewards = np.zeros(n, dtype=np.float32)
            for i in np.flatnonzero(active):
                o, r, terminated, truncated, info = envs[i].step(actions[i])
                success = bool(info.get("success", False))
                result = results[i]
                result["return"] += float(r)
                result["success"] |= success
                result["length"] += 1
                if record:
                    result["observations"].append(o)
                    result["actions"].append(np.array(actions[i]))
                    result["rewards"].append(r)
                    result["terminations"].append(terminated)
                    result["truncations"].append(truncated)
                    result["step_success"].append(success)
                obs[i] = o
                rewards[i] = r
                active[i] = not (terminated or truncated)
            policy.observe(rewards, ~active, active)
    finally:
        for env, lane in zip(envs, lanes):
            pool.give_back(lane.task_id, env)
    return results


def evaluate_tasks(
    env_spec: dict[str, Any],
    policy_factory: PolicyFactory,
    episodes_per_task: int,
    seed: int,
    tasks: Sequence[int] | None = None,
    max_envs: int = 64,
) -> pd.DataFrame:
    """Evaluate a policy on every task of a multi-task card; one row per episode.

    Columns: task_id, task, episode, seed, return, success, length. Rounds mix tasks (episode-major order),
    so one batched policy call covers all tasks. `summarise()` turns the rows into a per-task table.
    """
    names = task_names(env_spec)
    task_ids = list(range(len(names))) if tasks is None else list(tasks)
    lanes = [Lane(t, e, episode_seed(seed, names[t], e)) for e in range(episodes_per_task) for t in task_ids]
    pool = EnvPool(env_spec)
    try:
        results = run_lanes(pool, lanes, policy_factory, max_envs=max_envs)
    finally:
        pool.close()
    return pd.DataFrame(
        {
            "task_id": [lane.task_id for lane in lanes],
            "task": [names[lane.task_id] for lane in lanes],
            "episode": [lane.episode for lane in lanes],
            "seed": [lane.seed for lane in lanes],
            "return": [r["return"] for r in results],
            "success": [r["success"] for r in results],
            "length": [r["length"] for r in results],
        }
    ).sort_values(["task_id", "episode"], ignore_index=True)


def summarise(episodes: pd.DataFrame) -> pd.DataFrame:
    """Per task: episodes, success_rate, mean_return, mean_length (index: task name, in task-id order)."""
    grouped = episodes.sort_values("task_id").groupby("task", sort=False)
    return pd.DataFrame(
        {
            "episodes": grouped.size(),
            "success_rate": grouped["success"].mean(),
            "mean_return": grouped["return"].mean(),
            "mean_length": grouped["length"].mean(),
        }
    )
