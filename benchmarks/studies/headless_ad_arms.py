"""Does Headless-AD trained on 3-, 4- and 5-armed bandit histories act at 8 arms, an arm count it never trained on?
Its regret on bandit-variable-arms-small's held-out 8-armed tasks, beside Thompson sampling (the data's source),
UCB1 and random on the same tasks, and AD trained on 8-armed histories (bandit-variable-arms-fixed8-small, whose
held-out tasks are the same). CPU-sized: small models, 1000 updates each, three seeds; it prints the table.

    python benchmarks/studies/headless_ad_arms.py --out WORK [--seeds 0 1 2] [--steps 1000]

Answer: benchmarks/studies/headless-ad-arms.md.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

MODEL = {"context_steps": 100, "embedding_dim": 16, "hidden_dim": 32, "num_layers": 2, "num_heads": 2}
TRAIN = {"batch_size": 16, "learning_rate": 3e-3, "warmup_steps": 50, "eval_episodes": 100, "eval_deterministic": "false"}
RUNS = {"headless-ad": "bandit-variable-arms-small", "ad": "bandit-variable-arms-fixed8-small"}


def run(name: str, dataset: str, seed: int, steps: int, out: Path) -> tuple[float, float]:
    """Train and evaluate one run (or reuse a finished one); its final regret over 100 pulls and its wall time."""
    folder = out / f"{name}-s{seed}"
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
        start = time.time()
        subprocess.run(args, check=True)
        (folder / "wall_s.txt").write_text(f"{time.time() - start:.1f}")
    line = [json.loads(text) for text in (folder / "evaluations.jsonl").read_text().splitlines()][-1]
    return float(line["regret"]), float((folder / "wall_s.txt").read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=1000)
    args = parser.parse_args()
    from offbench.data.cards import get_card
    from offbench.envs.benchmarks import card_tasks
    from offbench.evaluation.rollout import evaluation_seed
    from offbench.generators.references import reference_regret
    from offbench.records import to_dict

    card = get_card("bandit-variable-arms-small")
    _, held_out = card_tasks(card)
    rows = {}
    for name, dataset in RUNS.items():
        results = [run(name, dataset, seed, args.steps, args.out) for seed in args.seeds]
        rows[f"{name} ({dataset})"] = ([r for r, _ in results], np.mean([w for _, w in results]))
    references = [reference_regret(to_dict(card.env), held_out, 100, seed=evaluation_seed(seed, 0)) for seed in args.seeds]
    for name in ("Thompson sampling", "UCB1", "random"):
        rows[f"{name} (on the held-out tasks)"] = ([float(curves[name][-1]) for curves in references], None)
    print("| method | regret after 100 pulls, per seed | mean | train+eval s per run |\n|---|---|---:|---:|")
    for name, (regrets, wall) in rows.items():
        print(f"| {name} | {', '.join(f'{r:.2f}' for r in regrets)} | {np.mean(regrets):.2f} | {'' if wall is None else f'{wall:.0f}'} |")


if __name__ == "__main__":
    main()
