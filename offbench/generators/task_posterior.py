"""A card's training tasks as tables: every tabular state, its observation, each task's optimal action there (DPT's
query and label, `TaskStates`), and the Bayes posterior of the optimal action given a context, with the tasks as the
prior (`OptimalActionPosterior`).

DPT's query is a state drawn uniformly over the environment's states, independent of the context, and its label is
the sampled task's optimal action there (jon--lee/decision-pretrained-transformer `collect_data.py` draws the query
with `env.sample_state()`). Given the query and the context, that label is distributed as
P(a* = a | s_query, D) = the share of the tasks consistent with D whose optimal action at s_query is a, when the
task is uniform over the card's training tasks (the generators give every task the same number of histories) and
nothing but the rewards in D depends on the task. Training on that distribution instead of the one-hot draw has the
same minimiser (the cross-entropy's minimiser is the label's conditional distribution either way) with less
variance: a context without the reward now says, in its target, which cells it ruled out (`label = "posterior"` in
DPT, benchmarks/studies/darkroom-dpt-rollin.md).

The posterior is exact only when the roll-in's states and actions ignore the task (DPT's uniform roll-in): a
learning history's actions come from a learner that knows its goal, so its steps carry evidence about the task that
a reward-only likelihood leaves out. `OptimalActionPosterior.for_card` refuses such cards. This lives with the
generators because the tables come from stepping the card's environment (the data layer imports no environment)
and whether the posterior is exact depends on the algorithm that made the card's data (`ignores_task` in
`offbench.generators.sources`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from offbench.envs.benchmarks import BENCHMARKS, TabularBatchEnv, benchmark_for_env, card_tasks, make_batch_env, tabular
from offbench.errors import OffbenchError
from offbench.generators.sources import ALGORITHMS


def training_env(card: dict[str, Any], needs: str, where: str = "") -> TabularBatchEnv:
    """The batched environment of the card's training tasks, row k = task k (the `task_id` column's numbering);
    one line naming what `needs` it where the card names no offbench environment or a non-tabular one (a
    contextual bandit's state is a fresh context each pull: there is no table of states to draw from)."""
    env_spec = card.get("env", {})
    if env_spec.get("suite") != "offbench":
        raise OffbenchError(
            f"{where}{needs} the card's environment and training tasks; card {card.get('id', '?')} names no offbench environment"
        )
    if benchmark_for_env(env_spec.get("id")).name not in BENCHMARKS:
        raise OffbenchError(
            f"{where}{needs} a tabular environment; card {card.get('id', '?')} is a contextual bandit "
            f"({env_spec['id']}), whose state is a fresh context every pull"
        )
    train, _ = card_tasks(card)
    return tabular(make_batch_env(card["env"], train), f"{where}{needs}")


class TaskStates:
    """Every tabular state of a set of tasks that share their states: the observation of each state, each task's
    optimal action in it, and the state of an observation."""

    def __init__(self, observations: np.ndarray, optimal_actions: np.ndarray):
        """observations (states, obs): small integers, one state per observation; optimal_actions (tasks, states)."""
        self.observations = np.asarray(observations)
        self.optimal_actions = np.asarray(optimal_actions).astype(np.int64)
        keys = self.observations.reshape(len(self.observations), -1).astype(np.int64)
        self.low = keys.min(axis=0)
        self.dims = keys.max(axis=0) - self.low + 1
        self.state_of_key = np.full(int(np.prod(self.dims)), -1, np.int64)
        self.state_of_key[np.ravel_multi_index((keys - self.low).T, self.dims)] = np.arange(len(keys))

    @classmethod
    def of_env(cls, env: TabularBatchEnv) -> TaskStates:
        """The states of a batched environment's rows (one task each)."""
        return cls(env.observations_of(np.arange(env.num_states)), env.optimal_action_table().reshape(env.num_envs, env.num_states))

    @property
    def num_states(self) -> int:
        return len(self.observations)

    def states(self, observations: np.ndarray) -> np.ndarray:
        """The tabular state of each observation (..., obs) -> (...)."""
        obs = np.asarray(observations).astype(np.int64)
        flat = obs.reshape(-1, obs.shape[-1]) - self.low
        if (flat < 0).any() or (flat >= self.dims).any():
            raise OffbenchError("an observation outside the tasks' states: the card's tasks do not fit this dataset")
        states = self.state_of_key[np.ravel_multi_index(flat.T, self.dims)]
        if (states < 0).any():
            raise OffbenchError("an observation that is no state of the tasks: the card's tasks do not fit this dataset")
        return states.reshape(obs.shape[:-1])


class OptimalActionPosterior:
    """P(a*(s_query) = a | context) over a set of deterministic tabular tasks that differ only in their rewards."""

    def __init__(self, rewards: np.ndarray, tasks: TaskStates):
        """rewards (tasks, states, actions) of every task; `tasks` their states and optimal actions."""
        self.rewards, self.tasks = rewards.astype(np.float32), tasks
        self.num_actions = rewards.shape[2]

    @classmethod
    def for_card(cls, card: dict[str, Any], env: TabularBatchEnv, where: str = "") -> OptimalActionPosterior:
        """The posterior over the card's training tasks (`env`: theirs, `training_env`); one line naming the problem
        where it would not be exact."""
        algo = card.get("source", {}).get("recipe", {}).get("params", {}).get("algo")
        if not getattr(ALGORITHMS.get(algo), "ignores_task", False):
            blind = sorted(name for name, cls_ in ALGORITHMS.items() if getattr(cls_, "ignores_task", False))
            raise OffbenchError(
                f"{where}posterior labels need contexts whose states and actions ignore the task (a roll-in: {', '.join(blind)}); "
                f"card {card.get('id', '?')} was made by {algo or 'no known generator'}"
            )
        next_states, rewards, _ = env.tables()
        if not (next_states == next_states[:1]).all():
            raise OffbenchError(
                f"{where}posterior labels weigh rewards only; the tasks of card {card.get('id', '?')} also differ in their transitions"
            )
        return cls(rewards, TaskStates.of_env(env))

    def probabilities(
        self, query: np.ndarray, observations: np.ndarray, actions: np.ndarray, rewards: np.ndarray, labels: np.ndarray
    ) -> np.ndarray:
        """(B, C + 1, A): after j = 0..C context transitions, the share of the still-possible tasks whose optimal
        action at the query is each action. A prefix no task explains (data not made from these tasks) gets its
        sample's own label."""
        query_states, states = self.tasks.states(query), self.tasks.states(observations)
        explained = self.rewards[:, states, actions] == np.asarray(rewards, np.float32)[None]  # (tasks, B, C)
        possible = np.logical_and.accumulate(explained, axis=2)
        possible = np.concatenate([np.ones(possible.shape[:2] + (1,), bool), possible], axis=2)  # (tasks, B, C + 1)
        votes = np.eye(self.num_actions, dtype=np.float32)[self.tasks.optimal_actions[:, query_states]]  # (tasks, B, A)
        counts = np.einsum("kbj,kba->bja", possible.astype(np.float32), votes)
        total = counts.sum(axis=-1, keepdims=True)
        own = np.broadcast_to(np.eye(self.num_actions, dtype=np.float32)[np.asarray(labels, np.int64)][:, None], counts.shape)
        return np.where(total > 0, counts / np.maximum(total, 1.0), own)
