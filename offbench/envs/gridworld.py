"""What the open square grids of Dark Room and Key-to-Door share: moves, shortest paths, optimal moves.

Coordinates are (x, y) integers in [0, size); a cell's index is `y * size + x`. The five actions are
0 no-op, 1 x+1, 2 x-1, 3 y+1, 4 y-1 (the AD paper lists "left, right, up, down, no-op" without an
order; this one is ours). A move into a wall leaves the agent where it is.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from functools import cache

import gymnasium as gym
import numpy as np

MOVES = np.array([[0, 0], [1, 0], [-1, 0], [0, 1], [0, -1]], dtype=np.int64)
ACTION_NAMES = ("no-op", "x+1", "x-1", "y+1", "y-1")
NUM_ACTIONS = len(MOVES)


def start_cell(size: int) -> tuple[int, int]:
    """The agent starts in the centre of the room (AD paper, Dark Room)."""
    return size // 2, size // 2


def cell_index(xy: np.ndarray, size: int) -> np.ndarray:
    xy = np.asarray(xy)
    return xy[..., 1] * size + xy[..., 0]


@cache
def next_cell_table(size: int) -> np.ndarray:
    """(cells, actions) index of the cell each action leads to."""
    xy = cell_xy_table(size)[:, None, :] + MOVES[None]
    return cell_index(np.clip(xy, 0, size - 1), size)


@cache
def cell_xy_table(size: int) -> np.ndarray:
    """(cells, 2) the (x, y) of each cell index."""
    ys, xs = np.divmod(np.arange(size * size), size)
    return np.stack([xs, ys], axis=-1).astype(np.int64)


@cache
def distance_table(size: int) -> np.ndarray:
    """(targets, cells) number of steps on a shortest path from each cell to each target (breadth-first,
    all targets at once). On an open grid this equals the Manhattan distance, which the tests check."""
    cells = size * size
    nxt = next_cell_table(size)
    dist = np.full((cells, cells), -1, dtype=np.int64)
    dist[np.arange(cells), np.arange(cells)] = 0
    frontier = dist == 0
    step = 0
    while frontier.any():
        step += 1
        reaches_frontier = frontier[:, nxt].any(axis=-1)  # [t, c]: some action from c lands in the frontier
        frontier = reaches_frontier & (dist < 0)
        dist[frontier] = step
    return dist


@cache
def policy_table(size: int) -> np.ndarray:
    """(targets, cells) an action on a shortest path to the target: the lowest-numbered action whose next
    cell is closest to it, so the no-op exactly on the target and a real move everywhere else."""
    dist = distance_table(size)
    after_move = dist[:, next_cell_table(size)]  # [t, c, a]
    return after_move.argmin(axis=-1)


def check_cell(name: str, xy, size: int) -> tuple[int, int]:
    """A task cell as a tuple of two ints inside the grid (ValueError otherwise)."""
    flat = np.asarray(xy).reshape(-1)
    if flat.size != 2:
        raise ValueError(f"{name} must be two integers (x, y), got {xy!r}")
    x, y = int(flat[0]), int(flat[1])
    if not (0 <= x < size and 0 <= y < size):
        raise ValueError(f"{name} {(x, y)} is outside the {size}x{size} grid")
    return x, y


def all_cells(size: int) -> list[tuple[int, int]]:
    return [(x, y) for y in range(size) for x in range(size)]


def check_action_order(order) -> tuple[int, ...]:
    """A task's action order: which move (0..4, MOVES) each of the agent's action labels makes. The identity if
    None; otherwise a permutation of the five moves (ValueError naming what is wrong)."""
    if order is None:
        return tuple(range(NUM_ACTIONS))
    flat = [int(a) for a in np.asarray(order).reshape(-1)]
    if sorted(flat) != list(range(NUM_ACTIONS)):
        raise ValueError(f"action_order must be a permutation of 0..{NUM_ACTIONS - 1}, got {list(flat)}")
    return tuple(flat)


def move(pos: tuple[int, int], action, size: int) -> tuple[int, int]:
    """The cell one move (an index of MOVES) leads to from `pos` in a single (unbatched) environment."""
    dx, dy = MOVES[int(action)]
    return min(max(pos[0] + int(dx), 0), size - 1), min(max(pos[1] + int(dy), 0), size - 1)


class GridBatch(ABC):
    """What the batched grid worlds share: N rows on one size x size grid, each in a tabular state that
    indexes a table of observations (`_obs`, states x obs) and a per-row table of optimal actions
    (`_policy`, rows x states); a move is one lookup in the grid's next-cell table. A row may have its own action
    order (`action_orders`, rows x actions: the move each action label makes); `_policy` is in the row's labels."""

    score_name = "episode return"  # what expected_rewards sums to per episode (the learning check's score)
    num_actions = NUM_ACTIONS

    def _setup_grid(
        self, size: int, horizon: int, num_envs: int, observations: np.ndarray, policy: np.ndarray, action_orders: np.ndarray | None = None
    ) -> None:
        self.size, self.horizon, self.num_envs = size, horizon, num_envs
        self.num_states = len(observations)
        self.single_action_space = gym.spaces.Discrete(NUM_ACTIONS)
        identity = np.broadcast_to(np.arange(NUM_ACTIONS), (num_envs, NUM_ACTIONS))
        self.action_orders = (
            identity.copy() if action_orders is None else np.asarray(action_orders, dtype=np.int64).reshape(num_envs, NUM_ACTIONS)
        )
        labels = np.argsort(self.action_orders, axis=-1)  # [row, move]: the label that makes the move
        policy = np.take_along_axis(labels, np.asarray(policy).reshape(num_envs, -1), axis=-1)
        self._obs, self._policy = observations, policy.reshape(-1)  # _policy[row * num_states + state]
        self._row_offset = np.arange(num_envs) * self.num_states
        self._start = int(cell_index(np.array(start_cell(size)), size))
        self._next = next_cell_table(size).reshape(-1)  # [cell * actions + action]
        self.cell = np.full(num_envs, self._start, dtype=np.int64)
        self.t = np.zeros(num_envs, dtype=np.int64)

    @property
    def start_state(self) -> int:
        """The tabular state every episode starts in (the centre cell, without a key)."""
        return self._start

    def _reset_grid(self, mask) -> None:
        self.cell[mask] = self._start
        self.t[mask] = 0

    def moves_of(self, actions: np.ndarray) -> np.ndarray:
        """The move (index of MOVES) each row's action label makes."""
        return self.action_orders[np.arange(self.num_envs), actions]

    def _move(self, actions: np.ndarray) -> None:
        self.cell = self._next[self.cell * NUM_ACTIONS + self.moves_of(actions)]
        self.t += 1

    def optimal_actions(self, states: np.ndarray | None = None, rows: np.ndarray | None = None) -> np.ndarray:
        """Optimal action in the given tabular states of the given rows (default: every row, now)."""
        if states is None:
            states = self.state_index()
        return self._policy[(self._row_offset if rows is None else self._row_offset[rows]) + states]

    def optimal_action_table(self) -> np.ndarray:
        """Optimal action of every (row, state), flat: entry row * num_states + state."""
        return self._policy

    def observations_of(self, states: np.ndarray) -> np.ndarray:
        """The observation of each tabular state."""
        return self._obs[states]

    def compact_observations(self) -> np.ndarray:
        """(states, obs) observation table in the smallest integer dtype that holds it (uint8 up to a 256-cell
        side): what datasets store, cast back to the environment's dtype by readers that need it."""
        return self._obs.astype(np.min_scalar_type(self._obs.max()))

    @abstractmethod
    def state_index(self) -> np.ndarray:
        """Tabular state of every row; each grid numbers its own states."""

    @abstractmethod
    def tables(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(next state, reward, terminated), each (rows, states, actions): the batch as a deterministic tabular MDP,
        for the generators' loop; each grid defines it (tests check it against step())."""

    def expected_rewards(self, rows: np.ndarray, actions: np.ndarray, rewards: np.ndarray) -> np.ndarray:
        """The grids are deterministic: the reward received is its expectation."""
        return rewards
