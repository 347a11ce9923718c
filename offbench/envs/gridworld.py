"""What the open square grids of Dark Room and Key-to-Door share: moves, shortest paths, optimal moves.

Coordinates are (x, y) integers in [0, size); a cell's index is `y * size + x`. The five actions are
0 no-op, 1 x+1, 2 x-1, 3 y+1, 4 y-1 (the AD paper lists "left, right, up, down, no-op" without an
order; this one is ours). A move into a wall leaves the agent where it is.
"""

from __future__ import annotations

from functools import cache

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
