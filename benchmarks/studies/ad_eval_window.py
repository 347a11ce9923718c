"""Does AD on Dark Room do better with greedy actions or a sliding context window than with the defaults (sampled
actions, a context that restarts from its last half)? Re-evaluates a finished run's last checkpoint.

    .venv/bin/python benchmarks/studies/ad_eval_window.py RUN_DIR... [--tasks train --tasks held-out]

Answer: benchmarks/studies/darkroom-ad.md, "Greedy actions and a sliding window" (no: the defaults stay).

Each run is re-evaluated under its own in-context protocol (same tasks, same environment seed, same episodes)
with `eval_window` "half" (the context restarts from its last half when full) and "sliding" (always the last
`context_steps` steps), and greedy or sampled actions. Choose a mode on the training tasks (`--tasks train`);
the held-out goals only report it. Prints one Markdown row per run, split, window and action mode: the first
in-context episode, episodes 40-50 (the Dark Room target: >= 90% of optimal), the last five, the optimum.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import typer

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout, for benchmarks.*
from benchmarks.common import cli_help  # noqa: E402


def evaluate(run_dir: Path, tasks: str, window: str, actions: str) -> dict:
    from offbench.training.trainer import load_checkpoint, open_run

    run = open_run(run_dir)
    if run.baseline_cls.name != "ad":
        raise typer.BadParameter(f"{run_dir}: an {run.baseline_cls.name} run, not AD")
    run.config.baseline.eval_window = window
    checkpoint = load_checkpoint(run.run_dir, run.device)
    protocol = run.protocol(tasks=tasks, actions=actions)
    (record,) = protocol.evaluate(run.restored_baseline(checkpoint), checkpoint["step"])
    curve = np.asarray(record["in_context_returns"])
    return {
        "run": run_dir.name,
        "seed": run.seed,
        "step": checkpoint["step"],
        "tasks": tasks,
        "window": window,
        "actions": actions,
        "first": curve[0],
        "episodes 40-50": curve[39:50].mean(),
        "last 5": curve[-5:].mean(),
        "optimal": record["optimal_return"],
        "40-50 / optimal": curve[39:50].mean() / record["optimal_return"],
    }


def main(
    run_dirs: list[Path],
    tasks: list[str] = typer.Option(["train", "held-out"], "--tasks"),
    actions: list[str] = typer.Option(["sampled", "greedy"], "--actions"),
) -> None:
    import torch

    torch.set_num_threads(1)
    rows = [
        evaluate(run_dir, split, window, mode)
        for run_dir in run_dirs
        for split in tasks
        for window in ("half", "sliding")
        for mode in actions
    ]
    print(pd.DataFrame(rows).to_markdown(index=False, floatfmt=".2f"))


if __name__ == "__main__":
    main.__doc__ = cli_help(__doc__)  # --help: the question, the command and where the answer stands
    typer.run(main)
