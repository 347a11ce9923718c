"""`offbench plot`: figures from run directories, or of one dataset (its learning histories, or its episodes)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from offbench.errors import OffbenchError
from offbench.stats import BOOTSTRAP_REPS, METRICS
from offbench.tracking.read_run import FinishedRun, expand_run_dirs, is_run_dir, read_run

KINDS = ("auto", "curves", "in-context", "regret", "aggregate", "profile")


def _is_runs_argument(path: Path) -> bool:
    return is_run_dir(path) or (path.is_dir() and any(is_run_dir(child) for child in path.iterdir()))


def _plot_dataset(dataset: str, out: Path) -> Path:
    """A learning-history dataset's source-algorithm curve (offbench.plotting.histories, from the ICRL work); any
    other dataset's distribution of episode returns and lengths."""
    from offbench.data.cards import get_card
    from offbench.data.resolve import resolve

    card = None if Path(dataset).exists() else get_card(dataset)
    store = resolve(dataset)
    card_table = {**dict(store.card or {}), **(card.to_dict() if card is not None else {})}
    if card_table.get("kind") != "learning-history" and not store.read_in_place:  # a file read in place is XLand's histories
        from offbench.plotting.episodes import plot_episodes

        return plot_episodes(store, out, card_table)
    try:
        from offbench.plotting.histories import plot_learning_histories
    except ImportError:
        raise OffbenchError(
            f"{dataset}: plotting a dataset's learning histories needs offbench.plotting.histories, which this installation lacks"
        ) from None
    return plot_learning_histories(store, out, card=card)


def _summary_row_field(run: FinishedRun, which: str, field: str):
    """`field` of the evaluations line at the summary's step (None where absent)."""
    step = run.summary[which]["step"]
    return next((row.get(field) for row in run.curve_rows(which) if row["step"] == step), None)


def run_labels(runs: list[FinishedRun]) -> list[str]:
    """A label per run: its baseline, followed by the config values that tell it apart from the baseline's other
    runs on the same dataset (two configs of DPT plotted together are two curves, not one with doubled seeds)."""
    labels = []
    for run in runs:
        peers = [other.info["config"] for other in runs if (other.baseline, other.dataset_id) == (run.baseline, run.dataset_id)]
        config = run.info["config"]
        differing = sorted(k for k in set().union(*peers) - {"seed"} if any(peer.get(k) != config.get(k) for peer in peers))
        labels.append(f"{run.baseline} ({', '.join(f'{k}={config.get(k)}' for k in differing)})" if differing else run.baseline)
    return labels


def _frames(runs: list[FinishedRun], field: str, which: str):
    """(final scores, learning curves, in-context returns, bandit regret) of the runs as DataFrames, labelled by
    `run_labels`."""
    import pandas as pd

    scores, curves, in_context, regret = [], [], [], []
    for run, label in zip(runs, run_labels(runs)):
        key = {"label": label, "dataset": run.dataset_id, "seed": run.seed}
        score = run.score(field, which)
        if isinstance(score, (int, float)):
            scores.append({**key, "score": float(score)})
        curves += [
            {**key, "step": row["step"], "score": float(row[field])}
            for row in run.curve_rows(which)
            if isinstance(row.get(field), (int, float))
        ]
        in_context += [{**key, "episode": i, "score": float(v)} for i, v in enumerate(run.in_context_returns(which) or [], 1)]
        regret += [
            {**key, "pull": i, "score": float(v)} for i, v in enumerate(_summary_row_field(run, which, "in_context_regret") or [], 1)
        ]
    return (
        pd.DataFrame(scores, columns=["label", "dataset", "seed", "score"]),
        pd.DataFrame(curves, columns=["label", "dataset", "seed", "step", "score"]),
        pd.DataFrame(in_context, columns=["label", "dataset", "seed", "episode", "score"]),
        pd.DataFrame(regret, columns=["label", "dataset", "seed", "pull", "score"]),
    )


