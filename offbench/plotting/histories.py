"""The source algorithm's learning curve in a learning-history dataset: did the histories learn?"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from offbench.errors import OffbenchError
from offbench.utils import atomic_write_bytes

HISTORY_SAMPLE_TASKS = 64  # an XLand file's curve: the histories of this many tasks (seeded), not 10,000 tasks' 60 GB


def learning_curve(store) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """(episode index, mean return, 95% half-width, histories) across all histories, per episode index.

    The interval is the normal approximation 1.96 x standard error of the mean over histories. An XLand file
    (read in place) gives the histories of `HISTORY_SAMPLE_TASKS` tasks drawn with seed 0 (`history_sample`)."""
    if store.read_in_place:
        episode_index, returns = store.history_episode_returns(history_sample(store))
    elif "episode_in_history" not in store.columns:
        raise OffbenchError(f"{store.path or 'dataset'}: no episode_in_history column; not a learning-history dataset")
    else:
        episode_index = np.asarray(store.columns["episode_in_history"])[store.episode_starts[:-1]]
        returns = store.episode_returns()
    count = np.bincount(episode_index)
    mean = np.bincount(episode_index, returns) / np.maximum(count, 1)
    squares = np.bincount(episode_index, (returns - mean[episode_index]) ** 2)
    std = np.sqrt(squares / np.maximum(count - 1, 1))
    half_width = 1.96 * std / np.sqrt(np.maximum(count, 1))
    return np.arange(len(count)), mean, half_width, int(count[0])


def history_sample(store) -> np.ndarray:
    """The task groups of an XLand file whose histories its learning curve averages (all, if there are few)."""
    tasks = store.num_tasks
    return (
        np.arange(tasks)
        if tasks <= HISTORY_SAMPLE_TASKS
        else np.sort(np.random.default_rng(0).choice(tasks, HISTORY_SAMPLE_TASKS, replace=False))
    )


def recorded_optimal_return(card: dict[str, Any]) -> float | None:
    """The mean optimal return of the histories' tasks, as the generator recorded it in the card's [learning] table
    when it made them (None where the card has none: an XLand file, a dataset from elsewhere)."""
    value = card.get("learning", {}).get("optimal_return")
    return None if value is None else float(value)


def learning_histories_figure(store, card: Any = None) -> Figure:
    """Mean return per episode of the learning histories with a 95% interval, and the optimal return the generator
    recorded. `card` (default: the file's own) names the dataset; the file's [learning] table is read either way."""
    stored = dict(store.card or {})
    card = stored if card is None else {**stored, **(card.to_dict() if hasattr(card, "to_dict") else dict(card))}
    episodes, mean, half_width, histories = learning_curve(store)
    optimal = recorded_optimal_return(card)

    fig = Figure(figsize=(6.4, 4.0), layout="constrained")
    ax = fig.add_subplot()
    ax.plot(episodes, mean, color="tab:blue", linewidth=1.5, label=f"mean over {histories} histories")
    ax.fill_between(
        episodes,
        mean - half_width,
        mean + half_width,
        color="tab:blue",
        alpha=0.25,
        linewidth=0,
        label="95% interval of the mean (1.96 x s.e.)",
    )
    if optimal is not None:
        ax.axhline(optimal, color="black", linestyle="--", linewidth=1.2, label=f"optimal return ({optimal:.3g})")
    algo = card.get("source", {}).get("recipe", {}).get("params", {}).get("algo", "")
    sampled = f"{len(history_sample(store))} of {store.num_tasks:,} tasks" if store.read_in_place else ""
    detail = ", ".join(part for part in (algo, sampled) if part)
    ax.set_title(f"{card.get('id', store.path)}{f' ({detail})' if detail else ''}", fontsize=10)
    ax.set_xlabel("episode in learning history")
    ax.set_ylabel("episode return")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    return fig


def plot_learning_histories(store, out_path: str | Path, card: Any = None) -> Path:
    out_path = Path(out_path)
    buffer = io.BytesIO()
    learning_histories_figure(store, card).savefig(buffer, format=out_path.suffix.lstrip(".") or "png", dpi=120)
    return atomic_write_bytes(out_path, buffer.getvalue())
