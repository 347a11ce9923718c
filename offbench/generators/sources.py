"""Source algorithms whose learning histories in-context RL distils, each run on N tasks at once.

Every algorithm keeps one independent learner per row of a batched environment (one row = one learning
history) and is written with whole-array operations, so a step of all histories costs a few NumPy calls.

    act(states, steps) -> actions               states: tabular state per row; steps: nominal step of each
                                                row in its history, episode * horizon + step in the episode
    update(states, actions, rewards, next_states, terminated)

The nominal step counts an episode that ended early (termination) as if it had run to the horizon, so
episode e always starts at step e * horizon (AD-epsilon's schedule in corl-team/ad-eps does the same).

Hyper-parameters are the `Config` dataclass of each class; recipes may override them by name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Protocol

import numpy as np


class SourceAlgorithm(Protocol):
    def act(self, states: np.ndarray, steps: np.ndarray) -> np.ndarray: ...

    def update(self, states: np.ndarray, actions: np.ndarray, rewards: np.ndarray, next_states: np.ndarray, terminated: np.ndarray) -> None: ...


def linear_schedule(start: float, end: float, num_episodes: int) -> np.ndarray:
    """Value per episode index, from `start` at the first episode to `end` at the last."""
    return np.linspace(start, end, num_episodes) if num_episodes > 1 else np.array([start], dtype=np.float64)


def per_step_schedule(start: float, end: float, num_steps: int, decay_fraction: float) -> np.ndarray:
    """Value per nominal step: linear from `start` at step 0 to `end` at step decay_fraction * num_steps,
    then `end`. AD-epsilon (corl-team/ad-eps, generate_trajectories.py) lowers epsilon by
    (1 - floor) / (0.9 * steps) after every step, from 1 down to its floor."""
    return np.interp(np.arange(num_steps), [0.0, decay_fraction * num_steps], [start, end])


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
        self.horizon = env.horizon

    def act(self, states, steps):
        greedy = self.q.take(self.row_offset + states, axis=0).argmax(axis=1)
        return epsilon_greedy(self.rng, greedy, self.epsilons[steps // self.horizon], self.num_actions)

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
    Learning from Noise Distillation"): the optimal policy with epsilon-greedy noise. Nothing is learned;
    the improvement is the schedule.

    Published schedule (the default, checked against corl-team/ad-eps `generate_trajectories.py`):
    epsilon falls linearly after every step, from 1 to its floor, which it reaches at 90% of the
    history's nominal steps (episodes x horizon). `per_episode_schedule = true` restores offbench's
    earlier schedule: one epsilon per episode, linear from start at the first to end at the last episode."""

    @dataclass(frozen=True)
    class Config:
        epsilon_start: float = 1.0
        epsilon_end: float = 0.0
        decay_fraction: float = 0.9
        per_episode_schedule: bool = False

        def __post_init__(self):
            if not 0.0 < self.decay_fraction <= 1.0:
                raise ValueError(f"decay_fraction must lie in (0, 1] (got {self.decay_fraction})")

    def __init__(self, env, num_episodes: int, rng: np.random.Generator, config: ADEpsilon.Config):
        self.env, self.rng = env, rng
        if config.per_episode_schedule:
            per_episode = linear_schedule(config.epsilon_start, config.epsilon_end, num_episodes)
            self.epsilons = np.repeat(per_episode, env.horizon)
        else:
            self.epsilons = per_step_schedule(config.epsilon_start, config.epsilon_end, num_episodes * env.horizon, config.decay_fraction)

    def act(self, states, steps):
        return epsilon_greedy(self.rng, self.env.optimal_actions(states), self.epsilons[steps], self.env.num_actions)

    def update(self, states, actions, rewards, next_states, terminated):
        """The curriculum follows a fixed schedule and ignores what happens."""


class ArmStatistics:
    """Pull counts and reward sums per arm of every row: all that the bandit learners below update."""

    def __init__(self, env):
        self.counts = np.zeros((env.num_envs, env.num_actions))
        self.sums = np.zeros((env.num_envs, env.num_actions))
        self.rows = np.arange(env.num_envs)

    def update(self, states, actions, rewards, next_states, terminated):
        self.counts[self.rows, actions] += 1
        self.sums[self.rows, actions] += rewards


class UCB1(ArmStatistics):
    """UCB1 (Auer et al. 2002): pull every arm once, then the arm maximising mean + sqrt(c ln t / n),
    with c = 2 as in the paper. Ties go to the lowest arm index."""

    @dataclass(frozen=True)
    class Config:
        exploration: float = 2.0

    def __init__(self, env, num_episodes: int, rng: np.random.Generator, config: UCB1.Config):
        super().__init__(env)
        self.config = config

    def act(self, states, steps):
        pulls = np.maximum(self.counts, 1)
        total = np.maximum(self.counts.sum(axis=1, keepdims=True), 1)
        index = self.sums / pulls + np.sqrt(self.config.exploration * np.log(total) / pulls)
        return np.argmax(np.where(self.counts == 0, np.inf, index), axis=1)


class ThompsonSampling(ArmStatistics):
    """Thompson sampling: Beta(1, 1) priors for Bernoulli arms; for Gaussian arms with known noise sigma,
    a Normal(prior_mean, prior_std^2) prior and its conjugate Normal posterior."""

    @dataclass(frozen=True)
    class Config:
        prior_mean: float = 0.5
        prior_std: float = 1.0

    def __init__(self, env, num_episodes: int, rng: np.random.Generator, config: ThompsonSampling.Config):
        super().__init__(env)
        self.config, self.rng = config, rng
        self.bernoulli, self.sigma = env.noise == "bernoulli", env.sigma

    def act(self, states, steps):
        if self.bernoulli:
            samples = self.rng.beta(1.0 + self.sums, 1.0 + self.counts - self.sums)
        else:
            prior_precision = 1.0 / self.config.prior_std**2
            precision = prior_precision + self.counts / self.sigma**2
            mean = (self.config.prior_mean * prior_precision + self.sums / self.sigma**2) / precision
            samples = mean + self.rng.standard_normal(mean.shape) / np.sqrt(precision)
        return np.argmax(samples, axis=1)


ALGORITHMS: dict[str, Callable[..., SourceAlgorithm]] = {
    "q-learning": QLearning,
    "ad-epsilon": ADEpsilon,
    "ucb": UCB1,
    "thompson": ThompsonSampling,
}


def make_config(algo: str, overrides: dict[str, Any]):
    """The algorithm's Config with overrides by name; ValueError naming an unknown one or a value of the
    wrong kind (a switch takes true or false, a number any int or float)."""
    cls = ALGORITHMS[algo].Config
    defaults = {name: f.default for name, f in cls.__dataclass_fields__.items()}
    unknown = sorted(set(overrides) - set(defaults))
    if unknown:
        raise ValueError(f"unknown hyper-parameter(s) {', '.join(unknown)} for {algo} (known: {', '.join(sorted(defaults))})")
    values = {}
    for name, value in overrides.items():
        switch = isinstance(defaults[name], bool)
        if switch != isinstance(value, bool) or not isinstance(value, (bool, int, float)):
            raise ValueError(f"hyper-parameter {name} of {algo} takes {'true or false' if switch else 'a number'} (got {value!r})")
        values[name] = value if switch else float(value)
    return cls(**values)