def _regret_references(runs: list[FinishedRun], regret, which: str) -> dict:
    """The reference algorithms (bandits: UCB1, Thompson sampling, random; contextual bandits: LinUCB, linear
    Thompson sampling, random) on the tasks each dataset's runs were evaluated on, with those runs' seeds (computed
    by the generators' module; the figure only draws them)."""
    from offbench.data.cards import get_card
    from offbench.generators.references import card_reference_regret

    references = {}
    for dataset in regret["dataset"].unique():
        dataset_runs = [r for r in runs if r.dataset_id == dataset]
        pulls = int(regret[regret.dataset == dataset]["pull"].max())
        seeds = sorted({r.seed for r in dataset_runs})
        tasks = _summary_row_field(dataset_runs[0], which, "tasks") or "held-out"  # the in-context default where a line names none
        references[dataset] = card_reference_regret(get_card(dataset), tasks, pulls, seeds)
    return references


def _metric_of(runs: list[FinishedRun], metric: Optional[str]) -> str:
    if metric is not None:
        if metric not in METRICS:
            raise OffbenchError(f"--metric must be one of {', '.join(METRICS)}, got {metric!r}")
        return metric
    named = {run.result.score_metric for run in runs}
    if len(named) != 1 or next(iter(named)) not in METRICS:
        raise OffbenchError(f"the runs name different or no headline metrics ({sorted(map(str, named))}); choose one with --metric")
    return named.pop()


def plot(
    sources: list[str] = typer.Argument(
        ...,
        help="Run directories (or folders of runs); or one dataset id/path: its learning histories, or its episodes' returns and lengths.",
    ),
    out: Path = typer.Option(..., "--out", "-o", help="Figure file: .png, .svg or .pdf."),
    kind: str = typer.Option(
        "auto",
        help=f"One of {', '.join(KINDS)}; auto = regret curves (bandits) or in-context curves if the runs have them, else learning curves.",
    ),
    metric: Optional[str] = typer.Option(None, help=f"{' | '.join(METRICS)} (default: the runs' headline metric)."),
    score: str = typer.Option("final", help="final | best: which summary value aggregate plots use."),
    reps: int = typer.Option(BOOTSTRAP_REPS, help="Bootstrap resamples for the intervals."),
) -> None:
    """Learning curves, in-context curves and aggregate plots (interval estimates, performance profiles)."""
    from offbench.plotting.figures import figure_format

    figure_format(out)
    if kind not in KINDS:
        raise OffbenchError(f"--kind must be one of {', '.join(KINDS)}, got {kind!r}")
    if score not in ("final", "best"):
        raise OffbenchError(f"--score must be final or best, got {score!r}")
    paths = [Path(s) for s in sources]
    if not any(_is_runs_argument(p) for p in paths):
        if len(sources) != 1:
            raise OffbenchError("give run directories, or exactly one dataset id/path to plot its episodes")
        Console().print(f"wrote {_plot_dataset(sources[0], out)}", highlight=False, markup=False, soft_wrap=True)
        return
    runs = [read_run(path) for path in expand_run_dirs(paths)]
    chosen = METRICS[_metric_of(runs, metric)]
    scores, curves, in_context, regret = _frames(runs, chosen.field, score)
    if kind == "auto":  # every in-context run logs regret; only bandit runs (headline metric regret) plot it
        kind = "regret" if chosen.name == "regret" and not regret.empty else "in-context" if not in_context.empty else "curves"
    if kind == "curves":
        from offbench.plotting.curves import plot_learning_curves

        written = plot_learning_curves(curves, chosen.label, out, reps=reps)
    elif kind == "regret":
        from offbench.plotting.regret import plot_regret

        written = plot_regret(regret, out, references=_regret_references(runs, regret, score), reps=reps)
    elif kind == "in-context":
        from offbench.plotting.curves import plot_in_context, source_curves

        optimum = {run.dataset_id: value for run in runs if (value := run.optimal_return()) is not None}
        algorithm_curves = source_curves(sorted(in_context["dataset"].unique()))
        written = plot_in_context(in_context, out, optimum=optimum, sources=algorithm_curves, reps=reps)
    else:
        from offbench.plotting.aggregate import plot_aggregate_intervals, plot_performance_profiles
        from offbench.stats import score_matrices

        matrices = score_matrices(scores, sorted(scores["dataset"].unique()))
        x_label = f"{score} {chosen.label}"
        if kind == "aggregate":
            written = plot_aggregate_intervals(matrices, x_label, out, reps=reps, lower_is_better=chosen.lower_is_better)
        else:
            written = plot_performance_profiles(
                matrices, x_label, out, reps=reps, bounded=chosen.name == "success_rate", lower_is_better=chosen.lower_is_better
            )
    Console().print(f"wrote {written}", highlight=False, markup=False, soft_wrap=True)
