"""Does a Dark Room DPT read its context? Its accuracy on contexts drawn like DPT's own training data, split by
whether the context holds the goal's reward.

    .venv/bin/python benchmarks/studies/dpt_context_use.py RUN_DIR... [--contexts 4000] [--seed 0]

Answer: benchmarks/studies/darkroom-dpt-rollin.md (trained long enough, it reads a reward; it never reads where
the goal is not).

Each context is `context_size` i.i.d. transitions of one goal's room, every one from a uniformly drawn cell with a
uniformly drawn action (DPT's uniform roll-in, `offbench generate darkroom --algo uniform-states`); the query is a
uniform cell and the label its optimal action. For the card's training and held-out goals the script prints how often
the run's last checkpoint names the optimal action after the whole context, over all contexts and separately for
those with and without the reward in them. A model that has learnt to use the context is right far more often where
the reward shows where the goal is; one that acts on the query alone (the best move under the prior over goals) is
right equally often in both. Beside the contexts without the reward, the best any model trained on the training
goals can do there, as accuracy and as cross-entropy to the label: the posterior under the training goals from the
query alone, and from the query and the cells the context shows are not the goal. The argmax rarely moves between the
two, the cross-entropy does: a model below the first cross-entropy reads where the goal is not.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch
import typer

from offbench.envs.benchmarks import card_tasks
from offbench.envs.gridworld import NUM_ACTIONS, cell_index, cell_xy_table, next_cell_table, policy_table
from offbench.errors import OffbenchError
from offbench.training.trainer import load_checkpoint, open_run

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout, for benchmarks.*
from benchmarks.common import cli_help  # noqa: E402

SIZE = 9  # Dark Room's grid


def uniform_contexts(goals: np.ndarray, contexts: int, length: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """`contexts` contexts of `length` uniform transitions, each of a goal drawn from `goals`, with a uniform query."""
    goal = cell_index(goals, SIZE)[rng.integers(0, len(goals), contexts)]
    cells = rng.integers(0, SIZE * SIZE, (contexts, length))
    actions = rng.integers(0, NUM_ACTIONS, (contexts, length))
    next_cells = next_cell_table(SIZE)[cells, actions]
    query = rng.integers(0, SIZE * SIZE, contexts)
    xy = cell_xy_table(SIZE)
    return {
        "query": xy[query],
        "cells": xy[cells],
        "actions": actions,
        "next_cells": xy[next_cells],
        "rewards": (next_cells == goal[:, None]).astype(np.float32),
        "labels": policy_table(SIZE)[goal, query],
    }


def bayes_probabilities(prior_goals: np.ndarray, batch: dict[str, np.ndarray], use_context: bool) -> np.ndarray:
    """(contexts, actions): how likely each action is optimal at the query when the goal is uniform over `prior_goals`
    (the training goals), given nothing but the query (use_context False) or also that no transition of the context was
    rewarded (every cell the context stepped into is not the goal). For contexts without the reward only."""
    goals = cell_index(prior_goals, SIZE)
    query = cell_index(batch["query"], SIZE)
    labels = policy_table(SIZE)[goals][:, query].T  # (contexts, goals): each goal's optimal action at the query
    possible = np.ones(labels.shape, bool)
    if use_context:
        visited = cell_index(batch["next_cells"].reshape(-1, 2), SIZE).reshape(len(query), -1)
        possible = ~(goals[None, :, None] == visited[:, None, :]).any(-1)
    votes = ((labels[..., None] == np.arange(NUM_ACTIONS)) & possible[..., None]).sum(axis=1)
    return votes / votes.sum(axis=1, keepdims=True)


def cross_entropy(probabilities: np.ndarray, labels: np.ndarray) -> float:
    return float(-np.log(np.maximum(probabilities[np.arange(len(labels)), labels], 1e-12)).mean())


@torch.no_grad()
def full_context_probabilities(model: torch.nn.Module, batch: dict[str, np.ndarray]) -> np.ndarray:
    model.eval()
    floats = lambda name: torch.as_tensor(batch[name], dtype=torch.float32)  # noqa: E731
    logits = model(floats("query"), floats("cells"), torch.as_tensor(batch["actions"]), floats("rewards"), floats("next_cells"))
    return torch.softmax(logits[:, -1].double(), -1).numpy()


def main(
    run_dirs: list[Path] = typer.Argument(..., help="DPT run directories on a Dark Room card"),
    contexts: int = typer.Option(4000, help="contexts per set of goals"),
    seed: int = typer.Option(0, help="seed of the contexts (the same for every run)"),
) -> None:
    torch.set_num_threads(1)
    for run_dir in run_dirs:
        run = open_run(run_dir)
        if run.record["baseline"] != "dpt" or run.dataset.card.to_dict().get("env", {}).get("id") != "offbench/DarkRoom-v0":
            raise OffbenchError(f"{run_dir}: needs a DPT run on a Dark Room card")
        checkpoint = load_checkpoint(run.run_dir, run.device)
        if checkpoint is None:
            raise OffbenchError(f"{run_dir}: no checkpoint yet (checkpoints/last.pt)")
        model = run.restored_baseline(checkpoint).model
        print(
            f"\n{run_dir} (seed {run.seed}, update {checkpoint['step']}; {contexts} contexts of {run.config.baseline.context_size} uniform transitions)"
        )
        train, held_out = card_tasks(run.dataset.card)
        rng = np.random.default_rng(seed)
        train_goals = np.array([task["goal"] for task in train])
        for name, tasks in (("training goals", train), ("held-out goals", held_out)):
            batch = uniform_contexts(np.array([task["goal"] for task in tasks]), contexts, run.config.baseline.context_size, rng)
            probabilities = full_context_probabilities(model, batch)
            right = probabilities.argmax(-1) == batch["labels"]
            seen = batch["rewards"].any(axis=1)
            unseen = {key: value[~seen] for key, value in batch.items()}
            bayes = {use: bayes_probabilities(train_goals, unseen, use) for use in (False, True)}
            scores = {
                use: f"{(p.argmax(-1) == unseen['labels']).mean():.3f} / {cross_entropy(p, unseen['labels']):.3f}"
                for use, p in bayes.items()
            }
            print(
                f"{name}: optimal action {right.mean():.3f}; with the reward in the context ({seen.mean():.0%} of them) "
                f"{right[seen].mean():.3f}, without it {right[~seen].mean():.3f}, cross-entropy "
                f"{cross_entropy(probabilities[~seen], unseen['labels']):.3f} (the training goals' posterior, accuracy / "
                f"cross-entropy: {scores[False]} from the query alone, {scores[True]} knowing which cells were not the goal)"
            )


if __name__ == "__main__":
    main.__doc__ = cli_help(__doc__)  # --help: the question, the command and where the answer stands
    typer.run(main)
