"""Aggregate plots drawn by rliable: interval estimates of mean / median / IQM, and performance profiles."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from offbench import stats
from offbench.errors import OffbenchError, require
from offbench.plotting.figures import label_colours, plain_text, save_figure


def _plot_utils():
    require("rliable", "stats")
    from rliable import plot_utils

    return plot_utils


def aggregate_intervals_figure(
    matrices: dict[str, np.ndarray], x_label: str, reps: int = stats.BOOTSTRAP_REPS, lower_is_better: bool = False
):
    """Mean, median and IQM across datasets and seeds per row, with 95% stratified-bootstrap intervals.

    Rows run best first from the top, by the mean, as the leaderboard table ranks them. Aggregates that are the same
    numbers for every row share one panel titled with both names instead of drawing identical panels (one dataset:
    the median is the mean over seeds, and so is the IQM of fewer than four seeds)."""
    if not matrices:
        raise OffbenchError("no row has scores on every dataset: nothing to aggregate")
    estimates = stats.aggregate_intervals(matrices, reps)
    sign = 1 if lower_is_better else -1
    labels = sorted(matrices, key=lambda label: (sign * estimates[label]["mean"][0], label))  # best first
    groups: list[list[str]] = []  # aggregates whose estimates and intervals agree for every row share a panel
    for name in stats.AGGREGATES:
        same = next(
            (
                group
                for group in groups
                if all(np.allclose(estimates[label][group[0]], estimates[label][name], rtol=1e-9) for label in labels)
            ),
            None,
        )
        if same is None:
            groups.append([name])
        else:
            same.append(name)
    names, panels = [group[0] for group in groups], [" = ".join(group) for group in groups]
    shown = {label: plain_text(label) for label in labels}  # rliable writes the keys as tick labels
    points = {shown[label]: np.array([estimates[label][name][0] for name in names]) for label in labels}
    intervals = {shown[label]: np.array([[estimates[label][name][i] for name in names] for i in (1, 2)]) for label in labels}
    colours = {shown[label]: colour for label, colour in label_colours(labels).items()}
    height = max(1.8, 0.45 * len(labels))
    fig, _ = _plot_utils().plot_interval_estimates(  # rliable draws its first row at the bottom
        points,
        intervals,
        metric_names=panels,
        algorithms=[shown[label] for label in reversed(labels)],
        colors=colours,
        xlabel=plain_text(x_label),
        row_height=height / len(labels),
        subfigure_width=3.6,
        xlabel_y_coordinate=-0.45 / height,
    )
    n_seeds = {m.shape[0] for m in matrices.values()}
    n_datasets = next(iter(matrices.values())).shape[1]
    fig.suptitle(
        f"Aggregates over {n_datasets} dataset(s) and {'/'.join(map(str, sorted(n_seeds)))} seeds "
        "(bar: 95% stratified-bootstrap interval, tick: point estimate)",
        fontsize=10,
        y=1 + 0.6 / height,
    )
    return fig


def plot_aggregate_intervals(
    matrices: dict[str, np.ndarray], x_label: str, out: str | Path, reps: int = stats.BOOTSTRAP_REPS, lower_is_better: bool = False
) -> Path:
    return save_figure(aggregate_intervals_figure(matrices, x_label, reps, lower_is_better), out)


def plot_performance_profiles(
    matrices: dict[str, np.ndarray],
    x_label: str,
    out: str | Path,
    reps: int = stats.BOOTSTRAP_REPS,
    bounded: bool = False,
    lower_is_better: bool = False,
) -> Path:
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
        {shown[label]: profiles[label] for label in labels},
        taus,
        performance_profile_cis={shown[label]: intervals[label] for label in labels},
        ax=ax,
        colors={shown[label]: colour for label, colour in label_colours(labels).items()},
        xlabel=f"threshold τ: {plain_text(x_label)}",
        ylabel=f"fraction of runs with score {'<' if lower_is_better else '>'} τ",
        labelsize="medium",
        ticklabelsize="medium",
    )
    ax.legend(fontsize=8, loc="lower left")
    ax.set_title("Performance profiles (score distributions), shaded 95% interval", fontsize=10)
    return save_figure(fig, out)
