"""Meta-World MT10 / MT50 offline data from Meta-World's own scripted expert policies, with action noise.

Behaviour (per step, on the expert's action a = policy.get_action(obs)):
  near-optimal  a + N(0, 0.1^2), clipped to [-1, 1]
  noisy-expert  with probability 0.5 a uniform random action in [-1, 1]^4, otherwise a + N(0, 0.5^2), clipped
                (the expert with per-step noise, not a worse policy's coherent experience, which the published
                "sub-optimal" Meta-World sets hold, MTDiff's: for that, see generator metaworld-learned)
  mixed         one of the two, by a fair coin per episode (the `behaviour` column says which)
The levels were chosen by measuring MT10 (seed 0, 10 episodes per task): σ = 0.1 keeps the expert at ~100%
success; σ = 0.5 with ε = 0.5 drops push / pick-place / peg-insert-side / door-open to 20-70% while the easy
tasks (reach, drawer, window, button) stay near 100%: a dataset whose mean success is clearly lower, not zero.

Episodes last `max_episode_steps` (500, Meta-World's horizon), truncated, never terminated: success does not
end an episode, as in Meta-World's own MT benchmarks. Success is Meta-World's: `info["success"]` at any step.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import gymnasium as gym
import numpy as np

from offbench.envs.multitask import Lane, task_names
from offbench.errors import OffbenchError
from offbench.generators import register_generator
from offbench.generators.multitask import Collection, Recipe, check_recipe_params, collect, lane_behaviour, recipe_from_params

NOISE = {  # the qualities besides mixed, in behaviour-column order
    "near-optimal": {"gaussian_std": 0.1, "epsilon": 0.0},
    "noisy-expert": {"gaussian_std": 0.5, "epsilon": 0.5},
}
CHUNK_EPISODES = 10  # 5,000 steps per job: fine-grained enough to keep 16 cores busy on MT10


class NoisyScriptedExpert:
    """Meta-World's scripted expert for each lane's task, with the lane's noise profile (a batch `Policy`)."""

    def __init__(self, lanes: Sequence[Lane], envs: Sequence[gym.Env], recipe: Recipe):
        from offbench.envs.metaworld import scripted_policy

        names = task_names(recipe.env)
        experts = {name: scripted_policy(name) for name in {names[lane.task_id] for lane in lanes}}
        self.experts = [experts[names[lane.task_id]] for lane in lanes]
        self.noise = []
        self.rngs = []
        for lane in lanes:
            profile, rng = lane_behaviour(lane, recipe.quality, recipe.profiles)
            self.noise.append(recipe.behaviour[recipe.profiles[profile]])
            self.rngs.append(rng)

    def reset(self, num_envs: int) -> None:
        pass

    def act(self, observations: np.ndarray) -> np.ndarray:
        actions = np.empty((len(observations), 4), dtype=np.float32)
        for i, (obs, expert, noise, rng) in enumerate(zip(observations, self.experts, self.noise, self.rngs)):
            if rng.random() < noise["epsilon"]:
                action = rng.uniform(-1.0, 1.0, 4)
            else:
                action = expert.get_action(obs) + rng.normal(0.0, noise["gaussian_std"], 4)
            actions[i] = np.clip(action, -1.0, 1.0)
        return actions

    def observe(self, rewards: np.ndarray, dones: np.ndarray) -> None:
        pass


def metaworld_recipe(params: dict[str, Any], seed: int) -> Recipe:
    """The recipe a card's params describe: suite, tasks (default: all), quality, episodes per task, horizon."""
    from offbench.envs.metaworld import MAX_PATH_LENGTH

    check_recipe_params("metaworld", params, ("max_episode_steps",))
    env = metaworld_env(str(params.get("suite", "MT10")), params.get("tasks"), seed, int(params.get("max_episode_steps", MAX_PATH_LENGTH)))
    return recipe_from_params("metaworld", params, seed, env, NOISE, reset_columns=("goal_id",))


def metaworld_env(suite: str, tasks: Sequence[str] | None, seed: int, max_episode_steps: int) -> dict[str, Any]:
    """A Meta-World card's [env] table: the suite's tasks (or some of them), the goals of `metaworld.<suite>(seed)`."""
    from offbench.envs.metaworld import suite_tasks

    chosen = list(tasks or suite_tasks(suite))
    outside = sorted(set(chosen) - set(suite_tasks(suite)))
    if outside:
        raise OffbenchError(f"task(s) {', '.join(outside)} are not in Meta-World {suite}")
    return {"suite": "metaworld", "id": suite, "kwargs": {"seed": int(seed), "tasks": chosen, "max_episode_steps": int(max_episode_steps)}}


@register_generator("metaworld")
def generate_metaworld(params: dict[str, Any], seed: int, out: Path, quiet: bool = False) -> Path:
    """Collect a Meta-World multi-task dataset (the goal draws of `metaworld.<suite>(seed)`) into `out`."""
    from offbench.envs.metaworld import OBSERVATION_DIM, preload_goals, task_goals

    recipe = metaworld_recipe(params, seed)
    suite, tasks = recipe.env["id"], recipe.env["kwargs"]["tasks"]
    goals = {(suite, recipe.seed, name): task_goals(suite, recipe.seed, name) for name in tasks}  # built once, here
    collection = Collection(
        recipe=recipe,
        behaviour=NoisyScriptedExpert,
        observation_space=gym.spaces.Box(-np.inf, np.inf, (OBSERVATION_DIM,), np.float32),
        action_space=gym.spaces.Box(-1.0, 1.0, (4,), np.float32),
        chunk_episodes=CHUNK_EPISODES,
        workers=int(params.get("workers", 0)),
        worker_init=preload_goals,
        worker_init_args=(goals,),
    )
    return collect(collection, out, quiet=quiet)
