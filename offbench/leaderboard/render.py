"""Writing a leaderboard: results.json (build), then README.md, index.html and figures/ (render).

The HTML page is static and self-contained apart from its figure files: a sortable table (a few
lines of vanilla JavaScript, no external scripts) and the figures as <img> elements.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from offbench.errors import require
from offbench.leaderboard.spec import BenchmarkSpec
from offbench.leaderboard.table import (
    Board,
    Results,
    aggregates_meaningful,
    board_from_entries,
    compute_results,
    improvement_table,
    main_table,
    results_json,
    score_matrices,
)
from offbench.utils import atomic_write_json, atomic_write_text


@dataclass
class Figure:
    file: str  # relative to the leaderboard folder
    caption: str


def write_figures(board: Board, folder: Path) -> list[Figure]:
    """Learning curves, in-context curves and aggregate plots for the board, as SVG files under folder/figures."""
    from offbench.plotting.aggregate import plot_aggregate_intervals, plot_performance_profiles
    from offbench.plotting.curves import plot_in_context, plot_learning_curves, source_curves

    spec, reps = board.spec, board.spec.bootstrap_reps
    figures: list[Figure] = []
    if not board.curves.empty:
        plot_learning_curves(board.curves, spec.metric.label, folder / "figures" / "curves.svg",
                             title=f"{spec.title}: learning curves (mean over seeds, shaded 95% bootstrap interval)", reps=reps)
        figures.append(Figure("figures/curves.svg", f"Learning curves: {spec.metric.label} against update step."))
    if not board.in_context.empty:
        plot_in_context(board.in_context, folder / "figures" / "in_context.svg", optimum=board.optimum,
                        sources=source_curves(list(board.in_context["dataset"].unique())), reps=reps)
        figures.append(Figure("figures/in_context.svg", "In-context curves: return per episode as the context grows, "
                                                        "with the source algorithm and the optimal return as references."))
    matrices = score_matrices(board.scores, spec.datasets) if aggregates_meaningful(spec) else {}
    if matrices:
        plot_aggregate_intervals(matrices, spec.score_label, folder / "figures" / "aggregates.svg", reps=reps)
        figures.append(Figure("figures/aggregates.svg", "Mean, median and interquartile mean (IQM) with 95% stratified-bootstrap intervals."))
        plot_performance_profiles(matrices, spec.score_label, folder / "figures" / "profiles.svg", reps=reps,
                                  bounded=spec.metric.name == "success_rate")
        figures.append(Figure("figures/profiles.svg", "Performance profiles: fraction of runs whose score exceeds each threshold."))
    return figures


def _protocol_lines(spec: BenchmarkSpec) -> list[str]:
    names = {"episodes": "evaluation episodes per evaluation", "every_steps": "evaluation every (update steps)",
             "steps": "training updates", "target_returns": "target returns (DT)",
             "in_context_episodes": "in-context episodes per evaluation"}
    lines = [f"score: **{spec.score}** {spec.metric.label} (`{spec.metric.name}`; final = last evaluation, never mixed with best)",
             f"datasets: {', '.join(f'`{d}`' for d in spec.datasets)}",
             f"at least {spec.min_seeds} seeds per baseline and dataset; intervals: 95% stratified bootstrap "
             f"({spec.bootstrap_reps} resamples, rliable)"]
    lines += [f"{names[key]}: {value}" for key, value in spec.protocol.items()]
    return lines


def _cell_note(spec: BenchmarkSpec) -> str:
    note = (f"Each cell: mean over seeds of the {spec.score_label}, [95% bootstrap interval], (n = seeds). "
            "Rows are baselines as submitted (`--label` names a variant).")
    if len(spec.datasets) > 1 and aggregates_meaningful(spec):
        note += (" Mean, median and IQM aggregate every dataset and seed of a row (rows with all datasets only; "
                 "a row's smallest seed count per dataset is used).")
    elif len(spec.datasets) > 1:
        note += " Raw returns are not comparable across datasets, so no aggregate is shown."
    return note


def render_markdown(spec: BenchmarkSpec, board: Board, results: Results, figures: list[Figure]) -> str:
    require("tabulate", "stats")
    parts = [f"# {spec.title}", "", spec.description, "", "## Protocol", ""]
    parts += [f"- {line}" for line in _protocol_lines(spec)]
    parts += ["", "## Results", ""]
    if board.scores.empty:
        parts += ["No accepted entries yet. Submit runs with `offbench submit RUN_DIR... --benchmark " + spec.name + "`."]
    else:
        parts += [_cell_note(spec), "", main_table(board, results).to_markdown(index=False)]
        improvement = improvement_table(results)
        if not improvement.empty:
            parts += ["", "### Probability of improvement", "",
                      "P(row > column): chance that a run of the row's baseline scores higher than a run of the "
                      "column's, averaged over datasets, [95% interval].", "", improvement.to_markdown(index=False)]
        parts += ["", "## Figures", ""]
        parts += [f"![{f.caption}]({f.file})\n\n*{f.caption}*\n" for f in figures]
        parts += ["## Entries", "", "Every number traces back to these files in `entries/` (config, code version, "
                  "dataset checksum, per-seed scores and learning curves).", "",
                  pd.DataFrame(board.entries).to_markdown(index=False)]
    parts += ["", f"Rendered by `offbench leaderboard render {spec.name}`; the same page with a sortable table: "
              "[index.html](index.html).", ""]
    return "\n".join(parts)


_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2rem auto; max-width: 72rem; padding: 0 1rem; color: #222; }
table { border-collapse: collapse; margin: 1rem 0; font-size: 0.9rem; }
th, td { border: 1px solid #ccc; padding: 0.3rem 0.6rem; text-align: left; }
table.sortable th { cursor: pointer; background: #f2f2f2; user-select: none; }
th[aria-sort="ascending"]::after { content: " \\25B2"; }
th[aria-sort="descending"]::after { content: " \\25BC"; }
figure { margin: 1.5rem 0; } figure img { max-width: 100%; border: 1px solid #eee; }
.note { color: #555; font-size: 0.9rem; }
"""

