"""The roll-up: entries (or previewed runs) -> tidy tables -> per-cell and aggregate statistics.

One row per label (a baseline, or a named variant), one column per dataset. A cell is the mean over
seeds of the benchmark's score (final or best, never mixed) with a 95% bootstrap interval and its
seed count. Aggregates across datasets (mean, median, IQM, probability of improvement) use the rows
that have every dataset; where seed counts differ between datasets, a row's lowest-numbered
`n` seeds of each dataset are used (n = its smallest seed count), since rliable's stratified
bootstrap takes a (runs x datasets) matrix.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from offbench.leaderboard import stats
from offbench.leaderboard.spec import BenchmarkSpec


@dataclass
class Board:
    """Everything the statistics and figures need, as tidy DataFrames."""

    spec: BenchmarkSpec
    scores: pd.DataFrame  # label, dataset, seed, score, run_id, entry
    curves: pd.DataFrame  # label, dataset, seed, step, score
    in_context: pd.DataFrame  # label, dataset, seed, episode, score
    optimum: dict[str, float]  # dataset -> mean optimal return in evaluation (in-context benchmarks)
    entries: list[dict[str, Any]] = field(default_factory=list)  # summary of each entry, for tracing


def board_from_entries(spec: BenchmarkSpec, entries: list[tuple[Path | None, dict[str, Any]]]) -> Board:
    scores, curves, in_context, optimum, summaries = [], [], [], {}, []
    for path, entry in entries:
        label, dataset = entry["label"], entry["dataset"]["id"]
        name = path.name if path else "(preview)"
        for run in entry["runs"]:
            scores.append({"label": label, "dataset": dataset, "seed": run["seed"], "score": run["score"],
                           "run_id": run["run_id"], "entry": name})
            for step, value in zip(run["curve"]["step"], run["curve"]["score"]):
                curves.append({"label": label, "dataset": dataset, "seed": run["seed"], "step": step, "score": value})
            for episode, value in enumerate(run.get("in_context_returns") or [], 1):
                in_context.append({"label": label, "dataset": dataset, "seed": run["seed"], "episode": episode, "score": value})
            if "optimal_return" in run:
                optimum[dataset] = run["optimal_return"]
        commits = sorted({str(r["code"].get("git_commit") or r["code"].get("version")) for r in entry["runs"]})
        summaries.append({"entry": name, "label": label, "baseline": entry["baseline"], "dataset": dataset,
                          "seeds": ", ".join(str(r["seed"]) for r in entry["runs"]), "code": ", ".join(c[:12] for c in commits),
                          "config_sha256": entry["config_sha256"][:12], "submitted_at": entry["submitted_at"]})
    columns = {
        "scores": ["label", "dataset", "seed", "score", "run_id", "entry"],
        "curves": ["label", "dataset", "seed", "step", "score"],
        "in_context": ["label", "dataset", "seed", "episode", "score"],
    }
    return Board(
        spec=spec,
        scores=pd.DataFrame(scores, columns=columns["scores"]),
        curves=pd.DataFrame(curves, columns=columns["curves"]),
        in_context=pd.DataFrame(in_context, columns=columns["in_context"]),
        optimum=optimum,
        entries=summaries,
    )


def score_matrices(scores: pd.DataFrame, datasets: list[str] | tuple[str, ...]) -> dict[str, np.ndarray]:
    """Per complete row, the (seeds x datasets) matrix rliable's aggregates take (see module docstring)."""
    out = {}
    for label, rows in scores.groupby("label", sort=True):
        per_dataset = [rows[rows["dataset"] == d].sort_values("seed")["score"].to_numpy() for d in datasets]
        if all(len(v) for v in per_dataset):
            n = min(len(v) for v in per_dataset)
            out[str(label)] = np.stack([v[:n] for v in per_dataset], axis=1)
    return out


def aggregates_meaningful(spec: BenchmarkSpec) -> bool:
    """Raw returns of different datasets live on different scales: aggregate them only for one dataset."""
    return spec.metric.normalised or len(spec.datasets) == 1


@dataclass
class Results:
    cells: pd.DataFrame  # label, dataset, mean, low, high, seeds
    aggregates: pd.DataFrame  # label, aggregate, estimate, low, high, seeds, datasets
    improvement: pd.DataFrame  # x, y, probability, low, high


