"""The roll-up: entries (or previewed runs) -> tidy tables -> per-cell and aggregate statistics.

One row per label (a baseline, or a named variant), one column per dataset. A cell is the mean over
seeds of the benchmark's score (final or best, never mixed) with a 95% bootstrap interval and its
seed count. Aggregates across datasets (mean, median, IQM, probability of improvement) use the rows
that have every dataset; where seed counts differ between datasets, a row's lowest-numbered
`n` seeds of each dataset are used (n = its smallest seed count), since rliable's stratified
bootstrap takes a (runs x datasets) matrix. Rows are ranked best first (by the mean aggregate, or the one
dataset's cell; lowest first where the metric is lower-is-better); rows with no aggregate are grouped by
their first dataset column and ranked within it. Multi-task entries add a per-task
table (mean over seeds of each task's score) and, beside each dataset's cell, the mean of each run's best
evaluation during training, labelled as not ranked: some papers report best, the board ranks by its own score.
Reported rows (published numbers, `[[reported]]` in benchmark.toml) and the data's own row (`[behaviour]`: the
behaviour policy's score) are shown beside ours and take no part in any statistic.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from offbench import stats
from offbench.leaderboard.spec import BenchmarkSpec
from offbench.stats import score_matrices


@dataclass
class Board:
    """Everything the statistics and figures need, as tidy DataFrames."""

    spec: BenchmarkSpec
    scores: pd.DataFrame  # label, dataset, seed, score, best (the best point of the run's curve), run_id, entry
    curves: pd.DataFrame  # label, dataset, seed, step, seconds (step * wall_time_s / steps; NaN without a wall time), score
    in_context: pd.DataFrame  # label, dataset, seed, episode, score
    optimum: dict[str, float]  # dataset -> mean optimal return in evaluation (in-context benchmarks)
    per_task: pd.DataFrame  # label, dataset, seed, task, score (multi-task entries)
    entries: list[dict[str, Any]] = field(default_factory=list)  # summary of each entry, for tracing
    methods: dict[str, str] = field(default_factory=dict)  # label -> where its method comes from (entries.method_summary)
    verified: dict[str, str] = field(default_factory=dict)  # label -> "yes" | "partly" | "no": runs replayed from checkpoints
    multi_task: bool = False  # the entries were evaluated under the multi-task protocol (one policy, every task of a suite)


def board_from_entries(spec: BenchmarkSpec, entries: list[tuple[Path | None, dict[str, Any]]]) -> Board:
    from offbench.leaderboard.entries import entry_provenance, entry_verified, method_summary

    scores, curves, in_context, per_task, optimum, summaries = [], [], [], [], {}, []
    methods: dict[str, str] = {}
    verified: dict[str, set[bool]] = {}
    sign = spec.metric.sign
    for path, entry in entries:
        label, dataset = entry["label"], entry["dataset"]["id"]
        name = path.name if path else "(preview)"
        for run in entry["runs"]:
            best = sign * max(sign * value for value in run["curve"]["score"])  # every evaluation, where a run has at most 64
            scores.append(
                {
                    "label": label,
                    "dataset": dataset,
                    "seed": run["seed"],
                    "score": run["score"],
                    "best": best,
                    "run_id": run["run_id"],
                    "entry": name,
                }
            )
            rate = run["wall_time_s"] / run["steps"] if run.get("wall_time_s") and run["steps"] else math.nan  # seconds per update
            for step, value in zip(run["curve"]["step"], run["curve"]["score"]):
                curves.append(
                    {"label": label, "dataset": dataset, "seed": run["seed"], "step": step, "seconds": step * rate, "score": value}
                )
            for episode, value in enumerate(run.get("in_context_returns") or [], 1):
                in_context.append({"label": label, "dataset": dataset, "seed": run["seed"], "episode": episode, "score": value})
            for task in run.get("per_task") or []:
                per_task.append({"label": label, "dataset": dataset, "seed": run["seed"], "task": task["task"], "score": task["score"]})
            if "optimal_return" in run:
                optimum[dataset] = run["optimal_return"]
        commits = sorted({str(r["code"].get("git_commit") or r["code"].get("version")) for r in entry["runs"]})
        methods[label] = method_summary(entry)
        verified.setdefault(label, set()).add(entry_verified(entry))
        summaries.append(
            {
                "entry": name,
                "label": label,
                "baseline": entry["baseline"],
                "method": methods[label],
                "verified": "yes" if entry_verified(entry) else "no",
                "dataset": dataset,
                "seeds": ", ".join(str(r["seed"]) for r in entry["runs"]),
                "code": ", ".join(c[:12] for c in commits),
                "provenance": entry_provenance(entry),
                "config_sha256": entry["config_sha256"][:12],
                "submitted_at": entry["submitted_at"],
            }
        )
    columns = {
        "scores": ["label", "dataset", "seed", "score", "best", "run_id", "entry"],
        "curves": ["label", "dataset", "seed", "step", "seconds", "score"],
        "in_context": ["label", "dataset", "seed", "episode", "score"],
        "per_task": ["label", "dataset", "seed", "task", "score"],
    }
    return Board(
        spec=spec,
        scores=pd.DataFrame(scores, columns=columns["scores"]),
        curves=pd.DataFrame(curves, columns=columns["curves"]),
        in_context=pd.DataFrame(in_context, columns=columns["in_context"]),
        optimum=optimum,
        per_task=pd.DataFrame(per_task, columns=columns["per_task"]),
        entries=summaries,
        methods=methods,
        verified={label: "yes" if flags == {True} else "no" if flags == {False} else "partly" for label, flags in verified.items()},
        multi_task=any(entry["evaluation"].get("protocol") == "multi-task" for _, entry in entries),
    )


def aggregates_meaningful(spec: BenchmarkSpec) -> bool:
    """Raw returns of different datasets live on different scales: aggregate them only for one dataset."""
    return spec.metric.normalised or len(spec.datasets) == 1


@dataclass
class Results:
    cells: pd.DataFrame  # label, dataset, mean, low, high, seeds
    aggregates: pd.DataFrame  # label, aggregate, estimate, low, high, seeds, datasets
    improvement: pd.DataFrame  # x, y, probability (that x is the better run), low, high
    per_task: pd.DataFrame  # label, dataset, task, mean, seeds


def compute_results(board: Board) -> Results:
    reps = board.spec.bootstrap_reps
    groups = {
        (str(label), str(dataset)): rows["score"].to_numpy()
        for (label, dataset), rows in board.scores.groupby(["label", "dataset"], sort=True)
    }
    keyed = {f"{label}\x00{dataset}": values for (label, dataset), values in groups.items()}
    estimates = stats.cell_intervals(keyed, reps) if keyed else {}
    cells = pd.DataFrame(
        [
            {
                "label": label,
                "dataset": dataset,
                "mean": estimates[f"{label}\x00{dataset}"][0],
                "low": estimates[f"{label}\x00{dataset}"][1],
                "high": estimates[f"{label}\x00{dataset}"][2],
                "seeds": len(values),
            }
            for (label, dataset), values in groups.items()
        ],
        columns=["label", "dataset", "mean", "low", "high", "seeds"],
    )
    matrices = score_matrices(board.scores, board.spec.datasets) if aggregates_meaningful(board.spec) else {}
    aggregate_rows, improvement_rows = [], []
    if matrices:
        for label, by_name in stats.aggregate_intervals(matrices, reps).items():
            for name, (estimate, low, high) in by_name.items():
                aggregate_rows.append(
                    {
                        "label": label,
                        "aggregate": name,
                        "estimate": estimate,
                        "low": low,
                        "high": high,
                        "seeds": matrices[label].shape[0],
                        "datasets": matrices[label].shape[1],
                    }
                )
        lower = board.spec.metric.lower_is_better
        for (x, y), (p, low, high) in stats.improvement_probabilities(matrices, reps, lower_is_better=lower).items():
            improvement_rows.append({"x": x, "y": y, "probability": p, "low": low, "high": high})
    return Results(
        cells=cells,
        aggregates=pd.DataFrame(aggregate_rows, columns=["label", "aggregate", "estimate", "low", "high", "seeds", "datasets"]),
        improvement=pd.DataFrame(improvement_rows, columns=["x", "y", "probability", "low", "high"]),
        per_task=_per_task_cells(board.per_task),
    )


def _per_task_cells(per_task: pd.DataFrame) -> pd.DataFrame:
    """Mean over seeds per (label, dataset, task), tasks in the order the entries list them (task-id order)."""
    columns = ["label", "dataset", "task", "mean", "seeds"]
    if per_task.empty:
        return pd.DataFrame(columns=columns)
    order = {task: i for i, task in enumerate(dict.fromkeys(per_task["task"]))}
    cells = (
        per_task.groupby(["label", "dataset", "task"], sort=False)["score"]
        .agg(["mean", "count"])
        .reset_index()
        .rename(columns={"count": "seeds"})
    )
    cells["order"] = cells["task"].map(order)
    return cells.sort_values(["dataset", "order", "label"], kind="stable")[columns].reset_index(drop=True)


def format_estimate(mean: float, low: float, high: float, digits: int = 1) -> str:
    if math.isnan(low):
        return f"{mean:.{digits}f}"
    return f"{mean:.{digits}f} [{low:.{digits}f}, {high:.{digits}f}]"


def _digits(spec: BenchmarkSpec) -> int:
    return 2 if spec.metric.name == "success_rate" else 1


def ranked_labels(board: Board, results: Results) -> list[str]:
    """Our rows, best first: by the mean aggregate over datasets, else by the one dataset's cell. Rows without
    that number (no aggregate across raw-return datasets, or a row missing a dataset) follow, grouped by the
    first dataset column they have a cell in and best first within it, so a bandit table of regret columns
    still reads lowest first in each column instead of in name order."""
    spec = board.spec
    means = results.aggregates[results.aggregates["aggregate"] == "mean"].set_index("label")["estimate"].to_dict()
    if len(spec.datasets) == 1:
        means = results.cells.set_index("label")["mean"].to_dict()
    column = {dataset: i for i, dataset in enumerate(spec.datasets)}
    first_cell: dict[str, tuple[int, float]] = {}
    for cell in results.cells.to_dict("records"):
        place = (column.get(cell["dataset"], len(column)), -spec.metric.sign * cell["mean"])
        first_cell[cell["label"]] = min(first_cell.get(cell["label"], place), place)

    def key(label: str) -> tuple:
        if label in means:
            return (0, 0, -spec.metric.sign * means[label], label)
        return (1, *first_cell[label], label)

    return sorted(results.cells["label"].unique(), key=key)


def better_direction(spec: BenchmarkSpec) -> str:
    return "lower" if spec.metric.lower_is_better else "higher"


def shows_best(board: Board) -> bool:
    """A multi-task board scored by its final evaluation shows each run's best beside it (a board scored by best
    already shows it)."""
    return board.multi_task and board.spec.score == "final"


def best_column(dataset: str) -> str:
    """The heading of a multi-task board's best-evaluation column: says it is not the score the rows rank by."""
    return f"{dataset} best during training (not ranked)"


