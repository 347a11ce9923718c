"""Run many episodes of many tasks of a multi-task suite in one process, in lock-step.

A round steps up to `max_envs` lanes (`offbench.envs.multitask.Lane`) together and asks the policy for all
their actions in one batched call, so a network evaluates the whole round at once (MuJoCo and MiniGrid
environments step one at a time; the policy is where batching pays). Environments are kept per task
(`EnvPool`) and reused across rounds. The same loop collects the multi-task datasets (`record=True`), so a
dataset's recorded success rate is, by construction, what `evaluate_tasks` measures for the behaviour policy
with the recipe's seed. Kept free of torch: dataset collection runs through it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Sequence

import gymnasium as gym
import numpy as np
import pandas as pd

from offbench.envs.multitask import EnvPool, Lane, episode_seed, task_names
from offbench.evaluation.live_rows import LiveRows

if TYPE_CHECKING:  # the protocol only; importing it would pull in torch
    from offbench.evaluation.policy import Policy


PolicyFactory = Callable[[Sequence[Lane], Sequence[gym.Env]], "Policy"]
"""Makes a fresh policy for one round of lanes, e.g. `lambda lanes, envs: baseline.policy(task_ids=[...])`.

It also gets the lanes' environments, for privileged behaviour policies (the MiniGrid planner reads the full
grid); a learned policy must not look at them."""


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
        results: list[dict[str, Any]] = [{"return": 0.0, "success": False, "length": 0, "reset_info": info} for _, info in starts]
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
