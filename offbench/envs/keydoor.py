"""Dark Key-to-Door (Laskin et al. 2022, section 5): find an invisible key, then an invisible door.

Checked against the paper's description: 9x9 grid, 50-step episodes, reward 1 on first reaching the key
(the agent picks it up) and reward 1 on reaching the door while holding it; key and door positions are
the task. Choices the paper leaves open, made here: the agent starts in the centre (as in Dark Room);
the episode terminates when the door is reached with the key (nothing is left to earn), otherwise it is
truncated at step 50; the key is never on the start cell and never on the door (80 x 80 = 6400 tasks);
the door without the key does nothing.

Observation: (x, y, has_key) as three ints. Key possession is part of the state (the agent knows what
it carries; it is also implied by the rewards so far), which keeps the problem Markov for tabular
learners and gives each observation one optimal action (DPT labels). Key and door stay unobserved.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from offbench.envs.darkroom import permuted_split
from offbench.envs.gridworld import (
    NUM_ACTIONS,
    GridBatch,
    all_cells,
    cell_index,
    cell_xy_table,
    check_cell,
    distance_table,
    move,
    next_cell_table,
    policy_table,
    start_cell,
)


def optimal_return(key, door, size: int, horizon: int) -> float:
    """Best return from the start: a shortest path to the key, then one to the door, if time allows."""
    dist = distance_table(size)
    start, k, d = (int(cell_index(np.asarray(c), size)) for c in (start_cell(size), key, door))
    to_key, key_to_door = dist[k, start], dist[d, k]
    return float(int(to_key <= horizon) + int(to_key + key_to_door <= horizon))


def tasks(size: int) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """Every admissible (key, door): key off the start cell, door anywhere but on the key."""
    cells = all_cells(size)
    return [(k, d) for k in cells if k != start_cell(size) for d in cells if d != k]


def sample_split(num_tasks: int, num_held_out: int, rng: np.random.Generator, size: int = 9, **_: Any):
    """Train and held-out (key, door) pairs (`permuted_split` of all pairs), each list sorted by (key, door) cell index."""
    return permuted_split(tasks(size), num_tasks, num_held_out, rng, lambda pair: {"key": list(pair[0]), "door": list(pair[1])})


def task_space_size(size: int = 9, **_: Any) -> int:
    return len(tasks(size))


class KeyDoorEnv(gym.Env):
    """One Key-to-Door task (Gymnasium API), written plainly as the reference for the batched form."""

    metadata = {"render_modes": ["ansi"]}

    def __init__(self, key, door, size: int = 9, horizon: int = 50, render_mode: str | None = None):
        self.size, self.horizon = int(size), int(horizon)
        self.key = check_cell("key", key, self.size)
        self.door = check_cell("door", door, self.size)
        if self.key == self.door or self.key == start_cell(self.size):
            raise ValueError("the key must be neither on the door nor on the start cell")
        self.render_mode = render_mode
        self.observation_space = gym.spaces.Box(low=np.zeros(3, np.int64), high=np.array([self.size - 1, self.size - 1, 1]), dtype=np.int64)
        self.action_space = gym.spaces.Discrete(NUM_ACTIONS)
        self.optimal_return = optimal_return(self.key, self.door, self.size, self.horizon)
        policies = policy_table(self.size)
        self._policy = {
            False: policies[cell_index(np.asarray(self.key), self.size)],
            True: policies[cell_index(np.asarray(self.door), self.size)],
        }
        self.pos, self.has_key, self.t = start_cell(self.size), False, 0

    def optimal_action(self, observation) -> int:
        x, y, has_key = (int(v) for v in observation)
        return int(self._policy[bool(has_key)][y * self.size + x])

    def _obs(self) -> np.ndarray:
        return np.array([*self.pos, int(self.has_key)], dtype=np.int64)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.pos, self.has_key, self.t = start_cell(self.size), False, 0
        return self._obs(), {}

    def step(self, action):
        self.pos = move(self.pos, action, self.size)
        self.t += 1
        reward, terminated = 0.0, False
        if not self.has_key and self.pos == self.key:
            self.has_key, reward = True, 1.0
        elif self.has_key and self.pos == self.door:
            reward, terminated = 1.0, True
        truncated = self.t >= self.horizon and not terminated
        return self._obs(), reward, terminated, truncated, {}

    def render(self) -> str:
        def char(cell):
            return "A" if cell == self.pos else "K" if cell == self.key and not self.has_key else "D" if cell == self.door else "."

        return "\n".join("".join(char((x, y)) for x in range(self.size)) for y in reversed(range(self.size)))


class KeyDoorBatch(GridBatch):
    """N Key-to-Door tasks stepped together with array operations. The tabular state is
    `has_key * cells + cell`, which indexes the observation and optimal-action tables directly."""

    def __init__(self, keys: np.ndarray, doors: np.ndarray, size: int = 9, horizon: int = 50):
        size, horizon = int(size), int(horizon)
        self.keys = np.asarray(keys, dtype=np.int64).reshape(-1, 2)
        self.doors = np.asarray(doors, dtype=np.int64).reshape(-1, 2)
        for key, door in zip(self.keys, self.doors):
            KeyDoorEnv(key, door, size, horizon)  # same validation as one task
        self.key_cells, self.door_cells = cell_index(self.keys, size), cell_index(self.doors, size)
        xy, policies = cell_xy_table(size), policy_table(size)
        self._cells = size * size
        observations = np.concatenate([np.concatenate([xy, xy]), np.repeat([[0], [1]], self._cells, axis=0)], axis=1)
        policy = np.concatenate([policies[self.key_cells], policies[self.door_cells]], axis=1)
        self._setup_grid(size, horizon, len(self.keys), observations, policy)
        self.single_observation_space = gym.spaces.Box(
            low=np.zeros(3, np.int64), high=np.array([self.size - 1, self.size - 1, 1]), dtype=np.int64
        )
        self.optimal_returns = np.array([optimal_return(k, d, self.size, self.horizon) for k, d in zip(self.keys, self.doors)])
        self.has_key = np.zeros(self.num_envs, dtype=bool)

    @classmethod
    def from_tasks(cls, tasks: list[dict], seed: int | None = None, **kwargs: Any) -> KeyDoorBatch:
        return cls(np.array([t["key"] for t in tasks]), np.array([t["door"] for t in tasks]), **kwargs)

    def reset(self, mask: np.ndarray | None = None) -> np.ndarray:
        rows = slice(None) if mask is None else mask
        self._reset_grid(rows)
        self.has_key[rows] = False
        return self._obs[self.state_index()]

    def step(self, actions: np.ndarray):
        self._move(actions)
        picks_key = ~self.has_key & (self.cell == self.key_cells)
        opens_door = self.has_key & (self.cell == self.door_cells)
        self.has_key |= picks_key
        truncated = (self.t >= self.horizon) & ~opens_door
        return self._obs[self.state_index()], (picks_key | opens_door).astype(np.float32), opens_door, truncated

    def state_index(self) -> np.ndarray:
        return self.has_key * self._cells + self.cell

    def tables(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(next state, reward, terminated), each (rows, states, actions): what step() does, as tables.
        States without the key come first (cells), then those with it."""
        next_cells = next_cell_table(self.size)[None]  # (1, cells, actions)
        picks_key = next_cells == self.key_cells[:, None, None]
        opens_door = next_cells == self.door_cells[:, None, None]
        next_states = np.concatenate(
            [picks_key * self._cells + next_cells, self._cells + np.broadcast_to(next_cells, opens_door.shape)], axis=1
        )
        rewards = np.concatenate([picks_key, opens_door], axis=1).astype(np.float32)
        return next_states, rewards, np.concatenate([np.zeros_like(opens_door), opens_door], axis=1)
