"""`pendulum-scripted`: a small single-task continuous-control dataset made here, reproducibly.

Gymnasium's Pendulum-v1 (200 steps, truncated by its time limit, never terminated) driven by a
scripted swing-up controller: energy shaping pumps the pendulum up, a PD controller balances it near
the top. Gaussian action noise at several levels (one block of episodes per level) gives the data a
spread of returns, from near-optimal to poor, which is what offline baselines need to be told apart.

The controller uses Pendulum-v1's dynamics (gymnasium/envs/classic_control/pendulum.py, g=10, m=1,
l=1): theta'' = 3g/(2l) sin(theta) + 3/(m l^2) u, so E = theta'^2 / 2 + 15 (cos(theta) - 1) is
conserved without torque, 0 upright at rest, and dE/dt = 3 u theta'. Pumping u ~ -E theta' raises E
towards 0 (the upright orbit).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from offbench.data.store import EpisodeStore
from offbench.generators import register_generator
from offbench.generators.gym_episodes import rollout
from offbench.utils import progress_bar

ENV_ID = "Pendulum-v1"
MAX_TORQUE = 2.0


def scripted_action(observation: np.ndarray) -> np.ndarray:
    """Energy-shaping swing-up far from the top, PD balance near it; observation = (cos, sin, theta')."""
    cos, sin, velocity = observation[..., 0], observation[..., 1], observation[..., 2]
    angle = np.arctan2(sin, cos)  # 0 is upright
    energy = 0.5 * velocity**2 + 15.0 * (cos - 1.0)
    swing_up = -3.0 * energy * velocity
    balance = -10.0 * angle - 2.0 * velocity
    near_top = (cos > np.cos(0.5)) & (np.abs(velocity) < 4.0)
    torque = np.where(near_top, balance, swing_up)
    return np.clip(torque, -MAX_TORQUE, MAX_TORQUE)[..., None].astype(np.float32)


def noisy_scripted_policy(noise_std: float, rng: np.random.Generator):
    def act(observation: np.ndarray) -> np.ndarray:
        action = scripted_action(observation)
        if noise_std > 0:
            action = action + noise_std * rng.standard_normal(action.shape).astype(np.float32)
        return np.clip(action, -MAX_TORQUE, MAX_TORQUE)

    return act


@register_generator("pendulum-scripted")
def generate(params: dict[str, Any], seed: int, out: Path, quiet: bool) -> Path:
    """params: noise_levels (action-noise std per block), episodes_per_level."""

    noise_levels = [float(x) for x in params.get("noise_levels", [0.0, 1.0, 2.0, 4.0])]
    episodes_per_level = int(params.get("episodes_per_level", 25))
    rng = np.random.default_rng(seed)
    env = gym.make(ENV_ID)
    episodes = []
    with progress_bar(quiet, "pendulum-scripted", len(noise_levels) * episodes_per_level) as advance:
        for noise_std in noise_levels:
            act = noisy_scripted_policy(noise_std, rng)
            for _ in range(episodes_per_level):
                episode = rollout(env, act, reset_seed=int(rng.integers(2**31)))
                episode["noise_std"] = np.full(len(episode["actions"]), noise_std, dtype=np.float32)
                episodes.append(episode)
                advance(1)
    env.close()
    store = EpisodeStore.from_episodes(
        episodes,
        observation_space=env.observation_space,
        action_space=env.action_space,
        card={"generator": "pendulum-scripted", "seed": seed, "params": params},
    )
    return store.save(out)
