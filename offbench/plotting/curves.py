"""Learning curves (score vs update step) and in-context curves (return vs in-context episode).

Both take tidy DataFrames (label, dataset, seed, x, score), as built from run directories or from
leaderboard entries, and draw the mean over seeds with a shaded 95% bootstrap interval (rliable).
"""

from __future__ import annotations

import math
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.ticker import MaxNLocator

from offbench import stats
from offbench.errors import OffbenchError
from offbench.plotting.figures import curve_caption, label_colours, plain_text, plt, save_figure, shared_legend


def _wrapped(label: str) -> str:
    """'score (units)' on two lines, so long axis labels fit beside small panels."""
    return plain_text(label).replace(" (", "\n(", 1)


def _grid(n: int) -> tuple[int, int]:
    cols = min(n, 3)
    return math.ceil(n / cols), cols


def _seed_matrix(rows: pd.DataFrame, x: str, where: str) -> tuple[np.ndarray, np.ndarray]:
    """(x values, seeds x points) over the x values every seed has."""
    wide = rows.pivot_table(index="seed", columns=x, values="score", aggfunc="mean").dropna(axis=1)
    if wide.shape[1] == 0:
        raise OffbenchError(f"{where}: the seeds share no common {x}; cannot average their curves")
    return wide.columns.to_numpy(), wide.to_numpy()


def _draw_mean_band(ax, xs, matrix, colour, label, reps) -> tuple[int, int]:
    """The mean over seeds with its bootstrap band (none for one seed); a curve of one evaluation is a marker with the
    interval as an error bar, since a line through one point draws nothing. Returns (seeds, points) for the caption."""
    mean, low, high = stats.curve_intervals(matrix, reps)
    n = matrix.shape[0]
    text = f"{plain_text(label)} (n={n})"
    if len(xs) == 1:
        error = [[mean[0] - low[0]], [high[0] - mean[0]]] if n > 1 else None
        ax.errorbar(xs, mean, yerr=error, fmt="o", color=colour, capsize=3, label=text)
    else:
        ax.plot(xs, mean, color=colour, label=text, linewidth=1.8)
        if n > 1:
            ax.fill_between(xs, low, high, color=colour, alpha=0.2, linewidth=0)
    return n, len(xs)


def _suptitle(fig, caption: str, width: int) -> None:
    fig.suptitle("\n".join(textwrap.fill(plain_text(line), width) for line in caption.split("\n")), fontsize=11)


def _panels(count: int, width: float, height: float):
    """A grid of `count` panels (unused ones hidden) in a constrained layout, which keeps the suptitle, the axis labels
    and the figure legend clear of one another."""
    nrows, ncols = _grid(count)
    fig, axes = plt.subplots(nrows, ncols, figsize=(width * ncols, height * nrows + 0.6), squeeze=False, layout="constrained")
    for ax in list(axes.flat)[count:]:
        ax.set_visible(False)
    return fig, list(axes.flat)[:count], ncols


def learning_curves_figure(curves: pd.DataFrame, y_label: str, title: str = "", reps: int = stats.BOOTSTRAP_REPS):
    """One panel per dataset, one line per label: evaluation score against gradient update step."""
    if curves.empty:
        raise OffbenchError("no evaluations to plot")
    datasets = list(dict.fromkeys(curves["dataset"]))
    colours = label_colours(list(curves["label"].unique()))
    fig, axes, ncols = _panels(len(datasets), 4.6, 3.4)
    drawn = []
    for ax, dataset in zip(axes, datasets):
        for label, rows in curves.loc[curves["dataset"] == dataset].groupby("label", sort=True):
            xs, matrix = _seed_matrix(rows, "step", f"{label} on {dataset}")
            drawn.append(_draw_mean_band(ax, xs, matrix, colours[str(label)], label, reps))
        ax.set_title(plain_text(dataset), fontsize=10)
        ax.set_xlabel("update step (gradient updates)")
        ax.set_ylabel(_wrapped(y_label), fontsize=8)
        ax.grid(alpha=0.3)
    shared_legend(fig, axes)
    _suptitle(fig, curve_caption("Learning curves", drawn, title), 55 * ncols)
    return fig


