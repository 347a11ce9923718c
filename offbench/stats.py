"""Headline metrics and their interval estimates with rliable (Agarwal et al., 2021, "Deep RL at the Edge of
the Statistical Precipice"). Below both the leaderboard and the figures, which read scores through here.

Every interval is a 95% percentile interval of a stratified bootstrap over seeds (runs), which is
rliable's default; with one dataset it is the ordinary bootstrap over seeds. rliable draws its
resamples from NumPy's global generator (`StratifiedBootstrap.update_indices` calls
`np.random.choice`), so `_seeded` fixes that generator for the call and restores it after: the same
entries always give the same table.

Where a metric is lower-is-better (regret), every statistic that has a direction (probability of
improvement, performance profiles, the best evaluation) is taken on the negated scores, so "X beats Y"
always means X is the better run; means, medians, IQMs and their intervals do not depend on direction.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from offbench.errors import require
from offbench.evaluation.results import LOWER_IS_BETTER

if TYPE_CHECKING:  # for annotations only: commands that import this module (every CLI call) need not load pandas
    import pandas as pd

CONFIDENCE = 0.95
BOOTSTRAP_SEED = 0
BOOTSTRAP_REPS = 2000  # resamples of every interval unless a benchmark says otherwise (rliable's examples use 2000)
AGGREGATES = ("mean", "median", "IQM")


@dataclass(frozen=True)
class Metric:
    """A headline number: which evaluations.jsonl field it reads, how to label it, and which way is better."""

    name: str
    field: str
    label: str  # axis and table label, units included
    normalised: bool  # comparable across datasets (so aggregates across datasets make sense)

    @property
    def lower_is_better(self) -> bool:
        """Whether a smaller number is the better run (the run directory contract says which fields are)."""
        return self.field in LOWER_IS_BETTER

    @property
    def sign(self) -> float:
        """+1 or -1: sign * score grows as runs get better."""
        return -1.0 if self.lower_is_better else 1.0


METRICS = {
    "normalized_score": Metric("normalized_score", "normalized_score", "normalised score (0 = random, 100 = expert reference)", True),
    "success_rate": Metric("success_rate", "success_rate", "success rate (fraction of evaluation episodes)", True),
    "mean_return": Metric("mean_return", "mean_return", "return (undiscounted sum of rewards per episode)", False),
    "in_context_return": Metric("in_context_return", "mean_return", "return in the last in-context episode (sum of rewards)", False),
    "regret": Metric("regret", "regret", "cumulative regret (optimal minus expected return, summed over the in-context episodes)", False),
}


def score_matrices(scores: pd.DataFrame, datasets: list[str] | tuple[str, ...]) -> dict[str, np.ndarray]:
    """Per row (label) that has every dataset, the (seeds x datasets) matrix rliable's aggregates take; where
    seed counts differ between datasets, the row's lowest-numbered n seeds of each (n = its smallest count)."""
    out = {}
    for label, rows in scores.groupby("label", sort=True):
        per_dataset = [rows.loc[rows["dataset"] == d].sort_values("seed")["score"].to_numpy() for d in datasets]
        if all(len(v) for v in per_dataset):
            n = min(len(v) for v in per_dataset)
            out[str(label)] = np.stack([v[:n] for v in per_dataset], axis=1)
    return out


def _rliable():
    require("rliable", "stats")
    from rliable import library, metrics

    return library, metrics


@contextlib.contextmanager
def _seeded(seed: int = BOOTSTRAP_SEED) -> Iterator[None]:
    state = np.random.get_state()
    np.random.seed(seed)
    try:
        yield
    finally:
        np.random.set_state(state)


def cell_intervals(cells: dict[str, np.ndarray], reps: int) -> dict[str, tuple[float, float, float]]:
    """Per cell (scores of one baseline on one dataset, one per seed): (mean, low, high); no interval for one seed."""
    library, metrics = _rliable()
    out: dict[str, tuple[float, float, float]] = {}
    several = {key: np.asarray(v, float).reshape(-1, 1) for key, v in cells.items() if len(v) > 1}
    with _seeded():
        points, intervals = (
            library.get_interval_estimates(
                several, lambda s: np.array([metrics.aggregate_mean(s)]), reps=reps, confidence_interval_size=CONFIDENCE
            )
            if several
            else ({}, {})
        )
    for key, values in cells.items():
        if key in several:
            out[key] = (float(points[key][0]), float(intervals[key][0, 0]), float(intervals[key][1, 0]))
        else:
            out[key] = (float(np.mean(values)), float("nan"), float("nan"))
    return out


