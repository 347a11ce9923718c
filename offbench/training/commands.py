"""`offbench run baseline ...` and `offbench evaluate RUN_DIR` (wired into offbench/cli.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from offbench.errors import OffbenchError

run_app = typer.Typer(help="Train a baseline and track the run.", no_args_is_help=True)
console = Console()


@run_app.command("baseline")
def run_baseline(
    name: str = typer.Argument(..., help="Baseline (see offbench/baselines/__init__.py): dt, bc, ..."),
    dataset: Optional[str] = typer.Option(None, "--dataset", help="Dataset id or path."),
    config: Optional[Path] = typer.Option(None, "--config", help="TOML file overriding the standard config."),
    overrides: list[str] = typer.Option([], "--set", help="key=value overriding one config field (repeatable)."),
    seed: Optional[int] = typer.Option(None, "--seed", help="Seed for everything in training (default 0)."),
    steps: Optional[int] = typer.Option(None, "--steps", help="Number of updates (same as --set steps=N)."),
    device: Optional[str] = typer.Option(None, "--device", help="cpu (default) or cuda."),
    out: Path = typer.Option(Path("runs"), "--out", help="Folder that holds run directories."),
    run_name: Optional[str] = typer.Option(None, "--name", help="Run directory name (default <baseline>-<dataset>-s<seed>-<time>)."),
    logger: Optional[str] = typer.Option(None, "--logger", help="Extra back-ends, comma-separated: tensorboard,wandb,mlflow."),
    resume: Optional[Path] = typer.Option(None, "--resume", help="Continue this run directory from its last checkpoint."),
) -> None:
    """Train a baseline on a dataset, evaluate it on a schedule and track the run."""
    from offbench.training.trainer import resume_run, start_run

    if resume is not None:
        given = [flag for flag, value in (("--dataset", dataset), ("--config", config), ("--set", overrides), ("--seed", seed),
                                          ("--steps", steps), ("--name", run_name), ("--logger", logger)) if value]
        if given:
            raise OffbenchError(f"--resume continues {resume} with its own settings; drop {', '.join(given)}")
        run, checkpoint = resume_run(resume, device)
        if run.record["baseline"] != name:
            raise OffbenchError(f"{resume}: is a '{run.record['baseline']}' run, not '{name}'")
    else:
        if dataset is None:
            raise OffbenchError("--dataset is required (a dataset id or path)")
        run, checkpoint = start_run(
            name, dataset, config, overrides, seed=seed or 0, steps=steps, device=device or "cpu", out=out, name=run_name, loggers=logger
        ), None
    console.print(f"run directory: {run.run_dir}", highlight=False)
    try:
        summary = run.train(checkpoint)
    except KeyboardInterrupt:
        console.print(f"interrupted; continue with: offbench run baseline {name} --resume {run.run_dir}", highlight=False)
        raise typer.Exit(130) from None
    final = summary["final"]
    if final is not None:
        metric = summary["score_metric"]
        console.print(f"final {metric}: {final[metric]:.4g} (step {final['step']})", highlight=False)


def evaluate_command(
    run_dir: Path = typer.Argument(..., help="A run directory."),
    episodes: Optional[int] = typer.Option(None, "--episodes", help="Episodes per target (default: the run's)."),
    device: Optional[str] = typer.Option(None, "--device", help="Device to evaluate on (default: the run's)."),
) -> None:
    """Re-evaluate a run's last checkpoint (same episode seeds as during training); prints, writes nothing."""
    import numpy as np

    from offbench.training.trainer import check_fit, load_checkpoint, open_run

    run = open_run(run_dir, device)
    checkpoint = load_checkpoint(run.run_dir, run.device)
    if checkpoint is None:
        raise OffbenchError(f"{run_dir}: no checkpoint yet (checkpoints/last.pt)")
    count = episodes if episodes is not None else run.config.train.eval_episodes
    if count < 1:
        raise OffbenchError("--episodes must be at least 1")
    check_fit(run.baseline_cls, run.spec, run.dataset, evaluate=True)
    baseline = run.build_baseline()
    baseline.load_state_dict(checkpoint["baseline"])
    table = Table(box=None, header_style="bold")
    for column in ("step", "target return", "episodes", "mean return", "std", "normalized score", "success rate"):
        table.add_column(column, justify="right")
    for record in run.evaluate(baseline, checkpoint["step"], count):
        returns = record["returns"]
        table.add_row(
            str(record["step"]),
            "-" if record["target_return"] is None else f"{record['target_return']:g}",
            str(len(returns)),
            f"{record['mean_return']:.2f}",
            f"{np.std(returns):.2f}",
            "-" if record["normalized_score"] is None else f"{record['normalized_score']:.2f}",
            "-" if record["success_rate"] is None else f"{record['success_rate']:.2f}",
        )
    console.print(table)
