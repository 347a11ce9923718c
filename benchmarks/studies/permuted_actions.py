"""Does a Dark Room model depend on what each action label does? Plays each run's last checkpoint on the same 16
held-out goals twice: in the plain action order (`darkroom-ad-eps-fast`) and with each goal's own order
(`darkroom-permuted-ad-eps-fast`, the same training data byte for byte). Headless-AD draws its action embeddings
afresh per sequence, so labels carry no meaning for it and both scores should agree; AD's action head learnt the
plain order.

    .venv/bin/python benchmarks/studies/permuted_actions.py runs/leaderboards/darkroom-permuted/*

Answer: benchmarks/studies/headless-ad-permuted.md.

Both evaluations are the run's own protocol (50 consecutive episodes, its seed and acting rule) with the card
swapped, so the run's own card repeats its recorded final evaluation; the score is the last episode's return
averaged over the goals, as the darkroom board's.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import typer

from offbench.data.cards import get_card
from offbench.evaluation.protocols import build_protocol
from offbench.training.trainer import load_checkpoint, open_run

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout, for benchmarks.*
from benchmarks.common import cli_help, print_table  # noqa: E402

app = typer.Typer(add_completion=False)
ORDERS = {"plain": "darkroom-ad-eps-fast", "permuted": "darkroom-permuted-ad-eps-fast"}


@app.command()
def main(runs: list[Path] = typer.Argument(..., help="Run directories trained on either card.")) -> None:
    rows = []
    for run_dir in runs:
        run = open_run(run_dir, "cpu")
        checkpoint = load_checkpoint(run.run_dir, run.device)
        if checkpoint is None:
            raise SystemExit(f"{run_dir}: no checkpoint yet (checkpoints/last.pt)")
        baseline = run.restored_baseline(checkpoint)
        row = {"run": run_dir.name, "baseline": run.baseline_cls.name, "step": checkpoint["step"]}
        for order, card in ORDERS.items():
            (record,) = build_protocol(replace(run.setup, card=get_card(card))).evaluate(baseline, checkpoint["step"])
            curve = record["in_context_returns"]
            row[f"{order}: first episode"] = round(curve[0], 2)
            row[f"{order}: last episode"] = round(curve[-1], 2)
        rows.append(row)
    print_table(rows, "Each run on the same held-out goals, actions in the plain order and in each goal's own order")


if __name__ == "__main__":
    main.__doc__ = cli_help(__doc__)
    app()
