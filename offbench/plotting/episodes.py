"""A dataset's episodes at a glance: how their returns and their lengths are distributed (`offbench plot DATASET`
for data that are not learning histories: offline and multi-task cards)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from offbench.errors import OffbenchError
from offbench.plotting.figures import plain_text, plt, save_figure


def episodes_figure(store, card: dict[str, Any]):
    """Two panels: the histogram of episode returns (with their mean and median marked) and that of episode lengths."""
    if store.num_episodes == 0:
        raise OffbenchError(f"{store.path or card.get('id', 'dataset')}: no episodes to plot")
    returns, lengths = np.asarray(store.episode_returns(), float), np.asarray(store.episode_lengths)
    fig, (by_return, by_length) = plt.subplots(1, 2, figsize=(9.6, 3.6), layout="constrained")
    by_return.hist(returns, bins=min(50, max(1, len(np.unique(returns)))), color="tab:blue", alpha=0.8)
    by_return.axvline(returns.mean(), color="black", linewidth=1.2, label=f"mean {returns.mean():.4g}")
    by_return.axvline(np.median(returns), color="black", linestyle="--", linewidth=1.2, label=f"median {np.median(returns):.4g}")
    by_return.set_xlabel("episode return (sum of rewards)")
    by_return.set_ylabel("episodes")
    by_return.legend(fontsize=8)
    by_length.hist(lengths, bins=min(50, max(1, len(np.unique(lengths)))), color="tab:green", alpha=0.8)
    by_length.set_xlabel(f"episode length (steps; {lengths.min()} to {lengths.max()})")
    by_length.set_ylabel("episodes")
    for ax in (by_return, by_length):
        ax.grid(alpha=0.3)
    fig.suptitle(
        plain_text(f"{card.get('id', store.path)}: {store.num_episodes:,} episodes, {store.num_transitions:,} transitions"), fontsize=11
    )
    return fig


def plot_episodes(store, out: str | Path, card: dict[str, Any]) -> Path:
    return save_figure(episodes_figure(store, card), out)
