"""Linear-Gaussian contextual bandits as one-step episodes: every pull shows a context and ends the episode.

A task is K arm vectors theta_a in R^d. Every pull first shows a context x_t in R^d (the observation, float32),
drawn i.i.d. per pull from the environment's seeded generator; arm a then pays theta_a . x_t + N(0, sigma^2).
Both are Gaussian: theta_a ~ N(0, I/d) per task and x_t ~ N(0, I/d) per pull, as Headless-AD draws them, so
E|theta|^2 = E|x|^2 = 1 in any dimension and a mean reward theta_a . x_t has variance 1/d. Gaussian rather than on
the unit sphere: arms then differ in scale as well as direction (some arms matter more often than others) and
the family is Headless-AD's own, so its setting below is a choice of numbers, not another model.

The best arm changes with the context, so a pull's regret is max_a theta_a . x_t - theta_{a_t} . x_t: the batch
gives both terms for the contexts it shows (`expected_rewards`, `optimal_expected_rewards`), which the in-context
protocol sums. A task's `optimal_returns` (what one pull earns at best on average, E_x max_a theta_a . x) has no
closed form beyond two arms and is measured on a fixed sample of contexts (`expected_best_reward`).

Two settings (offbench.envs.benchmarks):
- offbench's (`offbench/ContextualBandit-v0`): d = 5, 5 arms, sigma 0.3, 500 pulls, the Gaussian bandit's
  noise and horizon (DPT) with a context: 25 unknowns, which LinUCB mostly learns within the 500 pulls.
- Headless-AD's (Sinii et al. 2024, `offbench/HeadlessContextualBandit-v0`): d = 2, 20 arms, reward noise
  N(0, 1), 300 pulls (corl-team/headless-ad: envs/contextual_bandits.py for the environment,
  src/contextual_bandit/common/prepare_envs.py `get_arm_embeds` for the arms, configs/contextual_bandit/ad.yaml
  for the numbers). There a history is one episode that never ends and each step's next observation is the next
  context; here each pull is an episode of its own, as for offbench's other bandits, which shows the same
  sequence of contexts, actions and rewards.

The task is the list of arm vectors, `{"thetas": [[...], ...]}` (K lists of d numbers).
"""

from __future__ import annotations

from functools import cached_property
from typing import Any

import gymnasium as gym
import numpy as np

BEST_REWARD_CONTEXTS = 8192  # contexts of the fixed sample that measures E_x max_a theta_a . x
BEST_REWARD_SEED = 0


def _check_thetas(thetas) -> np.ndarray:
    thetas = np.asarray(thetas, dtype=np.float64)
    if thetas.ndim != 2 or thetas.shape[0] < 2 or thetas.shape[1] < 1:
        raise ValueError(f"a contextual bandit task needs at least two arm vectors of one length, got shape {thetas.shape}")
    if not np.isfinite(thetas).all():
        raise ValueError("arm vectors must be finite numbers")
    return thetas


def draw_contexts(rng: np.random.Generator, n: int, dim: int) -> np.ndarray:
    """n contexts x ~ N(0, I/d), as the agent sees them (float32)."""
    return (rng.standard_normal((n, dim)) / np.sqrt(dim)).astype(np.float32)


def expected_best_reward(thetas: np.ndarray) -> np.ndarray:
    """E_x max_a theta_a . x of each task (thetas: (tasks, arms, d)), on one fixed sample of contexts: the same
    number every time, its error about 1% of the value (Monte Carlo with BEST_REWARD_CONTEXTS contexts)."""
    thetas = np.asarray(thetas, dtype=np.float64)
    contexts = draw_contexts(np.random.default_rng(BEST_REWARD_SEED), BEST_REWARD_CONTEXTS, thetas.shape[-1]).astype(np.float64)
    return np.stack([(contexts @ task.T).max(axis=1).mean() for task in thetas])


def sample_split(num_tasks: int, num_held_out: int, rng: np.random.Generator, num_arms: int = 5, context_dim: int = 5, **_: Any):
    """Held-out tasks are drawn first, then training tasks, so the held-out set does not depend on how many
    training tasks are asked for."""
    draw = lambda n: rng.standard_normal((n, num_arms, context_dim)) / np.sqrt(context_dim)  # noqa: E731
    held_out, train = draw(num_held_out), draw(num_tasks - num_held_out)
    as_tasks = lambda thetas: [{"thetas": task.tolist()} for task in thetas]  # noqa: E731
    return as_tasks(train), as_tasks(held_out)


def task_space_size(**_: Any) -> None:
    """Arm vectors are continuous: any number of tasks."""
    return None