# Sort by the leading number of a cell ("12.3 [10.1, 14.0] (n=3)" sorts as 12.3); text cells after numbers.
_SCRIPT = """
document.querySelectorAll("table.sortable").forEach(function (table) {
  var headers = table.querySelectorAll("thead th");
  headers.forEach(function (th, column) {
    th.addEventListener("click", function () {
      var ascending = th.getAttribute("aria-sort") !== "ascending";
      headers.forEach(function (h) { h.removeAttribute("aria-sort"); });
      th.setAttribute("aria-sort", ascending ? "ascending" : "descending");
      var body = table.tBodies[0];
      var key = function (row) {
        var text = row.cells[column].textContent.trim();
        var number = parseFloat(text);
        return isNaN(number) ? { n: false, v: text } : { n: true, v: number };
      };
      var rows = Array.prototype.slice.call(body.rows);
      rows.sort(function (a, b) {
        var x = key(a), y = key(b);
        if (x.n !== y.n) { return x.n ? -1 : 1; }
        var order = x.n ? x.v - y.v : x.v.localeCompare(y.v);
        return ascending ? order : -order;
      });
      rows.forEach(function (row) { body.appendChild(row); });
    });
  });
});
"""


def _inline_code(escaped: str) -> str:
    """Markdown's `code` spans as <code> (the protocol lines are shared with the Markdown page)."""
    return re.sub(r"`([^`]*)`", r"<code>\1</code>", escaped)


def _html_table(frame: pd.DataFrame, table_id: str) -> str:
    return frame.to_html(index=False, escape=True, border=0, table_id=table_id, classes="sortable")


def render_html(spec: BenchmarkSpec, board: Board, results: Results, figures: list[Figure]) -> str:
    e = html.escape
    body = [f"<h1>{e(spec.title)}</h1>", f"<p>{e(spec.description)}</p>", "<h2>Protocol</h2><ul>"]
    body += [f"<li>{_inline_code(e(line.replace('**', '')))}</li>" for line in _protocol_lines(spec)]
    body += ["</ul>", "<h2>Results</h2>"]
    if board.scores.empty:
        body.append(f"<p>No accepted entries yet. Submit runs with <code>offbench submit RUN_DIR... --benchmark {e(spec.name)}</code>.</p>")
    else:
        body += [f'<p class="note">{_inline_code(e(_cell_note(spec)))} Click a column header to sort.</p>', _html_table(main_table(board, results), "scores")]
        improvement = improvement_table(results)
        if not improvement.empty:
            body += ["<h3>Probability of improvement</h3>",
                     '<p class="note">P(row &gt; column): chance that a run of the row\'s baseline scores higher than a run of the '
                     "column's, averaged over datasets, [95% interval].</p>", _html_table(improvement, "improvement")]
        body.append("<h2>Figures</h2>")
        body += [f'<figure><img src="{e(f.file)}" alt="{e(f.caption)}"><figcaption>{e(f.caption)}</figcaption></figure>' for f in figures]
        body += ["<h2>Entries</h2>", '<p class="note">Each entry file in <code>entries/</code> holds the config, code version, '
                 "dataset checksum, per-seed scores and learning curves.</p>", _html_table(pd.DataFrame(board.entries), "entries")]
    return "\n".join([
        "<!doctype html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        '<link rel="icon" href="data:,">', f"<title>{e(spec.title)} · offbench leaderboard</title>",
        f"<style>{_STYLE}</style>", "</head>", "<body>", *body, f"<script>{_SCRIPT}</script>", "</body>", "</html>", "",
    ])


def build_board(spec: BenchmarkSpec, previews: list[dict[str, Any]] | None = None, with_entries: bool = True) -> Board:
    """The accepted entries (and any previewed, unsubmitted ones) as a Board."""
    from offbench.leaderboard.submit import load_entries

    entries: list[tuple[Path | None, dict[str, Any]]] = list(load_entries(spec)) if with_entries else []
    entries += [(None, entry) for entry in previews or []]
    return board_from_entries(spec, entries)


def write_results(board: Board, results: Results, path: Path) -> Path:
    return atomic_write_json(path, results_json(board, results))


def render_to(board: Board, folder: Path) -> list[Path]:
    """results.json, figures/, README.md and index.html in folder."""
    spec = board.spec
    results = compute_results(board)
    figures = write_figures(board, folder) if not board.scores.empty else []
    written = [write_results(board, results, folder / "results.json")]
    written += [folder / f.file for f in figures]
    written.append(atomic_write_text(folder / "README.md", render_markdown(spec, board, results, figures)))
    written.append(atomic_write_text(folder / "index.html", render_html(spec, board, results, figures)))
    return written


def render_benchmark(spec: BenchmarkSpec) -> list[Path]:
    """Re-render the accepted leaderboard in place (what `submit` does after adding entries)."""
    return render_to(build_board(spec), spec.folder)

