"""Dark Room and Dark Room Hard (Laskin et al. 2022, "In-context Reinforcement Learning with Algorithm
Distillation", section 5): a room the agent cannot see, a hidden goal that is the task.

Checked against the paper's description: 9x9 grid, the agent starts in the centre, 5 actions (4 moves and
a no-op), episodes of 20 steps, reward 1 on every step the agent is on the goal (reward for the cell the
step lands on). Episodes end by truncation at step 20, never by termination: the room goes on, only the
time limit cuts it, so learners bootstrap through the last step.

Dark Room Hard: 17x17 and "r = 1 exactly once for reaching the goal". The paper keeps the 20-step
horizon and does not say whether the episode continues after the reward. Here the episode terminates
on reaching the goal: nothing after the single reward can change the return, and with the position as
the observation the problem stays Markov (a continuing episode would need a "rewarded already" bit).
The goal may not be the start cell (it would be reached before the first action).

Observation: the agent's position as two ints (x, y). The goal is never observed; only rewards reveal it.

Permuted action order (Headless-AD, Sinii et al. 2024, arXiv:2312.13327, section 5.3): a task may carry an
`action_order`, the move each action label makes, so the same room is played with the labels shuffled. The
`darkroom-permuted` benchmark gives every held-out task its own uniformly drawn order and keeps the training
tasks in the plain one: a model that memorised what each label does is lost, one that reads the labels' effects
from its context is not. (Headless-AD's code permutes its training action set once for all evaluation tasks,
`prepare_envs.py`; a draw per task is the stricter test and the same in expectation.)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import gymnasium as gym
import numpy as np

from offbench.envs.gridworld import (
    NUM_ACTIONS,
    GridBatch,
    all_cells,
    cell_index,
    cell_xy_table,
    check_action_order,
    check_cell,
    distance_table,
    move,
    next_cell_table,
    policy_table,
    start_cell,
)

T = TypeVar("T")


def optimal_return(goal, size: int, horizon: int, hard: bool) -> float:
    """Best return from the start: walk a shortest path (d steps), then stay on the goal."""
    d = int(distance_table(size)[cell_index(np.asarray(goal), size), cell_index(np.asarray(start_cell(size)), size)])
    if hard:
        return 1.0 if d <= horizon else 0.0
    return float(max(0, horizon - max(d, 1) + 1))  # rewarded on steps d..horizon (every step if d == 0)


def goals(size: int, hard: bool) -> list[tuple[int, int]]:
    """Every admissible goal: all cells (Dark Room), all but the start (Dark Room Hard)."""
    return [c for c in all_cells(size) if not (hard and c == start_cell(size))]


def permuted_split(pool: Sequence[T], num_tasks: int, num_held_out: int, rng: np.random.Generator, task: Callable[[T], dict]):
    """Training and held-out tasks (`task` of each) from `pool`, every admissible task in a fixed order (Dark Room's
    goals, Key-to-Door's (key, door) pairs): of a seeded permutation, the first `num_held_out` are held out and the
    next `num_tasks - num_held_out` train, so the held-out set does not change when fewer training tasks are asked
    for. Each list keeps the pool's order."""
    order = rng.permutation(len(pool))
    pick = lambda idx: [task(pool[i]) for i in sorted(idx)]  # noqa: E731
    return pick(order[num_held_out:num_tasks]), pick(order[:num_held_out])


PERMUTE_ACTIONS = ("held-out",)  # which tasks `sample_split` gives their own action order


def sample_split(
    num_tasks: int,
    num_held_out: int,
    rng: np.random.Generator,
    size: int = 9,
    hard: bool = False,
    permute_actions: str | None = None,
    **_: Any,
):
    """Train and held-out goals (`permuted_split` of all goals), each list sorted by cell index. With
    `permute_actions = "held-out"` each held-out task then draws an action order (uniform over the 120
    permutations, identity included), after the goals, so the goals are those of the plain split."""
    train, held_out = permuted_split(goals(size, hard), num_tasks, num_held_out, rng, lambda goal: {"goal": list(goal)})
    if permute_actions is not None:
        if permute_actions not in PERMUTE_ACTIONS:
            raise ValueError(f"permute_actions must be one of {', '.join(PERMUTE_ACTIONS)}, got {permute_actions!r}")
        held_out = [{**task, "action_order": [int(a) for a in rng.permutation(NUM_ACTIONS)]} for task in held_out]
    return train, held_out


def task_space_size(size: int = 9, hard: bool = False, **_: Any) -> int:
    return len(goals(size, hard))


class DarkRoomEnv(gym.Env):
    """One Dark Room task (Gymnasium API). Plain Python on purpose: it is the reference the batched form is tested against."""

    metadata = {"render_modes": ["ansi"]}

    def __init__(self, goal, size: int = 9, horizon: int = 20, hard: bool = False, action_order=None, render_mode: str | None = None):
        self.size, self.horizon, self.hard = int(size), int(horizon), bool(hard)
        self.goal = check_cell("goal", goal, self.size)
        self.action_order = check_action_order(action_order)
        if self.hard and self.goal == start_cell(self.size):
            raise ValueError("in Dark Room Hard the goal cannot be the start cell")
        self.render_mode = render_mode
        self.observation_space = gym.spaces.Box(0, self.size - 1, shape=(2,), dtype=np.int64)
        self.action_space = gym.spaces.Discrete(NUM_ACTIONS)
        self.optimal_return = optimal_return(self.goal, self.size, self.horizon, self.hard)
        self._policy = policy_table(self.size)[cell_index(np.asarray(self.goal), self.size)]
        self.pos = start_cell(self.size)
        self.t = 0

    def optimal_action(self, observation) -> int:
        """The action label whose move is on a shortest path to the goal."""
        return self.action_order.index(int(self._policy[cell_index(np.asarray(observation), self.size)]))

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.pos, self.t = start_cell(self.size), 0
        return np.array(self.pos, dtype=np.int64), {}

    def step(self, action):
        self.pos = move(self.pos, self.action_order[int(action)], self.size)
        self.t += 1
        on_goal = self.pos == self.goal
        reward = 1.0 if on_goal else 0.0
        terminated = self.hard and on_goal
        truncated = self.t >= self.horizon and not terminated
        return np.array(self.pos, dtype=np.int64), reward, terminated, truncated, {}

    def render(self) -> str:
        rows = []
        for y in reversed(range(self.size)):
            rows.append("".join("A" if (x, y) == self.pos else "G" if (x, y) == self.goal else "." for x in range(self.size)))
        return "\n".join(rows)


class DarkRoomBatch(GridBatch):
    """N Dark Room tasks stepped together, a few array operations per step (what generators and evaluation
    use). The state is the cell index."""

    def __init__(
        self, goals: np.ndarray, size: int = 9, horizon: int = 20, hard: bool = False, action_orders: Sequence | np.ndarray | None = None
    ):
        self.hard = bool(hard)
        self.goals = np.asarray(goals, dtype=np.int64).reshape(-1, 2)
        orders = [None] * len(self.goals) if action_orders is None else list(action_orders)
        if len(orders) != len(self.goals):
            raise ValueError(f"{len(orders)} action orders for {len(self.goals)} goals")
        orders = [
            DarkRoomEnv(goal, size, horizon, self.hard, order).action_order for goal, order in zip(self.goals, orders)
        ]  # same validation as one task
        self.goal_cells = cell_index(self.goals, int(size))
        policy = policy_table(int(size))[self.goal_cells]
        self._setup_grid(
            int(size), int(horizon), len(self.goals), cell_xy_table(int(size)), policy, np.array(orders).reshape(-1, NUM_ACTIONS)
        )
        self.single_observation_space = gym.spaces.Box(0, self.size - 1, shape=(2,), dtype=np.int64)
        self.optimal_returns = np.array([optimal_return(g, self.size, self.horizon, self.hard) for g in self.goals])

    @classmethod
    def from_tasks(cls, tasks: list[dict], seed: int | None = None, **kwargs: Any) -> DarkRoomBatch:
        return cls(np.array([task["goal"] for task in tasks]), action_orders=[task.get("action_order") for task in tasks], **kwargs)

    def reset(self, mask: np.ndarray | None = None) -> np.ndarray:
        """Reset the rows in `mask` (all if None); returns every row's observation."""
        self._reset_grid(slice(None) if mask is None else mask)
        return self._obs[self.cell]

    def step(self, actions: np.ndarray):
        self._move(actions)
        on_goal = self.cell == self.goal_cells
        terminated = on_goal if self.hard else np.zeros(self.num_envs, dtype=bool)
        truncated = (self.t >= self.horizon) & ~terminated
        return self._obs[self.cell], on_goal.astype(np.float32), terminated, truncated

    def state_index(self) -> np.ndarray:
        """Tabular state of every row (its cell index)."""
        return self.cell

    def tables(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(next cell, reward, terminated), each (rows, cells, actions): what step() does, as tables."""
        next_cells = next_cell_table(self.size)[:, self.action_orders].transpose(1, 0, 2)  # [row, cell, label]
        on_goal = next_cells == self.goal_cells[:, None, None]
        return next_cells, on_goal.astype(np.float32), on_goal & self.hard
