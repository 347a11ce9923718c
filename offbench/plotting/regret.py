"""Bandit regret curves: the cumulative pseudo-regret per pull of in-context runs (AD, DPT), beside reference
algorithms' curves on the same tasks (multi-armed bandits: UCB1, Thompson sampling, uniform random; contextual
bandits: LinUCB, linear Thompson sampling, uniform random; computed by `offbench.generators.references`, this module
only draws them).

Pseudo-regret of a pull = the best arm's mean minus the pulled arm's mean, both against the pull's context on a
contextual bandit (the in-context protocol's `in_context_regret` is its running sum, averaged over tasks).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.ticker import MaxNLocator

from offbench.errors import OffbenchError
from offbench.plotting.curves import _draw_mean_band, _panels, _seed_matrix, _suptitle
from offbench.plotting.figures import curve_caption, label_colours, save_figure, shared_legend


def regret_figure(regret: pd.DataFrame, references: dict[str, dict[str, np.ndarray]] | None = None, title: str = "", reps: int = 2000):
    """Cumulative regret per pull (frame: label, dataset, seed, pull, score), mean over seeds with a 95% bootstrap
    band, one panel per dataset, with the reference algorithms' curves on the same tasks."""
    if regret.empty:
        raise OffbenchError(
            "no in-context regret to plot (evaluations.jsonl has no in_context_regret: it needs the tasks' "
            "optimal return, which XLand rulesets lack); plot the returns with --kind in-context"
        )
    references = references or {}
    datasets = list(dict.fromkeys(regret["dataset"]))
    reference_names = sorted({name for curves in references.values() for name in curves})
    colours = label_colours(sorted(regret["label"].unique()) + reference_names)
    fig, axes, ncols = _panels(len(datasets), 5.6, 4.0)
    drawn = []
    for ax, dataset in zip(axes, datasets):
        for label, rows in regret.loc[regret["dataset"] == dataset].groupby("label", sort=True):
            xs, matrix = _seed_matrix(rows, "pull", f"{label} on {dataset}")
            drawn.append(_draw_mean_band(ax, xs, matrix, colours[str(label)], label, reps))
        for name, curve in sorted(references.get(dataset, {}).items()):
            ax.plot(np.arange(1, len(curve) + 1), curve, color=colours[name], linestyle="--", linewidth=1.2, label=name)
        ax.set_title(dataset, fontsize=10)
        ax.set_xlabel("pull (in-context episode, held-out tasks)")
        ax.set_ylabel("cumulative regret\n(best arm's mean - pulled arm's mean)", fontsize=8)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
    shared_legend(fig, axes)
    _suptitle(fig, curve_caption("Bandit regret, mean over tasks", drawn, title), 65 * ncols)
    return fig


def plot_regret(
    regret: pd.DataFrame, out: str | Path, references: dict[str, dict[str, np.ndarray]] | None = None, title: str = "", reps: int = 2000
) -> Path:
    return save_figure(regret_figure(regret, references, title, reps), out)
