"""Source algorithms whose learning histories in-context RL distils, each run on N tasks at once.

Every algorithm keeps one independent learner per row of a batched environment (one row = one learning
history) and is written with whole-array operations, so a step of all histories costs a few NumPy calls.

    act(states, episodes) -> actions            states: tabular state per row; episodes: episode index per row
    update(states, actions, rewards, next_states, terminated)

Hyper-parameters are the `Config` dataclass of each class; recipes may override them by name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Protocol

import numpy as np


class SourceAlgorithm(Protocol):
    def act(self, states: np.ndarray, episodes: np.ndarray) -> np.ndarray: ...

    def update(self, states: np.ndarray, actions: np.ndarray, rewards: np.ndarray, next_states: np.ndarray, terminated: np.ndarray) -> None: ...


def linear_schedule(start: float, end: float, num_episodes: int) -> np.ndarray:
    """Value per episode index, from `start` at the first episode to `end` at the last."""
    return np.linspace(start, end, num_episodes) if num_episodes > 1 else np.array([start], dtype=np.float64)


def epsilon_greedy(rng: np.random.Generator, greedy: np.ndarray, epsilon: np.ndarray, num_actions: int) -> np.ndarray:
    """A uniform random action with probability epsilon, else the greedy one. One draw u ~ U(0, 1) per row
    serves both choices: explore iff u < epsilon, and then u / epsilon is again U(0, 1) and picks the action."""
    u = rng.random(len(greedy))
    explore = u < epsilon
    random_action = np.minimum((u / np.where(explore, epsilon, 1.0) * num_actions).astype(np.int64), num_actions - 1)
    return np.where(explore, random_action, greedy)


class QLearning:
    """Tabular Q-learning (Watkins 1989), epsilon-greedy with epsilon annealed linearly across the history.

    Bootstraps through truncation (time limits) and not through termination. The table starts at tiny
    random values (below 1e-6, far under any reward) so that greedy ties between untried actions break
    at random instead of always favouring action 0.
    """

    @dataclass(frozen=True)
    class Config:
        learning_rate: float = 0.3
        gamma: float = 0.9
        epsilon_start: float = 1.0
        epsilon_end: float = 0.02

    def __init__(self, env, num_episodes: int, rng: np.random.Generator, config: QLearning.Config):
        self.config, self.rng = config, rng
        self.num_actions = env.num_actions
        # one (state, action) table per row, flattened to (rows * states, actions) for cheap row lookups
        self.q = rng.uniform(0.0, 1e-6, (env.num_envs * env.num_states, env.num_actions))
        self.row_offset = np.arange(env.num_envs) * env.num_states
        self.rows = np.arange(env.num_envs)
        self.epsilons = linear_schedule(config.epsilon_start, config.epsilon_end, num_episodes)

    def act(self, states, episodes):
        greedy = self.q.take(self.row_offset + states, axis=0).argmax(axis=1)
        return epsilon_greedy(self.rng, greedy, self.epsilons[episodes], self.num_actions)

    def update(self, states, actions, rewards, next_states, terminated):
        c = self.config
        q_next = self.q.take(self.row_offset + next_states, axis=0)
        best_next = q_next[self.rows, q_next.argmax(axis=1)]  # max via argmax: faster on a short last axis
        target = rewards + c.gamma * np.where(terminated, 0.0, best_next)
        flat = self.q.reshape(-1)
        index = (self.row_offset + states) * self.num_actions + actions
        flat[index] += c.learning_rate * (target - flat[index])


class ADEpsilon:
    """The noise curriculum of AD-epsilon (Zisman et al. 2023, "Emergence of In-Context Reinforcement
    Learning from Noise Distillation"): the optimal policy with epsilon-greedy noise, epsilon annealed
    from 1 to 0 across the history. Nothing is learned; the improvement is the schedule."""

    @dataclass(frozen=True)
    class Config:
        epsilon_start: float = 1.0
        epsilon_end: float = 0.0

    def __init__(self, env, num_episodes: int, rng: np.random.Generator, config: ADEpsilon.Config):
        self.env, self.rng = env, rng
        self.epsilons = linear_schedule(config.epsilon_start, config.epsilon_end, num_episodes)

    def act(self, states, episodes):
        return epsilon_greedy(self.rng, self.env.optimal_actions(states), self.epsilons[episodes], self.env.num_actions)

    def update(self, states, actions, rewards, next_states, terminated):
        """The curriculum follows a fixed schedule and ignores what happens."""


class UCB1:
    """UCB1 (Auer et al. 2002): pull every arm once, then the arm maximising mean + sqrt(c ln t / n),
    with c = 2 as in the paper. Ties go to the lowest arm index."""

    @dataclass(frozen=True)
    class Config:
        exploration: float = 2.0

    def __init__(self, env, num_episodes: int, rng: np.random.Generator, config: UCB1.Config):
        self.config = config
        self.counts = np.zeros((env.num_envs, env.num_actions))
        self.sums = np.zeros((env.num_envs, env.num_actions))
        self.rows = np.arange(env.num_envs)

    def act(self, states, episodes):
        pulls = np.maximum(self.counts, 1)
        total = np.maximum(self.counts.sum(axis=1, keepdims=True), 1)
        index = self.sums / pulls + np.sqrt(self.config.exploration * np.log(total) / pulls)
        return np.argmax(np.where(self.counts == 0, np.inf, index), axis=1)

    def update(self, states, actions, rewards, next_states, terminated):
        self.counts[self.rows, actions] += 1
        self.sums[self.rows, actions] += rewards


class ThompsonSampling:
    """Thompson sampling: Beta(1, 1) priors for Bernoulli arms; for Gaussian arms with known noise sigma,
    a Normal(prior_mean, prior_std^2) prior and its conjugate Normal posterior."""

    @dataclass(frozen=True)
    class Config:
        prior_mean: float = 0.5
        prior_std: float = 1.0

    def __init__(self, env, num_episodes: int, rng: np.random.Generator, config: ThompsonSampling.Config):
        self.config, self.rng = config, rng
        self.bernoulli, self.sigma = env.noise == "bernoulli", env.sigma
        self.counts = np.zeros((env.num_envs, env.num_actions))
        self.sums = np.zeros((env.num_envs, env.num_actions))
        self.rows = np.arange(env.num_envs)

    def act(self, states, episodes):
        if self.bernoulli:
            samples = self.rng.beta(1.0 + self.sums, 1.0 + self.counts - self.sums)
        else:
            prior_precision = 1.0 / self.config.prior_std**2
            precision = prior_precision + self.counts / self.sigma**2
            mean = (self.config.prior_mean * prior_precision + self.sums / self.sigma**2) / precision
            samples = mean + self.rng.standard_normal(mean.shape) / np.sqrt(precision)
        return np.argmax(samples, axis=1)

    def update(self, states, actions, rewards, next_states, terminated):
        self.counts[self.rows, actions] += 1
        self.sums[self.rows, actions] += rewards


ALGORITHMS: dict[str, Callable[..., SourceAlgorithm]] = {
    "q-learning": QLearning,
    "ad-epsilon": ADEpsilon,
    "ucb": UCB1,
    "thompson": ThompsonSampling,
}


def make_config(algo: str, overrides: dict[str, Any]):
    """The algorithm's Config with overrides by name; ValueError naming an unknown one."""
    cls = ALGORITHMS[algo].Config
    known = set(cls.__dataclass_fields__)
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise ValueError(f"unknown hyper-parameter(s) {', '.join(unknown)} for {algo} (known: {', '.join(sorted(known))})")
    return cls(**{k: float(v) for k, v in overrides.items()})
