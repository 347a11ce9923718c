"""A hand-written in-context policy for Dark Room, evaluated as a black box with `offbench.evaluate`.

Dark Room (offbench/envs/darkroom.py): a 9x9 room, the agent starts in the centre and sees only its own cell (x, y);
reward 1 on every step it lands on the hidden goal; 20-step episodes, one goal per held-out task, played for many
consecutive episodes with the policy's memory kept across them. This policy needs no data and no training:

    until the goal is found: walk to the nearest cell not yet stood on (ties broken by a random order of the
                             cells), one step at a time, remembering each cell that paid nothing
    once a step pays:        that cell is the goal; stay on it for the rest of the episode, and in every later
                             episode walk straight to it and stay

So its return climbs from the first episodes (searching) to the optimal return once the goal is known: in-context
improvement by hand, the yardstick a learned in-context learner (AD, DPT) is measured against. The random order
comes from a numpy Generator seeded with --seed, so seeds search differently (the in-context protocol itself is
deterministic in Dark Room, so two seeds playing alike would submit identical runs).

    python examples/darkroom_heuristic.py --dataset darkroom-small --seed 0 --episodes 50 --out runs/heuristic-s0
"""

from __future__ import annotations

import argparse

import numpy as np

import offbench

# Dark Room's actions (offbench/envs/gridworld.py): 0 no-op, 1 x+1, 2 x-1, 3 y+1, 4 y-1; a move into a wall stays put.
MOVES = np.array([[0, 0], [1, 0], [-1, 0], [0, 1], [0, -1]], dtype=np.int64)
NO_OP = 0


class SearchThenReturn:
    """Systematic search of the room until a reward shows the goal, then straight back to it (a `Policy`:
    reset / act / observe, one row per held-out task)."""

    def __init__(self, room_size: int, seed: int):
        self.size, self.seed = room_size, seed
        xs, ys = np.meshgrid(np.arange(room_size), np.arange(room_size), indexing="xy")
        self.cells = np.stack([xs.ravel(), ys.ravel()], axis=1)  # (cells, 2): cell i is (x, y) = cells[i]

    def reset(self, num_envs: int) -> None:
        rng = np.random.default_rng(self.seed)  # every evaluation of this policy plays the same way
        self.unvisited = np.ones((num_envs, len(self.cells)), dtype=bool)  # cells not yet stood on, per task
        self.goal = np.full(num_envs, -1)  # cell index of the goal once a reward showed it
        self.tie_break = np.stack([rng.permutation(len(self.cells)) for _ in range(num_envs)])  # rank of each cell
        self.move_order = np.stack([1 + rng.permutation(4) for _ in range(num_envs)])  # which of the 4 moves to try first
        self.landing = np.zeros((num_envs, 2), dtype=np.int64)  # where this step's action takes each row

    def act(self, observations: np.ndarray) -> np.ndarray:
        positions = np.asarray(observations, dtype=np.int64)
        actions = np.array([self._action(row, position) for row, position in enumerate(positions)], dtype=np.int64)
        self.landing = np.clip(positions + MOVES[actions], 0, self.size - 1)
        return actions

    def observe(self, rewards: np.ndarray, dones: np.ndarray) -> None:
        landed = self.landing[:, 1] * self.size + self.landing[:, 0]
        rows = np.arange(len(landed))
        self.unvisited[rows, landed] = False
        paid = np.asarray(rewards) > 0
        self.goal[paid] = landed[paid]

    def _action(self, row: int, position: np.ndarray) -> int:
        target = self.cells[self.goal[row]] if self.goal[row] >= 0 else self._nearest_unvisited(row, position)
        for action in self.move_order[row]:
            if np.abs(target - (position + MOVES[action])).sum() < np.abs(target - position).sum():
                return int(action)
        return NO_OP  # on the target: stand on it (which is also how the start cell gets tried)

    def _nearest_unvisited(self, row: int, position: np.ndarray) -> np.ndarray:
        distance = np.abs(self.cells - position).sum(axis=1)  # steps to each cell in the open room
        candidates = np.flatnonzero(self.unvisited[row])
        best = np.lexsort((self.tie_break[row, candidates], distance[candidates]))[0]
        return self.cells[candidates[best]]


def main() -> None:
    parser = argparse.ArgumentParser(
        description="Evaluate the search-then-return heuristic in context on a Dark Room dataset's held-out goals."
    )
    parser.add_argument(
        "--dataset", default="darkroom-small", help="a Dark Room learning-history dataset (its card names the held-out goals)"
    )
    parser.add_argument("--seed", type=int, default=0, help="seeds the search order (and the protocol's seeds)")
    parser.add_argument("--episodes", type=int, default=50, help="consecutive in-context episodes per goal (the darkroom board: 50)")
    parser.add_argument("--out", required=True, help="the run directory to write (must not exist)")
    args = parser.parse_args()

    room_size = int(offbench.load(args.dataset).observation_space.high.max()) + 1
    result = offbench.evaluate(
        SearchThenReturn(room_size, args.seed), args.dataset, seed=args.seed, episodes=args.episodes, out=args.out, method="sweep-heuristic"
    )
    curve = result.in_context_returns
    print(f"{args.out}: {args.dataset}, {len(result.returns)} held-out goals, optimal return {result.records[0]['optimal_return']:.2f}")
    print("in-context return per episode (mean over goals):")
    for first in range(0, len(curve), 10):
        print(
            f"  episodes {first + 1:>3}-{min(first + 10, len(curve)):>3}: "
            + " ".join(f"{value:5.2f}" for value in curve[first : first + 10])
        )


if __name__ == "__main__":
    main()