def main_table(board: Board, results: Results) -> pd.DataFrame:
    """Display table: one row per label (best first), where its method comes from and whether its runs were replayed
    from their checkpoints (verified), a cell per dataset 'mean [low, high] (n=seeds)', then the aggregates. A
    multi-task board adds after each dataset's cell the mean over seeds of each run's best evaluation (`best_column`):
    papers of that field report best (HarmoDT does), and the pair shows how far a run fell from its peak by the end."""
    digits = _digits(board.spec)
    labels = ranked_labels(board, results)
    with_best = shows_best(board)
    best = board.scores.groupby(["label", "dataset"])["best"].mean().to_dict() if with_best else {}
    rows = []
    for label in labels:
        row: dict[str, str] = {"baseline": label, "method": board.methods.get(label, "—"), "verified": board.verified.get(label, "—")}
        for dataset in board.spec.datasets:
            cell = results.cells[(results.cells["label"] == label) & (results.cells["dataset"] == dataset)]
            if cell.empty:
                row[dataset] = "—"
            else:
                c = cell.iloc[0]
                row[dataset] = f"{format_estimate(c['mean'], c['low'], c['high'], digits)} (n={c['seeds']})"
            if with_best:
                row[best_column(dataset)] = f"{best[(label, dataset)]:.{digits}f}" if (label, dataset) in best else "—"
        if aggregates_meaningful(board.spec) and len(board.spec.datasets) > 1:
            for name in stats.AGGREGATES:
                agg = results.aggregates[(results.aggregates["label"] == label) & (results.aggregates["aggregate"] == name)]
                if agg.empty:
                    row[name] = "—"
                else:
                    a = agg.iloc[0]
                    row[name] = format_estimate(a["estimate"], a["low"], a["high"], digits)
        rows.append(row)
    columns = ["baseline", "method", "verified"]
    for dataset in board.spec.datasets:
        columns += [dataset, best_column(dataset)] if with_best else [dataset]
    if aggregates_meaningful(board.spec) and len(board.spec.datasets) > 1:
        columns += list(stats.AGGREGATES)
    return pd.DataFrame(rows, columns=columns)


