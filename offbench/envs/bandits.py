"""Multi-armed bandits as one-step episodes: every pull is an episode, a learning history is a run of pulls.

A pull ends the episode by termination (there is no next state to bootstrap from). The observation is a
constant zero vector of length 1, so bandit data has the same layout as the grid worlds.

- Bernoulli bandit (Laskin et al. 2022, section 5: 10 arms, 100 steps). The paper's adversarial split:
  "reward is more likely distributed under odd arms 95% of the time during training; at evaluation the
  opposite". Our reading, made concrete: each training task favours odd arms with probability 0.95
  (even arms otherwise), each held-out task favours even arms with probability 0.95; favoured arms draw
  p ~ U(0.5, 1), the others p ~ U(0, 0.5). The uniform split draws every p ~ U(0, 1).
- Gaussian bandit (Lee et al. 2023, DPT: 5 arms, means ~ U(0, 1), reward noise sigma 0.3, horizon 500).
The task is the vector of arm means.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np

NOISES = ("bernoulli", "gaussian")
VARIANTS = {"bernoulli": ("adversarial", "uniform"), "gaussian": ("uniform",)}
ADVERSARIAL_FAVOUR_PROBABILITY = 0.95


def _check_means(means, noise: str) -> np.ndarray:
    means = np.asarray(means, dtype=np.float64)
    if means.ndim != 1 or len(means) < 2:
        raise ValueError(f"a bandit task needs a list of at least two arm means, got {means.tolist()!r}")
    if noise not in NOISES:
        raise ValueError(f"unknown bandit noise {noise!r} (known: {', '.join(NOISES)})")
    if noise == "bernoulli" and ((means < 0) | (means > 1)).any():
        raise ValueError("Bernoulli arm means must lie in [0, 1]")
    return means


def _adversarial_means(n: int, num_arms: int, favour_odd: bool, rng: np.random.Generator) -> np.ndarray:
    usual, other = (1, 0) if favour_odd else (0, 1)
    favoured_parity = np.where(rng.random(n) < ADVERSARIAL_FAVOUR_PROBABILITY, usual, other)
    favoured = (np.arange(num_arms)[None, :] % 2) == favoured_parity[:, None]
    return np.where(favoured, rng.uniform(0.5, 1.0, (n, num_arms)), rng.uniform(0.0, 0.5, (n, num_arms)))


def sample_split(
    num_tasks: int,
    num_held_out: int,
    rng: np.random.Generator,
    num_arms: int | Sequence[int] = 10,
    variant: str = "uniform",
    held_out_arms: int | None = None,
    **_: Any,
):
    """Held-out tasks are drawn first, then training tasks, so the held-out set does not depend on how
    many training tasks are asked for. `num_arms` may list several arm counts: the training tasks are then cut
    into that many consecutive runs, one per count in the order given (np.array_split's sizes), drawn in that
    order; held-out tasks have `held_out_arms` arms (by default the one count, or the largest listed)."""
    counts = [num_arms] if isinstance(num_arms, int) else list(num_arms)
    held_out_arms = max(counts) if held_out_arms is None else held_out_arms

    def draw(n: int, arms: int, training: bool) -> np.ndarray:
        if variant == "adversarial":
            return _adversarial_means(n, arms, favour_odd=training, rng=rng)
        return rng.uniform(0.0, 1.0, (n, arms))

    held_out = draw(num_held_out, held_out_arms, training=False)
    runs = np.array_split(np.arange(num_tasks - num_held_out), len(counts))
    as_tasks = lambda means: [{"means": row.tolist()} for row in means]  # noqa: E731
    return [task for run, arms in zip(runs, counts) for task in as_tasks(draw(len(run), arms, training=True))], as_tasks(held_out)


def task_space_size(**_: Any) -> None:
    """Arm means are continuous: any number of tasks."""
    return None


class BanditEnv(gym.Env):
    """One bandit task (Gymnasium API); each step is one pull and ends the episode."""

    def __init__(self, means, noise: str = "bernoulli", sigma: float = 0.3):
        self.means = _check_means(means, noise)
        self.noise, self.sigma = noise, float(sigma)
        self.observation_space = gym.spaces.Box(0.0, 1.0, shape=(1,), dtype=np.float32)
        self.action_space = gym.spaces.Discrete(len(self.means))
        self.horizon = 1  # one pull per episode
        self.optimal_return = float(self.means.max())

    def optimal_action(self, observation=None) -> int:
        return int(np.argmax(self.means))

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        return np.zeros(1, dtype=np.float32), {}

    def step(self, action):
        mean = self.means[int(action)]
        if self.noise == "bernoulli":
            reward = float(self.np_random.random() < mean)
        else:
            reward = float(mean + self.sigma * self.np_random.standard_normal())
        return np.zeros(1, dtype=np.float32), reward, True, False, {}


class BanditBatch:
    """N bandit tasks pulled together; one random draw per row per step from one seeded generator."""

    score_name = "mean reward of the pulled arm"  # what expected_rewards sums to per episode (the learning check's score)

    def __init__(
        self,
        means: np.ndarray,
        noise: str = "bernoulli",
        sigma: float = 0.3,
        seed: int | np.random.SeedSequence | np.random.Generator | None = None,
    ):
        self.means = np.asarray(means, dtype=np.float64)
        for row in self.means:
            _check_means(row, noise)
        self.noise, self.sigma = noise, float(sigma)
        self.np_random = np.random.default_rng(seed)
        self.num_envs, self.num_actions = self.means.shape
        self.num_states = 1
        self.start_state = 0
        self.horizon = 1
        self.single_observation_space = gym.spaces.Box(0.0, 1.0, shape=(1,), dtype=np.float32)
        self.single_action_space = gym.spaces.Discrete(self.num_actions)
        self.optimal_returns = self.means.max(axis=1)
        self._best = self.means.argmax(axis=1)
        self._rows = np.arange(self.num_envs)
        self._zeros = np.zeros((self.num_envs, 1), dtype=np.float32)

    @classmethod
    def from_tasks(
        cls, tasks: list[dict], seed: int | np.random.SeedSequence | np.random.Generator | None = None, **kwargs: Any
    ) -> BanditBatch:
        return cls(np.array([t["means"] for t in tasks]), seed=seed, **kwargs)

    def reset(self, mask: np.ndarray | None = None) -> np.ndarray:
        return self._zeros.copy()

    def step(self, actions: np.ndarray):
        mean = self.means[self._rows, actions]
        if self.noise == "bernoulli":
            rewards = (self.np_random.random(self.num_envs) < mean).astype(np.float32)
        else:
            rewards = (mean + self.sigma * self.np_random.standard_normal(self.num_envs)).astype(np.float32)
        done = np.ones(self.num_envs, dtype=bool)
        return self._zeros.copy(), rewards, done, ~done

    def state_index(self) -> np.ndarray:
        return np.zeros(self.num_envs, dtype=np.int64)

    def tables(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(next state, expected reward, terminated), each (rows, 1, arms): one state, every pull terminates;
        the reward itself is drawn by noisy_rewards (the generators' loop)."""
        shape = (self.num_envs, 1, self.num_actions)
        return np.zeros(shape, np.int64), self.means.reshape(shape), np.ones(shape, bool)

    def reward_noise(self, rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
        """What one pull's reward is drawn from: U(0, 1) for Bernoulli arms, N(0, 1) for Gaussian ones."""
        return rng.random(shape) if self.noise == "bernoulli" else rng.standard_normal(shape)

    def noisy_rewards(self, means: np.ndarray, noise: np.ndarray) -> np.ndarray:
        """Rewards of pulls with the given arm means from reward_noise draws."""
        return (noise < means).astype(np.float32) if self.noise == "bernoulli" else (means + self.sigma * noise).astype(np.float32)

    def compact_observations(self) -> np.ndarray:
        """The observation table (one state: the constant zero observation)."""
        return np.zeros((1, 1), dtype=np.float32)

    def optimal_actions(self, states: np.ndarray | None = None, rows: np.ndarray | None = None) -> np.ndarray:
        return self._best if rows is None else self._best[rows]

    def optimal_action_table(self) -> np.ndarray:
        """Optimal arm of every row (the single state)."""
        return self._best

    def observations_of(self, states: np.ndarray) -> np.ndarray:
        return np.zeros((len(states), 1), dtype=np.float32)

    def expected_rewards(self, rows: np.ndarray, actions: np.ndarray, rewards: np.ndarray) -> np.ndarray:
        """The mean of the pulled arm: what the learning check compares, free of reward noise."""
        return self.means[rows, actions]
