"""What do AD and Headless-AD learn from LinUCB's contextual-bandit histories, when they act at random's regret?
For each card, rules that predict the source's next arm from the history alone, scored against its actions: the
arm the source pulled last, the arm it has pulled most so far (neither reads the context), and the best arm for
the shown context (needs the task's arm vectors: the card's `optimal_action` column). Beside them, for each run
given, its training accuracy (the last logged value) and its final regret. A model whose accuracy matches a
context-blind rule has learnt that rule, and a model acting by such a rule locks onto arbitrary arms.

    python benchmarks/studies/contextual_bandit_imitation.py --datasets contextual-bandit-linucb \
        contextual-bandit-headless-linucb [--runs RUN_DIR ...]

Answer: benchmarks/studies/contextual-bandit-imitation.md.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import gymnasium as gym
import numpy as np


def histories(dataset: str) -> tuple[np.ndarray, np.ndarray, int]:
    """(histories, pulls) arrays of the source's actions and of the best arm for each shown context, and the arm count."""
    import offbench
    from offbench.data.store import EpisodeStore

    store = offbench.load(dataset)
    if not isinstance(store, EpisodeStore) or not isinstance(store.action_space, gym.spaces.Discrete):
        raise SystemExit(f"{dataset}: not a contextual-bandit learning-history card")
    pulls = int(np.asarray(store.columns["episode_in_history"]).max()) + 1
    actions = np.asarray(store.actions, dtype=np.int64).reshape(-1, pulls)
    best = np.asarray(store.columns["optimal_action"], dtype=np.int64).reshape(-1, pulls)
    return actions, best, int(store.action_space.n)


def most_pulled_so_far(actions: np.ndarray, arms: int) -> np.ndarray:
    """For every pull after the first, the arm pulled most often before it (ties: the lowest index)."""
    counts = np.zeros((actions.shape[0], arms), dtype=np.int32)
    guesses = np.empty((actions.shape[0], actions.shape[1] - 1), dtype=np.int64)
    rows = np.arange(actions.shape[0])
    for t in range(actions.shape[1] - 1):
        counts[rows, actions[:, t]] += 1
        guesses[:, t] = counts.argmax(axis=1)
    return guesses


def rule_accuracies(dataset: str) -> dict[str, float]:
    actions, best, arms = histories(dataset)
    later = actions[:, 1:]
    return {
        "arms": arms,
        "pulls": actions.shape[1],
        "chance": 1.0 / arms,
        "last arm pulled": float((later == actions[:, :-1]).mean()),
        "most pulled so far": float((later == most_pulled_so_far(actions, arms)).mean()),
        "best arm for the context": float((actions == best).mean()),
        "best arm for the context, last 50 pulls": float((actions[:, -50:] == best[:, -50:]).mean()),
    }


def run_row(run: Path) -> dict[str, object]:
    """A run's dataset, baseline, last logged training accuracy and final regret."""
    config = json.loads((run / "run.json").read_text())
    lines = (run / "metrics.jsonl").read_text().splitlines()
    accuracy = next(json.loads(line)["accuracy"] for line in reversed(lines) if "accuracy" in json.loads(line))
    final = json.loads((run / "summary.json").read_text())["final"]
    return {
        "run": run.name,
        "baseline": config["baseline"],
        "dataset": config["dataset"]["id"],
        "training accuracy": accuracy,
        "final regret": final["regret"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--datasets", nargs="+", required=True)
    parser.add_argument("--runs", nargs="*", type=Path, default=[])
    args = parser.parse_args()
    rules = {dataset: rule_accuracies(dataset) for dataset in args.datasets}
    names = list(next(iter(rules.values())))
    print("| | " + " | ".join(args.datasets) + " |\n|---|" + "---|" * len(args.datasets))
    for name in names:
        cells = [f"{rules[d][name]:.3f}" if isinstance(rules[d][name], float) else str(rules[d][name]) for d in args.datasets]
        print(f"| {name} | " + " | ".join(cells) + " |")
    if args.runs:
        print("\n| run | baseline | dataset | training accuracy | final regret |\n|---|---|---|---|---|")
        for run in args.runs:
            row = run_row(run)
            print(f"| {row['run']} | {row['baseline']} | {row['dataset']} | {row['training accuracy']:.3f} | {row['final regret']:.1f} |")


if __name__ == "__main__":
    main()