def improvement_heading(spec: BenchmarkSpec) -> str:
    return "P(row < column)" if spec.metric.lower_is_better else "P(row > column)"


def improvement_table(board: Board, results: Results) -> pd.DataFrame:
    """P(row better than column) with its interval: the chance a run of one row beats a run of the other."""
    if results.improvement.empty:
        return pd.DataFrame()
    labels = [label for label in ranked_labels(board, results) if label in set(results.improvement["x"])]
    table = pd.DataFrame("—", index=labels, columns=labels)
    for r in results.improvement.to_dict("records"):
        table.loc[r["x"], r["y"]] = format_estimate(r["probability"], r["low"], r["high"], 2)
    table.index.name = improvement_heading(board.spec)
    return table.reset_index()


def per_task_tables(board: Board, results: Results) -> dict[str, pd.DataFrame]:
    """Per dataset with per-task scores: one row per task, one column per label, the mean over seeds."""
    digits = _digits(board.spec)
    labels = ranked_labels(board, results)
    tables = {}
    for dataset, cells in results.per_task.groupby("dataset", sort=False):
        present = [label for label in labels if label in set(cells["label"])]
        seeds = cells.groupby("label")["seeds"].max().to_dict()
        frame = cells.pivot(index="task", columns="label", values="mean").reindex(list(dict.fromkeys(cells["task"])))
        frame = frame[present].map(lambda v: "—" if pd.isna(v) else f"{v:.{digits}f}")
        frame.columns = [f"{label} (n={seeds[label]})" for label in present]
        frame.index.name = "task"
        tables[str(dataset)] = frame.reset_index()
    return tables


