"""Meta-World v3 multi-task suites (MT10, MT50, MT1): any task, with its goal randomisation, rebuilt from a card.

Goal randomisation, as Meta-World 3.x does it (`metaworld/__init__.py`, `_make_tasks`): `MT10(seed)` /
`MT50(seed)` seed NumPy's global RNG with `seed` and draw 50 goal (and object) positions per task class, in
benchmark order; `MT1(task, seed)` draws one task's 50 alone (our "MT1" suite: any v3 tasks, each drawn that
way; cheap enough for tests). A card stores only the suite, that seed and the task names; the pickled `Task`
objects are rebuilt here on demand and never written to disk.

A card's [env] table for this suite:

    [env]
    suite = "metaworld"
    id = "MT10"                                   # MT10 | MT50 | MT1: whose goal draws (and task list) to use
    kwargs = { seed = 0, tasks = ["reach-v3", ...], max_episode_steps = 500 }

`make_env(card.env, task)` takes a task id (index into `tasks`) or a task name. Each `reset(seed=s)` picks one
of the task's 50 goals from `s` (or `options={"goal_id": k}`), so an episode is reproduced by its reset seed.
Episodes are truncated at `max_episode_steps` (500, Meta-World's `max_path_length`) and never terminated:
success does not end an episode; `info["success"]` reports it at every step.
"""

from __future__ import annotations

import functools
from typing import Any

import gymnasium as gym
import numpy as np

from offbench.envs.factory import register_suite
from offbench.errors import OffbenchError, require

MAX_PATH_LENGTH = 500  # SawyerXYZEnv.max_path_length in Meta-World 3.x
OBSERVATION_DIM = 39  # hand (3), gripper (1), objects (14), the previous frame of both (18), goal (3)
SUITES = ("MT10", "MT50", "MT1")  # MT1: any v3 tasks, each with the goals `metaworld.MT1(task, seed)` draws


def suite_tasks(suite: str) -> list[str]:
    """The task names of a suite, in Meta-World's benchmark order (cheap: no environment is built)."""
    require("metaworld", "metaworld")
    from metaworld import env_dict

    if suite not in SUITES:
        raise OffbenchError(f"unknown Meta-World suite '{suite}' (known: {', '.join(SUITES)})")
    return list(env_dict.ALL_V3_ENVIRONMENTS if suite == "MT1" else getattr(env_dict, f"{suite}_V3"))


@functools.cache
def _benchmark_goals(suite: str, seed: int, task: str | None) -> dict[str, list[Any]]:
    metaworld = require("metaworld", "metaworld")
    benchmark = metaworld.MT1(task, seed=seed) if suite == "MT1" else getattr(metaworld, suite)(seed=seed)
    goals: dict[str, list[Any]] = {name: [] for name in benchmark.train_classes}
    for goal in benchmark.train_tasks:
        goals[goal.env_name].append(goal)
    return goals


def task_goals(suite: str, seed: int, task: str) -> list[Any]:
    """The 50 goal `Task`s of one task, as `metaworld.<suite>(seed=seed)` draws them (built once per process).

    MT10 and MT50 draw every task's goals in one sequence, so the whole benchmark is built (seconds to tens of
    seconds); MT1 builds one task (about a second).
    """
    if (suite, seed, task) in _preloaded:
        return _preloaded[(suite, seed, task)]
    if task not in suite_tasks(suite):
        raise OffbenchError(f"task '{task}' is not in Meta-World {suite}")
    return _benchmark_goals(suite, seed, task if suite == "MT1" else None)[task]


_preloaded: dict[tuple[str, int, str], list[Any]] = {}


def preload_goals(goals: dict[tuple[str, int, str], list[Any]]) -> None:
    """Fill this process's goal cache (a worker initialiser: the parent builds the benchmark once, not every worker)."""
    _preloaded.update(goals)


class MetaWorldTaskEnv(gym.Env):
    """One Meta-World task; each reset picks one of its goals. Observations float32, `info["success"]` a bool."""

    metadata = {"render_modes": []}

    def __init__(self, name: str, goals: list[Any], max_episode_steps: int = MAX_PATH_LENGTH):
        from metaworld.env_dict import ALL_V3_ENVIRONMENTS

        if not 1 <= max_episode_steps <= MAX_PATH_LENGTH:
            raise OffbenchError(f"max_episode_steps must be in 1..{MAX_PATH_LENGTH}, got {max_episode_steps}")
        self.task_name = name
        self.goals = goals
        self.max_episode_steps = max_episode_steps
        self._env = ALL_V3_ENVIRONMENTS[name]()
        self._env.set_task(goals[0])  # MT suites observe the goal (partially_observable=False)
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (OBSERVATION_DIM,), np.float32)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
        self._goal_rng = np.random.default_rng()
        self._steps = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        if seed is not None:
            self._goal_rng = np.random.default_rng(seed)
        goal_id = (options or {}).get("goal_id")
        if goal_id is None:
            goal_id = int(self._goal_rng.integers(len(self.goals)))
        self._env.set_task(self.goals[goal_id])
        obs, info = self._env.reset()
        self._steps = 0
        return obs.astype(np.float32), {**info, "goal_id": int(goal_id)}

    def step(self, action):
        obs, reward, terminated, truncated, info = self._env.step(np.asarray(action, dtype=np.float32))
        self._steps += 1
        truncated = bool(truncated) or self._steps >= self.max_episode_steps
        info = {**info, "success": bool(info["success"])}
        return obs.astype(np.float32), float(reward), bool(terminated), truncated, info

    def close(self) -> None:
        self._env.close()


@register_suite("metaworld")
def make_metaworld_env(
    env_id: str,
    task: int | str | None = None,
    seed: int = 0,
    tasks: list[str] | None = None,
    max_episode_steps: int = MAX_PATH_LENGTH,
) -> gym.Env:
    """The environment of one task of a Meta-World suite, goals drawn as `metaworld.<env_id>(seed)` draws them."""
    from offbench.envs.multitask import task_by_id

    names = list(tasks) if tasks is not None else suite_tasks(env_id)
    unknown = sorted(set(names) - set(suite_tasks(env_id)))
    if unknown:
        raise OffbenchError(f"task(s) {', '.join(unknown)} are not in Meta-World {env_id}")
    name = task_by_id(names, task, f"Meta-World {env_id}")
    return MetaWorldTaskEnv(name, task_goals(env_id, int(seed), name), max_episode_steps=int(max_episode_steps))


def scripted_policy(name: str):
    """Meta-World's own scripted expert for a task (`metaworld.policies.ENV_POLICY_MAP`)."""
    import warnings

    require("metaworld", "metaworld")
    from metaworld.policies import ENV_POLICY_MAP

    # The experts warn on every large correction ("Constant(s) may be too high"); the env clips, as intended.
    warnings.filterwarnings("ignore", message=r"Constant\(s\) may be too high", module="metaworld.policies.policy")
    return ENV_POLICY_MAP[name]()