def aggregate_intervals(score_matrices: dict[str, np.ndarray], reps: int) -> dict[str, dict[str, tuple[float, float, float]]]:
    """Per row, a (runs x datasets) matrix -> {aggregate: (estimate, low, high)} for mean, median and IQM."""
    library, metrics = _rliable()

    def aggregates(scores: np.ndarray) -> np.ndarray:
        return np.array([metrics.aggregate_mean(scores), metrics.aggregate_median(scores), metrics.aggregate_iqm(scores)])

    with _seeded():
        points, intervals = library.get_interval_estimates(score_matrices, aggregates, reps=reps, confidence_interval_size=CONFIDENCE)
    return {
        label: {
            name: (float(points[label][i]), float(intervals[label][0, i]), float(intervals[label][1, i]))
            for i, name in enumerate(AGGREGATES)
        }
        for label in score_matrices
    }


def improvement_probabilities(
    score_matrices: dict[str, np.ndarray], reps: int, lower_is_better: bool = False
) -> dict[tuple[str, str], tuple[float, float, float]]:
    """P(X better than Y) for every ordered pair of rows, averaged over datasets, with its interval
    (better = higher, or lower where `lower_is_better`).

    rliable's estimate is a Mann-Whitney U statistic in which ties count one half, so
    P(Y > X) = 1 - P(X > Y) holds exactly; each unordered pair is bootstrapped once and mirrored.
    """
    library, _ = _rliable()
    sign = -1.0 if lower_is_better else 1.0
    labels = list(score_matrices)
    pairs = {(x, y): (sign * score_matrices[x], sign * score_matrices[y]) for i, x in enumerate(labels) for y in labels[i + 1 :]}
    if not pairs:
        return {}
    keyed = {f"{i}": pair for i, pair in enumerate(pairs.values())}
    with _seeded():
        points, intervals = library.get_interval_estimates(
            keyed, probability_of_improvement, reps=reps, confidence_interval_size=CONFIDENCE
        )
    out: dict[tuple[str, str], tuple[float, float, float]] = {}
    for key, (x, y) in zip(keyed, pairs):
        p, low, high = float(points[key]), float(intervals[key][0, 0]), float(intervals[key][1, 0])
        out[(x, y)] = (p, low, high)
        out[(y, x)] = (1.0 - p, 1.0 - high, 1.0 - low)
    return out


def probability_of_improvement(scores_x: np.ndarray, scores_y: np.ndarray) -> float:
    """rliable's `probability_of_improvement` (per task the Mann-Whitney U of X over Y, ties one half, over
    runs_x * runs_y; then the mean over tasks) by counting all pairs at once: the same numbers, where rliable calls
    scipy's `mannwhitneyu` once per task and bootstrap resample (most of a leaderboard render's minutes)."""
    x, y = np.asarray(scores_x), np.asarray(scores_y)
    above, tied = x[:, None, :] > y[None, :, :], x[:, None, :] == y[None, :, :]  # (runs_x, runs_y, tasks)
    u = above.sum(axis=(0, 1)) + 0.5 * tied.sum(axis=(0, 1))
    return float(np.mean(u / (len(x) * len(y))))


def performance_profiles(score_matrices: dict[str, np.ndarray], taus: np.ndarray, reps: int, lower_is_better: bool = False):
    """Fraction of runs scoring better than each threshold tau (above it; below it where `lower_is_better`),
    with intervals (rliable's score distributions)."""
    library, _ = _rliable()
    sign = -1.0 if lower_is_better else 1.0
    with _seeded():
        return library.create_performance_profile(
            {k: sign * v for k, v in score_matrices.items()},
            sign * np.asarray(taus),
            reps=reps,
            confidence_interval_size=CONFIDENCE,
            custom_profile_func=score_distribution,
        )


def score_distribution(scores: np.ndarray, taus: np.ndarray) -> np.ndarray:
    """rliable's `score_distributions` (the fraction of all scores above each tau) for all taus in one comparison:
    the same numbers, where rliable's `np.vectorize` makes one Python call per tau and bootstrap resample (minutes for
    a leaderboard of a few dozen entries on this machine)."""
    return (np.asarray(scores).reshape(-1, 1) > np.asarray(taus).reshape(1, -1)).mean(axis=0)


def curve_intervals(curves: np.ndarray, reps: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(seeds x points) -> mean per point with its bootstrap interval over seeds; no interval for one seed."""
    library, _ = _rliable()
    curves = np.asarray(curves, float)
    mean = curves.mean(axis=0)
    if curves.shape[0] < 2:
        return mean, np.full_like(mean, np.nan), np.full_like(mean, np.nan)
    with _seeded():
        _, intervals = library.get_interval_estimates(
            {"curve": curves[:, None, :]}, lambda s: s.mean(axis=(0, 1)), reps=reps, confidence_interval_size=CONFIDENCE
        )
    return mean, intervals["curve"][0], intervals["curve"][1]
