"""Every method of one dataset against two budgets: gradient updates (what the board holds equal) and wall-clock seconds
(what the updates cost). Two panels, the same lines: mean over seeds, shaded from the lowest seed to the highest.

Takes the tidy learning curves a leaderboard builds from its entries (label, dataset, seed, step, seconds, score),
where `seconds` places each evaluation at step * wall_time_s / steps of its run: a constant update rate over the run,
since an entry records only its total wall time. On the wall-clock panel an evaluation sits at the mean over seeds of
those seconds; a label with a seed of no recorded wall time is left off that panel (the caption says so).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from offbench.errors import OffbenchError
from offbench.plotting.figures import label_colours, plain_text, plt, save_figure, shared_legend


def seed_summary(rows: pd.DataFrame, where: str) -> pd.DataFrame:
    """One label's curves on one dataset reduced over seeds, per evaluation step every seed has: the mean of each
    seed's seconds at that step, and the mean, lowest and highest score."""
    scores = rows.pivot_table(index="seed", columns="step", values="score", aggfunc="mean").dropna(axis=1)
    if scores.shape[1] == 0:
        raise OffbenchError(f"{where}: the seeds share no evaluation step; cannot average their curves")
    seconds = rows.pivot_table(index="seed", columns="step", values="seconds", aggfunc="mean", dropna=False)
    seconds = seconds.reindex(index=scores.index, columns=scores.columns).to_numpy(dtype=float)
    matrix = scores.to_numpy(dtype=float)
    return pd.DataFrame(
        {
            "step": scores.columns.to_numpy(),
            "seconds": seconds.mean(axis=0),  # NaN where a seed has no wall time
            "mean": matrix.mean(axis=0),
            "low": matrix.min(axis=0),
            "high": matrix.max(axis=0),
            "seeds": matrix.shape[0],
        }
    )


def budget_figure(curves: pd.DataFrame, dataset: str, y_label: str):
    """Score against updates (left) and against wall-clock seconds (right) for every label on `dataset`, one legend."""
    rows = curves.loc[curves["dataset"] == dataset]
    if rows.empty:
        raise OffbenchError(f"no evaluations on {dataset} to plot")
    colours = label_colours(list(curves["label"].unique()))
    fig, (by_updates, by_seconds) = plt.subplots(1, 2, figsize=(10.5, 3.9), sharey=True, layout="constrained")
    untimed = []
    for label, runs in rows.groupby("label", sort=True):
        summary = seed_summary(runs, f"{label} on {dataset}")
        colour, text = colours[str(label)], f"{plain_text(label)} (n={summary['seeds'].iloc[0]})"
        timed = bool(summary["seconds"].notna().all())
        panels = [(by_updates, "step"), (by_seconds, "seconds")] if timed else [(by_updates, "step")]
        for ax, x in panels:
            ax.plot(summary[x], summary["mean"], color=colour, label=text, linewidth=1.8, marker="o", markersize=3)
            if summary["seeds"].iloc[0] > 1:
                ax.fill_between(summary[x], summary["low"], summary["high"], color=colour, alpha=0.15, linewidth=0)
        if not timed:
            untimed.append(plain_text(label))
    by_updates.set_xlabel("gradient updates (the same budget for every method)")
    by_seconds.set_xlabel("wall-clock seconds (step x run's seconds per update)")
    by_updates.set_ylabel(plain_text(y_label).replace(" (", "\n(", 1), fontsize=8)
    for ax in (by_updates, by_seconds):
        ax.set_xlim(left=0)  # both budgets start from nothing
        ax.grid(alpha=0.3)
    if untimed:
        by_seconds.set_title("not shown (no wall time recorded): " + ", ".join(untimed), fontsize=8)
    shared_legend(fig, [by_updates], columns=4)
    fig.suptitle(f"{plain_text(dataset)}: mean over seeds, shaded from the lowest seed to the highest", fontsize=11)
    return fig


def plot_budget(curves: pd.DataFrame, dataset: str, y_label: str, out: str | Path) -> Path:
    return save_figure(budget_figure(curves, dataset, y_label), out)


def budget_caption(dataset: str, y_label: str, curves: pd.DataFrame) -> str:
    """What the figure of `dataset` shows, for the page under it (the wall-clock assumption stated)."""
    untimed = bool(curves.loc[curves["dataset"] == dataset, "seconds"].isna().any())
    timed = " Rows with a run of no recorded wall time are on the left panel only." if untimed else ""
    return (
        f"{dataset}: {y_label} of every method against gradient updates (left: the equal update budget) and against "
        "wall-clock seconds (right: each evaluation placed at step x wall_time_s / steps of its run, which assumes a "
        "constant update rate over the run; wall_time_s is the run's recorded time, updates and the evaluations along the "
        "way; x is the mean over seeds). Lines are the mean over seeds, shaded from the "
        f"lowest seed to the highest.{timed}"
    )
