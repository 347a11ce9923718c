"""MiniGrid MT3 / MT5 / MT7 offline data from learning agents: one PPO agent per task, kept at checkpoints.

The noisy planner of generator "minigrid" (a random action with probability 0.75 at each step) is not the behaviour
of any policy; this generator's is. What medium, replay and expert hold, the band, the run cache and the resume are
`learned_tasks`'; this module is its PPO agent and its MiniGrid suites.

Per task, stable-baselines3's PPO (`PPO_SETTINGS`, the same for every task, on one CPU thread) learns the task's
environment from `offbench.envs.minigrid` (the egocentric view + direction, as generator "minigrid" collects it).
Its policy is categorical: an episode's actions are drawn by inverse CDF from a stream seeded by its reset seed.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Sequence

import numpy as np

from offbench.envs.minigrid import SUITES
from offbench.envs.multitask import Lane
from offbench.errors import require
from offbench.generators import register_generator
from offbench.generators.learned_tasks import LearnedParams, LearnedRecipe, SampledLanes, generate_learned
from offbench.records import from_dict, ranged

N_ENVS = 8  # PPO's parallel training environments
PPO_SETTINGS: dict[str, Any] = {
    "n_steps": 128,
    "batch_size": 256,
    "n_epochs": 4,
    "learning_rate": 5e-4,
    "gamma": 0.99,
    "gae_lambda": 0.95,
    "clip_range": 0.2,
    "ent_coef": 0.01,
    "policy_kwargs": {"net_arch": [64, 64]},
}
ROLLOUT_STEPS = N_ENVS * PPO_SETTINGS["n_steps"]  # PPO learns in rollouts of this many steps


@dataclass(frozen=True)
class MiniGridLearnedParams(LearnedParams):
    """A card's `[source.recipe.params]` for generator "minigrid-learned"."""

    rollout_steps: ClassVar[int] = ROLLOUT_STEPS

    suite: str = ranged("MT7", choices=tuple(SUITES), doc="MOORE's task list: MT3, MT5 or MT7.")
    timesteps: int = ranged(1 << 21, ge=ROLLOUT_STEPS, doc="The most PPO steps per task (all of them for expert).")
    checkpoint_every: int = ranged(16384, ge=ROLLOUT_STEPS, doc=f"PPO steps between checkpoints, a multiple of {ROLLOUT_STEPS}.")


class SampledPolicy(SampledLanes):
    """A PPO policy's sampled actions: each episode's drawn by inverse CDF from its own stream."""

    def __init__(self, network, lanes: Sequence[Lane]):
        super().__init__(lanes)
        self.network = network

    def act(self, observations: np.ndarray) -> np.ndarray:
        import torch

        with torch.no_grad():
            probs = self.network.get_distribution(torch.as_tensor(observations, dtype=torch.float32)).distribution.probs
        cumulative = np.cumsum(probs.numpy().astype(np.float64), axis=1)
        draws = np.array([rng.random() for rng in self.rngs]) * cumulative[:, -1]
        return (draws[:, None] >= cumulative).sum(axis=1).astype(np.int64)


class PPOLearner:
    """stable-baselines3's PPO with `PPO_SETTINGS` on `N_ENVS` environments; the whole policy acts."""

    algorithm = "PPO"
    n_envs = N_ENVS
    learning_starts = 0  # PPO updates after every rollout, and checkpoints fall on rollouts' ends
    action_dtype = np.int64
    settings = PPO_SETTINGS

    def model(self, vec_env, seed: int):
        from stable_baselines3 import PPO

        return PPO("MlpPolicy", vec_env, seed=seed, device="cpu", verbose=0, **copy.deepcopy(PPO_SETTINGS))

    def acting_weights(self, model) -> dict[str, Any]:
        return copy.deepcopy(model.policy.state_dict())

    def load_acting_weights(self, model, weights: dict[str, Any]) -> None:
        model.policy.load_state_dict(weights)

    def sampled_policy(self, model, lanes: Sequence[Lane]) -> SampledPolicy:
        return SampledPolicy(model.policy, lanes)


def learned_recipe(params: dict[str, Any], seed: int) -> LearnedRecipe:
    """The recipe a card's params describe; the [env] table is generator "minigrid"'s for the same suite and tasks."""
    from offbench.generators.minigrid import minigrid_recipe

    checked = from_dict(MiniGridLearnedParams, params, "minigrid-learned recipe params")
    suite = {"suite": checked.suite, **({"tasks": checked.tasks} if checked.tasks else {})}
    return LearnedRecipe("minigrid-learned", PPOLearner(), checked, int(seed), minigrid_recipe(suite, seed).env)


@register_generator("minigrid-learned")
def generate_minigrid_learned(params: dict[str, Any], seed: int, out: Path, quiet: bool = False) -> Path:
    """Train a PPO agent per task (resuming at the first task without a shard) and write its data into `out`."""
    require("stable_baselines3", "learned")
    return generate_learned(learned_recipe(params, seed), out, quiet)