def plot_learning_curves(curves: pd.DataFrame, y_label: str, out: str | Path, title: str = "", reps: int = stats.BOOTSTRAP_REPS) -> Path:
    return save_figure(learning_curves_figure(curves, y_label, title, reps), out)


def source_curves(dataset_ids: list[str]) -> dict[str, np.ndarray]:
    """Source-algorithm curves (mean return per episode of the learning histories) of the registered
    learning-history datasets present on this machine."""
    from offbench.data.cards import get_card
    from offbench.data.resolve import is_local, resolve
    from offbench.plotting.histories import learning_curve

    out = {}
    for dataset_id in dataset_ids:
        try:
            if is_local(get_card(dataset_id)):  # never a download or a generation for a figure
                out[dataset_id] = learning_curve(resolve(dataset_id, quiet=True))[1]
        except OffbenchError:  # given by path (no registered copy), or not a learning-history dataset
            continue
    return out


def in_context_figure(
    in_context: pd.DataFrame,
    optimum: dict[str, float] | None = None,
    sources: dict[str, np.ndarray] | None = None,
    title: str = "",
    reps: int = stats.BOOTSTRAP_REPS,
):
    """Return per in-context episode (held-out tasks), with the optimum and the source algorithm as references.

    The source algorithm's curve is its learning history over the same number of episodes, and a
    dotted line marks where its histories end (mean of their last 10% of episodes).
    """
    if in_context.empty:
        raise OffbenchError("no in-context returns to plot (evaluations.jsonl has no in_context_returns)")
    optimum, sources = optimum or {}, sources or {}
    datasets = list(dict.fromkeys(in_context["dataset"]))
    colours = label_colours(list(in_context["label"].unique()))
    fig, axes, ncols = _panels(len(datasets), 5.6, 4.0)
    drawn = []
    for ax, dataset in zip(axes, datasets):
        rows_for_dataset = in_context.loc[in_context["dataset"] == dataset]
        horizon = int(rows_for_dataset["episode"].max())
        for label, rows in rows_for_dataset.groupby("label", sort=True):
            xs, matrix = _seed_matrix(rows, "episode", f"{label} on {dataset}")
            drawn.append(_draw_mean_band(ax, xs, matrix, colours[str(label)], label, reps))
        references = []
        source = sources.get(dataset)
        if source is not None and len(source):
            shown = source[:horizon]
            ax.plot(np.arange(1, len(shown) + 1), shown, color="0.45", linestyle="--", label="source algorithm (its history)")
            tail = source[-max(1, len(source) // 10) :].mean()
            ax.axhline(tail, color="0.45", linestyle=":", label=f"source algorithm, end of history ({len(source)} episodes)")
            references.append(tail)
        if dataset in optimum:
            ax.axhline(optimum[dataset], color="black", linewidth=1.0, label="optimal return")
            references.append(optimum[dataset])
        if references:  # keep reference lines off the frame
            low, high = ax.get_ylim()
            pad = 0.05 * (high - low)
            ax.set_ylim(min(low, min(references) - pad), max(high, max(references) + pad))
        ax.set_title(plain_text(dataset), fontsize=10)
        ax.set_xlabel("in-context episode (held-out tasks)")
        ax.set_ylabel(_wrapped("return (sum of rewards per episode)"), fontsize=8)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
    shared_legend(fig, axes)
    _suptitle(fig, curve_caption("In-context improvement", drawn, title), 65 * ncols)
    return fig


def plot_in_context(
    in_context: pd.DataFrame,
    out: str | Path,
    optimum: dict[str, float] | None = None,
    sources: dict[str, np.ndarray] | None = None,
    title: str = "",
    reps: int = stats.BOOTSTRAP_REPS,
) -> Path:
    return save_figure(in_context_figure(in_context, optimum, sources, title, reps), out)
