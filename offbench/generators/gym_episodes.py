"""One episode of a Gymnasium environment driven by a policy, in the layout `EpisodeStore.from_episodes` takes: the
recorder the generators that step a Gymnasium env one episode at a time share (pendulum-scripted, the local
MuJoCo data)."""

from __future__ import annotations

from typing import Callable

import gymnasium as gym
import numpy as np


def rollout(env: gym.Env, act: Callable[[np.ndarray], np.ndarray], reset_seed: int) -> dict[str, np.ndarray]:
    """The episode from `env.reset(seed=reset_seed)` with actions `act(observation)`, float32, the final observation
    included. A step that both terminates and hits the time limit counts as a termination only (the MDP ended
    there: nothing to bootstrap through)."""
    observation, _ = env.reset(seed=reset_seed)
    observations, actions, rewards, terminations, truncations = [observation], [], [], [], []
    while True:
        action = act(observation)
        observation, reward, terminated, truncated, _ = env.step(action)
        observations.append(observation)
        actions.append(action)
        rewards.append(reward)
        terminations.append(terminated)
        truncations.append(truncated and not terminated)
        if terminated or truncated:
            break
    return {
        "observations": np.asarray(observations, dtype=np.float32),
        "actions": np.asarray(actions, dtype=np.float32),
        "rewards": np.asarray(rewards, dtype=np.float32),
        "terminations": np.asarray(terminations, dtype=bool),
        "truncations": np.asarray(truncations, dtype=bool),
    }