class ContextualBanditEnv(gym.Env):
    """One contextual bandit task (Gymnasium API): reset shows a context, a step pulls an arm against it and ends
    the episode. The observation a step returns is the context just pulled against (there is no next state)."""

    def __init__(self, thetas, sigma: float = 0.3):
        self.thetas = _check_thetas(thetas)
        self.sigma = float(sigma)
        self.num_arms, self.context_dim = self.thetas.shape
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, shape=(self.context_dim,), dtype=np.float32)
        self.action_space = gym.spaces.Discrete(self.num_arms)
        self.horizon = 1  # one pull per episode
        self.context = np.zeros(self.context_dim, dtype=np.float32)

    @cached_property
    def optimal_return(self) -> float:
        return float(expected_best_reward(self.thetas[None])[0])

    def arm_means(self, observation=None) -> np.ndarray:
        """theta_a . x of every arm for a context (the one shown if None)."""
        context = self.context if observation is None else np.asarray(observation, dtype=np.float32)
        return self.thetas @ context.astype(np.float64)

    def optimal_action(self, observation=None) -> int:
        return int(np.argmax(self.arm_means(observation)))

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.context = draw_contexts(self.np_random, 1, self.context_dim)[0]
        return self.context.copy(), {}

    def step(self, action):
        means = self.arm_means()
        mean = means[int(action)]
        reward = float(mean + self.sigma * self.np_random.standard_normal())
        info = {"expected_reward": float(mean), "optimal_expected_reward": float(means.max())}
        return self.context.copy(), reward, True, False, info


class ContextualBanditBatch:
    """N contextual bandit tasks pulled together: `reset` draws the contexts of the rows it resets, `step` pulls
    against the contexts shown; one seeded generator draws contexts and reward noise, row by row in order.
    Not a TabularBatchEnv, as contexts are continuous (no num_states, state_index, observations_of)."""

    score_name = "mean reward of the pulled arm"  # what expected_rewards sums to per episode (the learning check's score)

    def __init__(self, thetas: np.ndarray, sigma: float = 0.3, seed: int | np.random.SeedSequence | np.random.Generator | None = None):
        self.thetas = np.asarray(thetas, dtype=np.float64)
        for task in self.thetas:
            _check_thetas(task)
        self.sigma = float(sigma)
        self.np_random = np.random.default_rng(seed)
        self.num_envs, self.num_actions, self.context_dim = self.thetas.shape
        self.horizon = 1
        self.single_observation_space = gym.spaces.Box(-np.inf, np.inf, shape=(self.context_dim,), dtype=np.float32)
        self.single_action_space = gym.spaces.Discrete(self.num_actions)
        self.contexts = np.zeros((self.num_envs, self.context_dim), dtype=np.float32)
        self._means = np.zeros((self.num_envs, self.num_actions))
        self._rows = np.arange(self.num_envs)

    @classmethod
    def from_tasks(
        cls, tasks: list[dict], seed: int | np.random.SeedSequence | np.random.Generator | None = None, **kwargs: Any
    ) -> ContextualBanditBatch:
        return cls(np.array([t["thetas"] for t in tasks], dtype=np.float64), seed=seed, **kwargs)

    @cached_property
    def optimal_returns(self) -> np.ndarray:
        """E_x max_a theta_a . x of each row's task (`expected_best_reward`)."""
        return expected_best_reward(self.thetas)

    def reset(self, mask: np.ndarray | None = None) -> np.ndarray:
        """New contexts for the rows in mask (all if None); every row's context."""
        rows = self._rows if mask is None else self._rows[np.asarray(mask, dtype=bool)]
        self.contexts[rows] = draw_contexts(self.np_random, len(rows), self.context_dim)
        self._means[rows] = np.einsum("rad,rd->ra", self.thetas[rows], self.contexts[rows].astype(np.float64))
        return self.contexts.copy()

    def step(self, actions: np.ndarray):
        mean = self._means[self._rows, actions]
        rewards = (mean + self.sigma * self.np_random.standard_normal(self.num_envs)).astype(np.float32)
        done = np.ones(self.num_envs, dtype=bool)
        return self.contexts.copy(), rewards, done, ~done

    def arm_means(self) -> np.ndarray:
        """(rows, arms): theta_a . x of every arm against each row's context shown."""
        return self._means

    def expected_rewards(self, rows: np.ndarray, actions: np.ndarray, rewards: np.ndarray) -> np.ndarray:
        """theta_a . x of the pulled arm against the context it was pulled in: free of reward noise."""
        return self._means[rows, actions]

    def optimal_expected_rewards(self) -> np.ndarray:
        """(rows,): max_a theta_a . x against each row's context shown, the other term of a pull's regret."""
        return self._means.max(axis=1)

    def optimal_actions(self, states: np.ndarray | None = None, rows: np.ndarray | None = None) -> np.ndarray:
        """Best arm for the context each row shows."""
        best = self._means.argmax(axis=1)
        return best if rows is None else best[rows]
