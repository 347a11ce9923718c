"""Does Headless-AD trained on 3-, 4- and 5-armed bandit histories act at an arm count it never trained on (8), and
how does it do at one it did (4, on new tasks)? Its regret on each card's 48 held-out tasks, beside Thompson sampling
(the data's source), UCB1 and random on the same tasks, and AD trained at the held-out arm count alone
(bandit-variable-arms-fixed8-small / -fixed4-small, whose held-out tasks are the same). CPU-sized: small models,
1000 updates each, three seeds; it prints one table per held-out arm count.

    python benchmarks/studies/headless_ad_arms.py --out WORK [--seeds 0 1 2] [--steps 1000] [--arms 8 4]

Answer: benchmarks/studies/headless-ad-arms.md.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout, for benchmarks.*
from benchmarks.common import cli_help, markdown_table  # noqa: E402

MODEL = {"context_steps": 100, "embedding_dim": 16, "hidden_dim": 32, "num_layers": 2, "num_heads": 2}
TRAIN = {"batch_size": 16, "learning_rate": 3e-3, "warmup_steps": 50, "eval_episodes": 100, "eval_deterministic": "false"}
# held-out arm count -> the runs evaluated on those held-out tasks (baseline -> card)
RUNS = {
    8: {"headless-ad": "bandit-variable-arms-small", "ad": "bandit-variable-arms-fixed8-small"},
    4: {"headless-ad": "bandit-variable-arms-in-range-small", "ad": "bandit-variable-arms-fixed4-small"},
}


def run(name: str, dataset: str, seed: int, steps: int, out: Path) -> tuple[np.ndarray, float]:
    """Train and evaluate one run (or reuse a finished one, such as the board sweeps' runs under one folder); its
    cumulative regret after each of the 100 pulls and its training wall time."""
    folder = out / f"{name}-{dataset}-s{seed}"
    extra = {"token_layout": '"step"'} if name == "ad" else {}
    settings = {**MODEL, **TRAIN, **extra, "steps": steps, "cosine_steps": steps, "eval_every": steps, "checkpoint_every": steps}
    if not (folder / "summary.json").is_file():
        args = [
            sys.executable,
            "-m",
            "offbench",
            "run",
            "baseline",
            name,
            "--dataset",
            dataset,
            "--seed",
            str(seed),
            "--out",
            str(out),
            "--name",
            folder.name,
        ]
        for key, value in settings.items():
            args += ["--set", f"{key}={value}"]
        subprocess.run(args, check=True)
    from offbench.tracking.read_run import read_run

    finished = read_run(folder)
    return np.asarray(finished.evaluations[-1]["in_context_regret"], dtype=float), float(finished.summary["wall_time_s"])


def per_pull(curve: np.ndarray) -> str:
    """Regret per pull over the first ten pulls and over the last ten: how much the history taught."""
    return f"{curve[9] / 10:.2f} -> {(curve[-1] - curve[-11]) / 10:.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=cli_help(__doc__), formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--arms", type=int, nargs="+", default=list(RUNS), choices=list(RUNS), help="held-out arm counts")
    args = parser.parse_args()
    from offbench.data.cards import get_card
    from offbench.envs.benchmarks import card_tasks
    from offbench.evaluation.rollout import evaluation_seed
    from offbench.generators.references import reference_regret
    from offbench.records import to_dict

    for arms in args.arms:
        runs = RUNS[arms]
        card = get_card(runs["headless-ad"])
        _, held_out = card_tasks(card)
        rows = {}
        for name, dataset in runs.items():
            results = [run(name, dataset, seed, args.steps, args.out) for seed in args.seeds]
            rows[f"{name} ({dataset})"] = ([curve for curve, _ in results], np.mean([wall for _, wall in results]))
        references = [reference_regret(to_dict(card.env), held_out, 100, seed=evaluation_seed(seed, 0)) for seed in args.seeds]
        for name in ("Thompson sampling", "UCB1", "random"):
            rows[f"{name} (on the held-out tasks)"] = ([curves[name] for curves in references], None)
        table = []
        for name, (curves, wall) in rows.items():
            finals = [curve[-1] for curve in curves]
            table.append(
                {
                    "method": name,
                    "regret after 100 pulls, per seed": ", ".join(f"{r:.2f}" for r in finals),
                    "mean": f"{np.mean(finals):.2f}",
                    "regret per pull, pulls 1-10 -> 91-100": per_pull(np.mean(curves, axis=0)),
                    "training s per run": "" if wall is None else f"{wall:.0f}",
                }
            )
        print(f"\nHeld-out tasks with {arms} arms ({card.id})\n\n{markdown_table(table)}", flush=True)


if __name__ == "__main__":
    main()
