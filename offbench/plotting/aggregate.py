"""Aggregate plots drawn by rliable: interval estimates of mean / median / IQM, and performance profiles."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from offbench.errors import OffbenchError, require
from offbench import stats
from offbench.plotting.figures import label_colours, plain_text, save_figure


def _plot_utils():
    require("rliable", "stats")
    from rliable import plot_utils

    return plot_utils


def plot_aggregate_intervals(matrices: dict[str, np.ndarray], x_label: str, out: str | Path, reps: int = stats.BOOTSTRAP_REPS) -> Path:
    """Mean, median and IQM across datasets and seeds per row, with 95% stratified-bootstrap intervals."""
    if not matrices:
        raise OffbenchError("no row has scores on every dataset: nothing to aggregate")
    estimates = stats.aggregate_intervals(matrices, reps)
    labels = sorted(matrices)
    shown = {label: plain_text(label) for label in labels}  # rliable writes the keys as tick labels
    points = {shown[label]: np.array([estimates[label][name][0] for name in stats.AGGREGATES]) for label in labels}
    intervals = {shown[label]: np.array([[estimates[label][name][i] for name in stats.AGGREGATES] for i in (1, 2)]) for label in labels}
    colours = {shown[label]: colour for label, colour in label_colours(labels).items()}
    height = max(1.8, 0.45 * len(labels))
    fig, _ = _plot_utils().plot_interval_estimates(
        points, intervals, metric_names=list(stats.AGGREGATES), algorithms=[shown[label] for label in labels], colors=colours,
        xlabel=plain_text(x_label), row_height=height / len(labels), subfigure_width=3.6, xlabel_y_coordinate=-0.45 / height,
    )
    n_seeds = {m.shape[0] for m in matrices.values()}
    n_datasets = next(iter(matrices.values())).shape[1]
    fig.suptitle(
        f"Aggregates over {n_datasets} dataset(s) and {'/'.join(map(str, sorted(n_seeds)))} seeds "
        "(bar: 95% stratified-bootstrap interval, tick: point estimate)", fontsize=10, y=1 + 0.6 / height,
    )
    return save_figure(fig, out)


def plot_performance_profiles(matrices: dict[str, np.ndarray], x_label: str, out: str | Path, reps: int = stats.BOOTSTRAP_REPS,
                              bounded: bool = False, lower_is_better: bool = False) -> Path:
    """Fraction of runs (seeds x datasets) scoring better than tau (above it; below it where lower is better),
    against tau, with 95% intervals."""
    if not matrices:
        raise OffbenchError("no row has scores on every dataset: nothing to profile")
    import matplotlib.pyplot as plt

    every = np.concatenate([m.ravel() for m in matrices.values()])
    low, high = (0.0, 1.0) if bounded else (min(0.0, float(every.min())), float(every.max()))
    if high <= low:
        high = low + 1.0
    taus = np.linspace(low, high, 81)
    profiles, intervals = stats.performance_profiles(matrices, taus, reps, lower_is_better=lower_is_better)
    labels = sorted(matrices)
    shown = {label: plain_text(label) for label in labels}  # rliable writes the keys as legend labels
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    _plot_utils().plot_performance_profiles(
        {shown[label]: profiles[label] for label in labels}, taus,
        performance_profile_cis={shown[label]: intervals[label] for label in labels}, ax=ax,
        colors={shown[label]: colour for label, colour in label_colours(labels).items()},
        xlabel=f"threshold τ: {plain_text(x_label)}",
        ylabel=f"fraction of runs with score {'<' if lower_is_better else '>'} τ", labelsize="medium", ticklabelsize="medium",
    )
    ax.legend(fontsize=8, loc="lower left")
    ax.set_title("Performance profiles (score distributions), shaded 95% interval", fontsize=10)
    return save_figure(fig, out)