def reported_table(board: Board) -> pd.DataFrame:
    """The published rows in the main table's dataset columns: 'mean ± spread' as published, '—' where none."""
    spec = board.spec
    rows = []
    for number, row in enumerate(spec.reported, 1):
        cells = {"baseline": row.label, "source": number}
        for dataset in spec.datasets:
            if dataset not in row.scores:
                cells[dataset] = "—"
            else:
                mean, spread = row.scores[dataset]
                cells[dataset] = f"{mean:g}" + ("" if spread is None else f" ± {spread:g}")
        rows.append(cells)
    return pd.DataFrame(rows, columns=["baseline", "source", *spec.datasets])


BEHAVIOUR_LABEL = "behaviour policy (the data)"


def behaviour_table(board: Board) -> pd.DataFrame:
    """The data's own row (`[behaviour]` in benchmark.toml) in the main table's dataset columns, '—' where a dataset
    has no value; empty where the board gives none. Never ranked, in no statistic."""
    spec = board.spec
    if not spec.behaviour:
        return pd.DataFrame(columns=["baseline", *spec.datasets])
    digits = _digits(spec)
    cells = {d: f"{spec.behaviour[d]:.{digits}f}" if d in spec.behaviour else "—" for d in spec.datasets}
    return pd.DataFrame([{"baseline": BEHAVIOUR_LABEL, **cells}], columns=["baseline", *spec.datasets])


