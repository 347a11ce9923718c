"""What do AD and Headless-AD learn from LinUCB's contextual-bandit histories, when they act at random's regret?
For each card, rules that predict the source's next arm from the history alone, scored against its actions: the
arm the source pulled last, the arm it has pulled most so far (neither reads the context), and the best arm for
the shown context (needs the task's arm vectors: the card's `optimal_action` column). Beside them, for each run
given, its training accuracy (the last logged value) and its final regret. A model whose accuracy matches a
context-blind rule has learnt that rule, and a model acting by such a rule locks onto arbitrary arms.

    python benchmarks/studies/contextual_bandit_imitation.py --datasets CARD... [--runs RUN_DIR...]

Answer: benchmarks/studies/contextual-bandit-imitation.md.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout, for benchmarks.*
from benchmarks.common import cli_help, markdown_table  # noqa: E402


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


def rule_accuracies(dataset: str) -> dict[str, str]:
    """Each rule's accuracy against the source's actions on one card (as table cells)."""
    actions, best, arms = histories(dataset)
    later = actions[:, 1:]
    accuracies = {
        "chance": 1.0 / arms,
        "last arm pulled": (later == actions[:, :-1]).mean(),
        "most pulled so far": (later == most_pulled_so_far(actions, arms)).mean(),
        "best arm for the context": (actions == best).mean(),
        "best arm for the context, last 50 pulls": (actions[:, -50:] == best[:, -50:]).mean(),
    }
    return {"arms / pulls": f"{arms} / {actions.shape[1]}", **{rule: f"{value:.3f}" for rule, value in accuracies.items()}}


def run_row(run: Path) -> dict[str, str]:
    """A run's baseline, dataset, last logged training accuracy and final regret."""
    from offbench.tracking.read_run import read_run

    finished = read_run(run)
    logged = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    accuracy = next(line["accuracy"] for line in reversed(logged) if "accuracy" in line)
    return {
        "run": run.name,
        "baseline": finished.baseline,
        "dataset": finished.dataset_id,
        "training accuracy": f"{accuracy:.3f}",
        "final regret": f"{finished.score('regret', 'final'):.1f}",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=cli_help(__doc__), formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--datasets", nargs="+", required=True)
    parser.add_argument("--runs", nargs="*", type=Path, default=[])
    args = parser.parse_args()
    by_dataset = {dataset: rule_accuracies(dataset) for dataset in args.datasets}
    rules = list(by_dataset[args.datasets[0]])
    print(markdown_table([{"rule": rule, **{d: by_dataset[d][rule] for d in args.datasets}} for rule in rules]))
    if args.runs:
        print()
        print(markdown_table([run_row(run) for run in args.runs]))


if __name__ == "__main__":
    main()