def compute_results(board: Board) -> Results:
    reps = board.spec.bootstrap_reps
    groups = {(str(label), str(dataset)): rows["score"].to_numpy()
              for (label, dataset), rows in board.scores.groupby(["label", "dataset"], sort=True)}
    keyed = {f"{label}\x00{dataset}": values for (label, dataset), values in groups.items()}
    estimates = stats.cell_intervals(keyed, reps) if keyed else {}
    cells = pd.DataFrame(
        [{"label": label, "dataset": dataset, "mean": estimates[f"{label}\x00{dataset}"][0],
          "low": estimates[f"{label}\x00{dataset}"][1], "high": estimates[f"{label}\x00{dataset}"][2],
          "seeds": len(values)} for (label, dataset), values in groups.items()],
        columns=["label", "dataset", "mean", "low", "high", "seeds"],
    )
    matrices = score_matrices(board.scores, board.spec.datasets) if aggregates_meaningful(board.spec) else {}
    aggregate_rows, improvement_rows = [], []
    if matrices:
        for label, by_name in stats.aggregate_intervals(matrices, reps).items():
            for name, (estimate, low, high) in by_name.items():
                aggregate_rows.append({"label": label, "aggregate": name, "estimate": estimate, "low": low, "high": high,
                                       "seeds": matrices[label].shape[0], "datasets": matrices[label].shape[1]})
        for (x, y), (p, low, high) in stats.improvement_probabilities(matrices, reps).items():
            improvement_rows.append({"x": x, "y": y, "probability": p, "low": low, "high": high})
    return Results(
        cells=cells,
        aggregates=pd.DataFrame(aggregate_rows, columns=["label", "aggregate", "estimate", "low", "high", "seeds", "datasets"]),
        improvement=pd.DataFrame(improvement_rows, columns=["x", "y", "probability", "low", "high"]),
    )


def format_estimate(mean: float, low: float, high: float, digits: int = 1) -> str:
    if math.isnan(low):
        return f"{mean:.{digits}f}"
    return f"{mean:.{digits}f} [{low:.{digits}f}, {high:.{digits}f}]"


def _digits(spec: BenchmarkSpec) -> int:
    return 2 if spec.metric.name == "success_rate" else 1


def main_table(board: Board, results: Results) -> pd.DataFrame:
    """Display table: one row per label, a cell per dataset 'mean [low, high] (n=seeds)', then the aggregates."""
    digits = _digits(board.spec)
    labels = sorted(results.cells["label"].unique())
    rows = []
    for label in labels:
        row: dict[str, str] = {"baseline": label}
        for dataset in board.spec.datasets:
            cell = results.cells[(results.cells["label"] == label) & (results.cells["dataset"] == dataset)]
            if cell.empty:
                row[dataset] = "—"
            else:
                c = cell.iloc[0]
                row[dataset] = f"{format_estimate(c['mean'], c['low'], c['high'], digits)} (n={c['seeds']})"
        if aggregates_meaningful(board.spec) and len(board.spec.datasets) > 1:
            for name in stats.AGGREGATES:
                agg = results.aggregates[(results.aggregates["label"] == label) & (results.aggregates["aggregate"] == name)]
                row[name] = "—" if agg.empty else format_estimate(*agg.iloc[0][["estimate", "low", "high"]], digits)
        rows.append(row)
    columns = ["baseline", *board.spec.datasets]
    if aggregates_meaningful(board.spec) and len(board.spec.datasets) > 1:
        columns += list(stats.AGGREGATES)
    return pd.DataFrame(rows, columns=columns)


def improvement_table(results: Results) -> pd.DataFrame:
    """P(row > column) with its interval: the chance a run of one baseline beats a run of the other."""
    if results.improvement.empty:
        return pd.DataFrame()
    labels = sorted(set(results.improvement["x"]))
    table = pd.DataFrame("—", index=labels, columns=labels)
    for _, r in results.improvement.iterrows():
        table.loc[r["x"], r["y"]] = format_estimate(r["probability"], r["low"], r["high"], 2)
    table.index.name = "P(row > column)"
    return table.reset_index()


def results_json(board: Board, results: Results) -> dict[str, Any]:
    """Machine-readable roll-up (what `build` writes): the spec, the cells, the aggregates, the entries."""
    spec = board.spec

    def records(frame: pd.DataFrame) -> list[dict[str, Any]]:
        return [{k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in row.items()}
                for row in frame.to_dict(orient="records")]

    return {
        "benchmark": spec.name,
        "metric": spec.metric.name,
        "score": spec.score,
        "cell_value": f"mean over seeds of the {spec.score_label}, {int(stats.CONFIDENCE * 100)}% stratified-bootstrap interval",
        "datasets": list(spec.datasets),
        "protocol": spec.protocol,
        "min_seeds": spec.min_seeds,
        "bootstrap_reps": spec.bootstrap_reps,
        "cells": records(results.cells),
        "aggregates": records(results.aggregates),
        "probability_of_improvement": records(results.improvement),
        "entries": board.entries,
    }
