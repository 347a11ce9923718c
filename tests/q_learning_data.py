"""Tiny synthetic specs and batches shared by the Q-learning baseline tests (CQL, IQL)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from offbench.baselines.base import DatasetSpec


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def box_spec(obs_dim=3, act_dim=1, low=-1.0, high=1.0) -> DatasetSpec:
    return DatasetSpec(
        observation_space=gym.spaces.Box(-np.inf, np.inf, (obs_dim,), np.float32),
        action_space=gym.spaces.Box(low, high, (act_dim,), np.float32),
        observation_shape=(obs_dim,),
        action_dim=act_dim,
        discrete=False,
        max_episode_length=10,
    )


def discrete_spec(obs_dim=3, n=3) -> DatasetSpec:
    return DatasetSpec(
        observation_space=gym.spaces.Box(-np.inf, np.inf, (obs_dim,), np.float32),
        action_space=gym.spaces.Discrete(n),
        observation_shape=(obs_dim,),
        action_dim=n,
        discrete=True,
        max_episode_length=10,
    )


def bandit_batch(gen: torch.Generator, n=64, obs_dim=3, actions=None) -> dict[str, torch.Tensor]:
    """One-step episodes (terminal after every step) whose reward is the first observation coordinate."""
    obs = torch.randn(n, obs_dim, generator=gen)
    if actions is None:
        actions = torch.rand(n, 1, generator=gen) * 2 - 1
    return {
        "observations": obs,
        "actions": actions,
        "rewards": obs[:, 0].clone(),
        "next_observations": torch.randn(n, obs_dim, generator=gen),
        "terminals": torch.ones(n),
    }


def best_action_batch(gen: torch.Generator, n=64, n_actions=3) -> dict[str, torch.Tensor]:
    """One-step episodes with uniformly random discrete actions; reward 1 for the action equal to the argmax of
    the observation (obs_dim == n_actions), so the best action is known in every state."""
    batch = bandit_batch(gen, n=n, obs_dim=n_actions)
    batch["actions"] = torch.randint(0, n_actions, (n,), generator=gen)
    batch["rewards"] = (batch["actions"] == batch["observations"].argmax(-1)).float()
    return batch


def greedy_accuracy(policy, n_actions=3) -> float:
    obs = np.random.default_rng(1).normal(size=(200, n_actions)).astype(np.float32)
    actions = policy.act(obs)
    assert actions.dtype == np.int64 and actions.shape == (200,)
    return float(np.mean(actions == obs.argmax(-1)))
