"""Where do finished AD and DPT runs stand against the in-context targets? Summarises run directories: regret
against Thompson sampling on bandits, first against last episodes and the optimum on grid worlds.

    .venv/bin/python benchmarks/studies/icrl_results.py runs/*-bandit-* runs/*-darkroom-*

Answer: the tables of benchmarks/studies/bandit-*.md and darkroom-*.md were printed by it; docs/results.md has
the leaderboard rows.

Bandits: cumulative regret after the last pull of each run's latest evaluation (held-out tasks), mean over seeds
with a 95% interval (Student t over seeds), against Thompson sampling, UCB1 and random on the same tasks
(`offbench.generators.references.reference_regret`); the target is AD's and DPT's regret <= 1.1 x Thompson sampling's.
`--resample`: also re-evaluate each run's last checkpoint with sampled actions (`deterministic = false`) under the
run's own in-context protocol (same tasks, same environment seed), for runs recorded with greedy actions: AD
imitates Thompson sampling, a stochastic algorithm, and its greedy mode is not what it learnt.
Grid worlds: return in the first in-context episode, mean of the last five, and the optimal return; the CPU
target is last-five >= 3 x first and >= 50% of optimal (counted per seed).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import torch
import typer
from scipy import stats

from offbench.data.cards import get_card
from offbench.envs.benchmarks import card_tasks
from offbench.generators.references import reference_regret

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout, for benchmarks.*
from benchmarks.common import cli_help  # noqa: E402


def latest_evaluation(run_dir: Path) -> dict | None:
    lines = (run_dir / "evaluations.jsonl").read_text().splitlines() if (run_dir / "evaluations.jsonl").exists() else []
    return json.loads(lines[-1]) if lines else None


def row_of(run: dict, line: dict, label: str) -> dict:
    returns = line["in_context_returns"]
    return {
        "dataset": run["dataset"]["id"],
        "baseline": label,
        "seed": run["seed"],
        "step": line["step"],
        "regret": line["regret"],
        "first": returns[0],
        "last5": float(np.mean(returns[-5:])),
        "optimal": line["optimal_return"],
        "bandit": max(line["lengths"]) == 1,
        "pulls": len(returns),
        "tasks": line["tasks"],
    }


def resampled_evaluation(run_dir: Path) -> dict:
    """The last checkpoint evaluated again by the run's protocol, actions sampled from the policy."""
    from dataclasses import replace

    from offbench.evaluation.protocols import build_protocol
    from offbench.training.trainer import load_checkpoint, open_run

    run = open_run(run_dir)
    checkpoint = load_checkpoint(run.run_dir, run.device)
    baseline = run.build_baseline()
    baseline.load_state_dict(checkpoint["baseline"])
    return build_protocol(replace(run.setup, deterministic=False)).evaluate(baseline, checkpoint["step"])[0]


def interval(values: list[float]) -> str:
    mean = float(np.mean(values))
    if len(values) < 2:
        return f"{mean:.2f}"
    half = stats.t.ppf(0.975, len(values) - 1) * np.std(values, ddof=1) / np.sqrt(len(values))
    return f"{mean:.2f} ± {half:.2f}"


def main(
    run_dirs: list[Path],
    resample: bool = typer.Option(False, help="also re-evaluate the last checkpoints with sampled actions"),
    jobs: int = typer.Option(1, help="processes for --resample (one run each)"),
    variant: list[str] = typer.Option([], help="config keys whose values name a row (runs of one baseline that differ in them)"),
) -> None:
    torch.set_num_threads(1)
    run_dirs = [d for d in run_dirs if (d / "run.json").exists()]
    resampled = {}
    if resample:
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(jobs) as pool:
            resampled = dict(zip(run_dirs, pool.map(resampled_evaluation, run_dirs)))
    rows = []
    for run_dir in run_dirs:
        run = json.loads((run_dir / "run.json").read_text())
        lines = [latest_evaluation(run_dir), resampled.get(run_dir)]
        mode = "greedy" if run["evaluation"].get("deterministic", True) else "sampled"
        config = run["config"].get("baseline", run["config"])
        shown = ", ".join(f"{key}={config[key]}" for key in variant if key in config)
        name = f"{run['baseline']} [{shown}]" if shown else run["baseline"]
        for line, label in zip(lines, (f"{name} ({mode})", f"{name} (sampled, re-evaluated)")):
            if line is None:
                continue
            rows.append(row_of(run, line, label))
    frame = pd.DataFrame(rows)
    for dataset, part in frame.groupby("dataset", sort=True):
        print(f"\n### {dataset}")
        if part["bandit"].all():
            card = get_card(dataset)
            train, held_out = card_tasks(card)
            references = reference_regret(dict(card.env), train if part["tasks"].iloc[0] == "train" else held_out, int(part["pulls"].max()))
            thompson = references["Thompson sampling"][-1]
            print(f"| baseline | seeds | update step | regret at pull {int(part['pulls'].max())} | / Thompson sampling |")
            print("|---|---:|---:|---:|---:|")
            for baseline, runs in part.groupby("baseline", sort=True):
                ratios = [r / thompson for r in runs["regret"]]
                print(f"| {baseline} | {len(runs)} | {sorted(set(runs['step']))} | {interval(list(runs['regret']))} | {interval(ratios)} |")
            for name, curve in references.items():
                print(f"| {name} | - | - | {curve[-1]:.2f} | {curve[-1] / thompson:.2f} |")
        else:
            print(
                "| baseline | seeds | update step | first episode | last 5 episodes | optimal | last5 / first (means) | last5 / optimal | seeds meeting the CPU target |"
            )
            print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
            for baseline, runs in part.groupby("baseline", sort=True):
                first, last5 = runs["first"].mean(), runs["last5"].mean()  # a ratio of means: a first episode is often 0
                met = int(((runs["last5"] >= 3 * runs["first"]) & (runs["last5"] >= 0.5 * runs["optimal"])).sum())
                print(
                    f"| {baseline} | {len(runs)} | {sorted(set(runs['step']))} | {interval(list(runs['first']))} | "
                    f"{interval(list(runs['last5']))} | {runs['optimal'].mean():.2f} | {last5 / first if first > 0 else float('inf'):.1f} | "
                    f"{interval(list(runs['last5'] / runs['optimal']))} | {met} of {len(runs)} |"
                )


if __name__ == "__main__":
    main.__doc__ = cli_help(__doc__)  # --help: the question, the command and where the answer stands
    typer.run(main)
