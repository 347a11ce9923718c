"""Interval estimates with rliable (Agarwal et al., 2021, "Deep RL at the Edge of the Statistical Precipice").

Every interval is a 95% percentile interval of a stratified bootstrap over seeds (runs), which is
rliable's default; with one dataset it is the ordinary bootstrap over seeds. rliable draws its
resamples from NumPy's global generator (`StratifiedBootstrap.update_indices` calls
`np.random.choice`), so `_seeded` fixes that generator for the call and restores it after: the same
entries always give the same table.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import numpy as np

from offbench.errors import require

CONFIDENCE = 0.95
BOOTSTRAP_SEED = 0
AGGREGATES = ("mean", "median", "IQM")


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
        points, intervals = library.get_interval_estimates(
            several, lambda s: np.array([metrics.aggregate_mean(s)]), reps=reps, confidence_interval_size=CONFIDENCE
        ) if several else ({}, {})
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
        points, intervals = library.get_interval_estimates(
            score_matrices, aggregates, reps=reps, confidence_interval_size=CONFIDENCE
        )
    return {
        label: {name: (float(points[label][i]), float(intervals[label][0, i]), float(intervals[label][1, i]))
                for i, name in enumerate(AGGREGATES)}
        for label in score_matrices
    }


def improvement_probabilities(score_matrices: dict[str, np.ndarray], reps: int) -> dict[tuple[str, str], tuple[float, float, float]]:
    """P(X > Y) for every ordered pair of rows, averaged over datasets, with its interval.

    rliable's estimate is a Mann-Whitney U statistic in which ties count one half, so
    P(Y > X) = 1 - P(X > Y) holds exactly; each unordered pair is bootstrapped once and mirrored.
    """
    library, metrics = _rliable()
    labels = list(score_matrices)
    pairs = {(x, y): (score_matrices[x], score_matrices[y]) for i, x in enumerate(labels) for y in labels[i + 1:]}
    if not pairs:
        return {}
    keyed = {f"{i}": pair for i, pair in enumerate(pairs.values())}
    with _seeded():
        points, intervals = library.get_interval_estimates(
            keyed, metrics.probability_of_improvement, reps=reps, confidence_interval_size=CONFIDENCE
        )
    out: dict[tuple[str, str], tuple[float, float, float]] = {}
    for key, (x, y) in zip(keyed, pairs):
        p, low, high = float(points[key]), float(intervals[key][0, 0]), float(intervals[key][1, 0])
        out[(x, y)] = (p, low, high)
        out[(y, x)] = (1.0 - p, 1.0 - high, 1.0 - low)
    return out


def performance_profiles(score_matrices: dict[str, np.ndarray], taus: np.ndarray, reps: int):
    """Fraction of runs scoring above each threshold tau, with intervals (rliable's score distributions)."""
    library, _ = _rliable()
    with _seeded():
        return library.create_performance_profile(score_matrices, taus, reps=reps, confidence_interval_size=CONFIDENCE)


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
