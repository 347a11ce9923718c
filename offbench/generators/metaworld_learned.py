"""Meta-World MT10 / MT50 offline data from learning agents: one SAC agent per task, kept at checkpoints.

The published sub-optimal Meta-World sets (MTDiff's, which HarmoDT and DaCe-DT use) are SAC agents' experience
during training: coherent trajectories of worse policies. Generator "metaworld"'s noisy-expert data (its quality
formerly named sub-optimal) is the scripted expert with per-step noise instead, which no policy acts like; this
generator's medium and replay data is a learning agent's. What medium, replay and expert hold, the band, the run
cache and the resume are `learned_tasks`'; this module is its SAC agent and its Meta-World suites. The scripted
expert's near-optimal cards stay the expert level.

Per task, stable-baselines3's SAC (`SAC_SETTINGS`: the 256 x 256 networks, learning rate, batch, tau and
one gradient step per environment step of rl-baselines3-zoo's MuJoCo settings, as mujoco-local uses; the first
`learning_starts` steps act uniformly at random) learns the task's Meta-World environment (each episode's goal
drawn by its reset seed from `metaworld.<suite>(seed)`'s goals, 500 steps, truncated, never terminated: success
does not end an episode). Its policy is a squashed Gaussian: an episode's actions are tanh(mean + std * noise),
the noise drawn from a stream seeded by the episode's reset seed. A checkpoint keeps only the actor's weights.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from offbench.envs.multitask import Lane
from offbench.errors import require
from offbench.generators import register_generator
from offbench.generators.learned_tasks import LearnedParams, LearnedRecipe, SampledLanes, generate_learned
from offbench.records import from_dict, ranged

SAC_SETTINGS: dict[str, Any] = {
    "learning_rate": 3e-4,
    "buffer_size": 1_000_000,
    "batch_size": 256,
    "tau": 0.005,
    "gamma": 0.99,
    "train_freq": 1,
    "gradient_steps": 1,
    "policy_kwargs": {"net_arch": [256, 256]},
}


@dataclass(frozen=True)
class MetaWorldLearnedParams(LearnedParams):
    """A card's `[source.recipe.params]` for generator "metaworld-learned"."""

    suite: str = ranged("MT10", choices=("MT10", "MT50"), doc="Meta-World's task list: MT10 or MT50.")
    timesteps: int = ranged(
        300_000,
        ge=1,
        le=SAC_SETTINGS["buffer_size"],
        doc="The most SAC steps per task (all of them for expert); the buffer holds them all.",
    )
    checkpoint_every: int = ranged(10_000, ge=1, doc="SAC steps between checkpoints.")
    eval_episodes: int = ranged(10, ge=1, doc="Episodes that measure a checkpoint's success rate.")
    learning_starts: int = ranged(10_000, ge=0, doc="Uniformly random actions before SAC learns (rl-baselines3-zoo's setting).")
    max_episode_steps: int = ranged(500, ge=1, doc="Steps per episode (Meta-World's horizon: 500).")


class SquashedGaussianPolicy(SampledLanes):
    """A SAC actor's sampled actions: tanh(mean + std * noise), each episode's noise from its own stream."""

    def __init__(self, actor, lanes: Sequence[Lane]):
        super().__init__(lanes)
        self.actor = actor

    def act(self, observations: np.ndarray) -> np.ndarray:
        import torch

        with torch.no_grad():
            # a contiguous copy: a strided view of the same rows may take another kernel, other float bits
            mean, log_std, _ = self.actor.get_action_dist_params(torch.tensor(observations, dtype=torch.float32))
        noise = np.stack([rng.standard_normal(mean.shape[1]) for rng in self.rngs])
        return np.tanh(mean.numpy().astype(np.float64) + np.exp(log_std.numpy().astype(np.float64)) * noise).astype(np.float32)


class SACLearner:
    """stable-baselines3's SAC with `SAC_SETTINGS` and the recipe's `learning_starts` on one environment; the actor acts."""

    algorithm = "SAC"
    n_envs = 1
    action_dtype = np.float32

    def __init__(self, learning_starts: int):
        self.learning_starts = learning_starts
        self.settings = {**SAC_SETTINGS, "learning_starts": learning_starts}

    def model(self, vec_env, seed: int):
        from stable_baselines3 import SAC

        return SAC("MlpPolicy", vec_env, seed=seed, device="cpu", verbose=0, **copy.deepcopy(self.settings))

    def acting_weights(self, model) -> dict[str, Any]:
        return copy.deepcopy(model.actor.state_dict())

    def load_acting_weights(self, model, weights: dict[str, Any]) -> None:
        model.actor.load_state_dict(weights)

    def sampled_policy(self, model, lanes: Sequence[Lane]) -> SquashedGaussianPolicy:
        return SquashedGaussianPolicy(model.actor, lanes)


def learned_recipe(params: dict[str, Any], seed: int) -> LearnedRecipe:
    """The recipe a card's params describe; the [env] table is generator "metaworld"'s for the same suite and tasks."""
    from offbench.generators.metaworld import metaworld_env

    checked = from_dict(MetaWorldLearnedParams, params, "metaworld-learned recipe params")
    env = metaworld_env(checked.suite, checked.tasks, seed, checked.max_episode_steps)
    return LearnedRecipe("metaworld-learned", SACLearner(checked.learning_starts), checked, int(seed), env)


@register_generator("metaworld-learned")
def generate_metaworld_learned(params: dict[str, Any], seed: int, out: Path, quiet: bool = False) -> Path:
    """Train a SAC agent per task (resuming at the first task without a shard) and write its data into `out`."""
    require("stable_baselines3", "learned")
    require("metaworld", "metaworld")
    return generate_learned(learned_recipe(params, seed), out, quiet)
