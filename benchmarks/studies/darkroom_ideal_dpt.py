"""What would an ideal DPT reach online in Dark Room? Acts with the exact posterior of the optimal action instead of
a network.

    .venv/bin/python benchmarks/studies/darkroom_ideal_dpt.py [--dataset darkroom-uniform-states] [--repeats 20] [--window 80]

Answer: benchmarks/studies/darkroom-dpt-ceiling.md (52% of optimal with per-step sampling, DPT's evaluation).

DPT's minimiser is P(a*(s) = a | D) under its training tasks: the share of the training goals that the context D
leaves possible whose optimal action at s is a. This script acts with that distribution itself, on the card's
held-out goals, under DPT's online protocol (the context is the last `--window` transitions of the finished
episodes, 50 consecutive episodes of 20 steps), so it bounds what training can buy. Once a reward is in the context
the goal is known (a fitted DPT reads it, held-out goals too: benchmarks/studies/darkroom-dpt-rollin.md); before that:

- `sampled`: an action drawn from the posterior at every step (DPT's online evaluation);
- `greedy`: its most likely action;
- `per episode`: a goal drawn from the posterior once per episode and walked to (posterior sampling, which DPT's
  per-step draws approximate only where the posterior is concentrated);
- `gumbel per episode` / `uniform per episode`: per-step draws from the same posterior with their randomness fixed
  for the episode (one Gumbel vector, argmax of log-probability + Gumbel; or one uniform, inverse CDF in action
  order). These are the generic ways a DPT could commit without knowing the task's structure.

Each with the posterior over the training goals the context has not ruled out ("reads where the goal is not") and
with the prior alone (what a DPT that reads only rewards does). Mean over repeats, with a 95% t-interval over repeats.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import typer

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout, for benchmarks.*
from benchmarks.studies.icrl_results import interval  # noqa: E402
from offbench.data.cards import get_card
from offbench.envs.benchmarks import card_tasks
from offbench.envs.darkroom import optimal_return
from offbench.envs.gridworld import NUM_ACTIONS, cell_index, next_cell_table, policy_table, start_cell

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout, for benchmarks.*
from benchmarks.common import cli_help  # noqa: E402

SIZE, HORIZON = 9, 20
MODES = ("sampled", "greedy", "per episode", "gumbel per episode", "uniform per episode")


def ideal_returns(
    train_goals: np.ndarray, goals: np.ndarray, mode: str, excludes: bool, window: int, episodes: int, rng: np.random.Generator
) -> np.ndarray:
    """(rows, episodes) returns of the ideal policy, one row per entry of `goals` (cell indices)."""
    moves, policy = next_cell_table(SIZE), policy_table(SIZE)
    rows = np.arange(len(goals))
    start = int(cell_index(np.array(start_cell(SIZE)), SIZE))
    cells = np.full((len(goals), 0), -1, np.int64)  # the context: next cells of the finished episodes' transitions
    rewarded_cell = np.full(len(goals), -1)  # the latest rewarded cell in the context, -1 if none
    returns = np.zeros((len(goals), episodes))
    for episode in range(episodes):
        context = cells[:, -window:]
        found = (context == goals[:, None]).any(1)
        rewarded_cell = np.where(found, goals, -1)
        possible = np.ones((len(goals), len(train_goals)), bool)
        if excludes and context.size:
            possible = ~(train_goals[None, :, None] == context[:, None, :]).any(-1)
        possible[~possible.any(1)] = True  # every training goal ruled out: back to the prior
        weights = possible / possible.sum(1, keepdims=True)
        target = train_goals[(weights.cumsum(1) < rng.random((len(goals), 1))).sum(1).clip(max=len(train_goals) - 1)]
        pos = np.full(len(goals), start)
        if mode in ("gumbel per episode", "uniform per episode"):  # the draws fixed for the episode (other modes: none)
            gumbel, uniform = rng.gumbel(size=(len(goals), NUM_ACTIONS)), rng.random((len(goals), 1))
        visited = np.empty((len(goals), HORIZON), np.int64)
        for t in range(HORIZON):
            votes = np.einsum("rk,rka->ra", weights, np.eye(NUM_ACTIONS)[policy[train_goals][:, pos].T])
            if mode == "sampled":
                action = (votes.cumsum(1) < rng.random((len(goals), 1))).sum(1).clip(max=NUM_ACTIONS - 1)
            elif mode == "greedy":
                action = votes.argmax(1)
            elif mode == "gumbel per episode":
                with np.errstate(divide="ignore"):
                    action = (np.log(votes) + gumbel).argmax(1)
            elif mode == "uniform per episode":
                action = (votes.cumsum(1) < uniform).sum(1).clip(max=NUM_ACTIONS - 1)
            else:
                action = policy[target, pos]
            action = np.where(rewarded_cell >= 0, policy[np.maximum(rewarded_cell, 0), pos], action)
            pos = moves[pos, action]
            visited[:, t] = pos
            returns[rows, episode] += pos == goals
        cells = np.concatenate([cells, visited], axis=1)[:, -window:]
    return returns


def main(
    dataset: str = typer.Option("darkroom-uniform-states", help="a Dark Room card (its training and held-out goals)"),
    repeats: int = typer.Option(20, help="evaluations of every held-out goal per setting"),
    window: int = typer.Option(80, help="transitions of context (DPT's context_size)"),
    episodes: int = typer.Option(50),
    seed: int = typer.Option(0),
) -> None:
    train, held_out = card_tasks(get_card(dataset))
    train_goals = cell_index(np.array([task["goal"] for task in train]), SIZE)
    held_goals = [task["goal"] for task in held_out]
    goals = np.tile(cell_index(np.array(held_goals), SIZE), repeats)
    optimum = np.mean([optimal_return(goal, SIZE, HORIZON, False) for goal in held_goals])
    print(
        f"{dataset}: {len(train_goals)} training goals, {len(held_goals)} held-out goals x {repeats} repeats, "
        f"{episodes} episodes, context {window} transitions; optimal return {optimum:.2f}"
    )
    print("| action | reads where the goal is not | first episode | last 5 episodes | last 5 / optimal |")
    print("|---|---|---:|---:|---:|")
    for mode in MODES:
        for excludes in (True, False):
            returns = ideal_returns(train_goals, goals, mode, excludes, window, episodes, np.random.default_rng(seed))
            per_repeat = returns.reshape(repeats, len(held_goals), episodes).mean(1)
            last5 = per_repeat[:, -5:].mean(1)
            print(
                f"| {mode} | {'yes' if excludes else 'no'} | {per_repeat[:, 0].mean():.2f} | {interval(list(last5))} "
                f"| {last5.mean() / optimum:.0%} |"
            )


if __name__ == "__main__":
    main.__doc__ = cli_help(__doc__)  # --help: the question, the command and where the answer stands
    typer.run(main)