def terminal_tables(title: str, frame: pd.DataFrame, width: int) -> list[Any]:
    """`frame` as rich tables no wider than `width` terminal columns: where all its columns do not fit, they are cut
    into consecutive groups that each repeat the first column (the row's name), so every cell keeps its one line
    instead of being folded letter by letter into a narrow column. Cells are escaped, never read as markup."""
    from rich.console import Console
    from rich.markup import escape
    from rich.measure import Measurement
    from rich.table import Table

    console = Console(width=10_000)  # a measuring console: a table's natural width, not one clamped to a terminal

    def table(columns: list[str], heading: str, no_wrap: bool = True) -> Table:
        shown = Table(header_style="bold", title=escape(heading) or None)
        for column in columns:
            shown.add_column(escape(str(column)), no_wrap=no_wrap, overflow="ellipsis" if no_wrap else "fold")
        for row in frame[columns].itertuples(index=False):
            shown.add_row(*(escape(str(value)) for value in row))
        return shown

    def fits(columns: list[str]) -> bool:
        return Measurement.get(console, console.options, table(columns, "")).maximum <= width

    key, *rest = list(frame.columns)
    groups: list[list[str]] = []
    for column in rest:
        if groups and fits([key, *groups[-1], column]):
            groups[-1].append(column)
        else:
            groups.append([column])
    parts = [[key, *group] for group in groups] or [[key]]  # a part too wide even alone (one long column) folds its cells
    if len(parts) == 1:
        return [table(parts[0], title, fits(parts[0]))]
    return [table(part, f"{title} ({number} of {len(parts)})".strip(), fits(part)) for number, part in enumerate(parts, 1)]


def results_json(board: Board, results: Results) -> dict[str, Any]:
    """Machine-readable roll-up (what `build` writes): the spec, the cells, the aggregates, the entries."""
    spec = board.spec

    def records(frame: pd.DataFrame) -> list[dict[str, Any]]:
        return [
            {str(k): (None if isinstance(v, float) and math.isnan(v) else v) for k, v in row.items()}
            for row in frame.to_dict(orient="records")
        ]

    return {
        "benchmark": spec.name,
        "metric": spec.metric.name,
        "better": better_direction(spec),
        "score": spec.score,
        "cell_value": f"mean over seeds of the {spec.score_label}, {int(stats.CONFIDENCE * 100)}% stratified-bootstrap interval",
        "datasets": list(spec.datasets),
        "protocol": spec.protocol,
        "min_seeds": spec.min_seeds,
        "bootstrap_reps": spec.bootstrap_reps,
        "cells": records(results.cells),
        "aggregates": records(results.aggregates),
        "probability_of_improvement": records(results.improvement),
        "per_task": records(results.per_task),
        "reported": [
            {"label": r.label, "source": r.source, "note": r.note, "scores": {d: {"mean": m, "std": s} for d, (m, s) in r.scores.items()}}
            for r in spec.reported
        ],
        "behaviour": {"label": BEHAVIOUR_LABEL, "scores": dict(spec.behaviour)},
        "entries": board.entries,
    }
