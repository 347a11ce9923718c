"""Writing a leaderboard: results.json (build), then README.md, index.html and figures/ (render).

The HTML page is static and self-contained apart from its figure files: a sortable table (a few
lines of vanilla JavaScript, no external scripts) and the figures as <img> elements. Every string that
comes from an entry, a run or a benchmark file is escaped for the format it lands in: Markdown cells
(`markdown_text`: no raw HTML, no table-breaking `|` or newline, no emphasis or links), HTML
(`html.escape`) and SVG (matplotlib escapes XML; `offbench.plotting.figures.plain_text` keeps `$`
from starting math). Only the benchmark's description is Markdown by design (with HTML escaped).
Reported rows (published numbers) are set apart: italic and tagged "reported [n]", with their sources listed; so is
the data's own row (`[behaviour]`, the behaviour policy's score), with a note saying what it is.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from offbench.leaderboard.entries import load_entries
from offbench.leaderboard.spec import PER_KEYS, BenchmarkSpec
from offbench.leaderboard.table import (
    BEHAVIOUR_LABEL,
    Board,
    Results,
    aggregates_meaningful,
    behaviour_table,
    best_column,
    better_direction,
    board_from_entries,
    compute_results,
    improvement_heading,
    improvement_table,
    main_table,
    per_task_tables,
    reported_table,
    results_json,
    shows_best,
)
from offbench.stats import score_matrices
from offbench.utils import atomic_write_json, atomic_write_text

_MARKDOWN_SPECIAL = re.compile(r"([\\`*_\[\]|~])")


def markdown_text(value: Any) -> str:
    """Any value as inert Markdown inline text: one line, HTML characters as entities, Markdown syntax escaped."""
    text = html.escape(" ".join(str(value).split()), quote=False)
    return _MARKDOWN_SPECIAL.sub(r"\\\1", text)


@dataclass(frozen=True)
class Mark:
    """How a row that is not one of our runs is set apart: italic, its label tagged (`tag`, none for the data's row,
    whose label says what it is), and its HTML row's class."""

    tag: str
    css: str


def reported_mark(number: int) -> Mark:
    return Mark(f"reported [{number}]", "reported")


DATA_MARK = Mark("", "data")


def markdown_table(frame: pd.DataFrame, marks: dict[int, Mark] | None = None) -> str:
    """A GitHub-flavoured Markdown table with every header and cell escaped. `marks` maps row numbers to how those
    rows are set apart (italic, their label tagged, e.g. "reported [n]")."""
    marks = marks or {}
    lines = ["| " + " | ".join(markdown_text(c) for c in frame.columns) + " |", "|" + "---|" * len(frame.columns)]
    for number, row in enumerate(frame.itertuples(index=False)):
        cells = [markdown_text(v) for v in row]
        if number in marks:
            cells = [f"*{c}*" if c else c for c in cells]
            cells[0] += f" ({markdown_text(marks[number].tag)})" if marks[number].tag else ""
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def html_table(frame: pd.DataFrame, table_id: str, better: dict[str, str] | None = None, marks: dict[int, Mark] | None = None) -> str:
    """A sortable HTML table, every header and cell escaped. `better` marks score columns ("higher"/"lower":
    the first click sorts best first); `marks` maps row numbers to how those rows are set apart."""
    better, marks = better or {}, marks or {}
    e = html.escape
    head = "".join(f'<th data-better="{better[c]}">{e(str(c))}</th>' if c in better else f"<th>{e(str(c))}</th>" for c in frame.columns)
    body = []
    for number, row in enumerate(frame.itertuples(index=False)):
        cells = [e(str(v)) for v in row]
        mark = marks.get(number)
        if mark is None:
            body.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
            continue
        if mark.tag:
            cells[0] += f' <span class="tag">{e(mark.tag)}</span>'
        body.append(f'<tr class="{mark.css}">' + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    return f'<table id="{e(table_id)}" class="sortable"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'


@dataclass
class Figure:
    file: str  # relative to the leaderboard folder
    caption: str


def write_figures(board: Board, folder: Path) -> list[Figure]:
    """Learning curves, in-context curves and aggregate plots for the board, as SVG files under folder/figures. A
    multi-task board's learning curves are one figure per dataset against updates and wall-clock (`write_budget_figures`)."""
    from offbench.plotting.aggregate import plot_aggregate_intervals, plot_performance_profiles
    from offbench.plotting.curves import plot_in_context, plot_learning_curves, source_curves

    spec, reps = board.spec, board.spec.bootstrap_reps
    figures: list[Figure] = []
    if board.multi_task:
        figures += write_budget_figures(board, folder)
    elif not board.curves.empty:
        plot_learning_curves(
            board.curves, spec.metric.label, folder / "figures" / "curves.svg", title=f"{spec.title}: learning curves", reps=reps
        )  # the figure adds a band note where one differs
        band = ", mean over seeds with a shaded 95% bootstrap interval" if spec.min_seeds > 1 else ""
        figures.append(Figure("figures/curves.svg", f"Learning curves: {spec.metric.label} against update step{band}."))
    if not board.in_context.empty:
        plot_in_context(
            board.in_context,
            folder / "figures" / "in_context.svg",
            optimum=board.optimum,
            sources=source_curves(list(board.in_context["dataset"].unique())),
            reps=reps,
        )
        figures.append(
            Figure(
                "figures/in_context.svg",
                "In-context curves: return per episode as the context grows, "
                "with the source algorithm and the optimal return as references.",
            )
        )
    matrices = score_matrices(board.scores, spec.datasets) if aggregates_meaningful(spec) else {}
    if matrices:
        lower = spec.metric.lower_is_better
        plot_aggregate_intervals(matrices, spec.score_label, folder / "figures" / "aggregates.svg", reps=reps, lower_is_better=lower)
        figures.append(
            Figure("figures/aggregates.svg", "Mean, median and interquartile mean (IQM) with 95% stratified-bootstrap intervals.")
        )
        plot_performance_profiles(
            matrices,
            spec.score_label,
            folder / "figures" / "profiles.svg",
            reps=reps,
            bounded=spec.metric.name == "success_rate",
            lower_is_better=lower,
        )
        figures.append(
            Figure(
                "figures/profiles.svg",
                f"Performance profiles: fraction of runs whose score is {'below' if lower else 'above'} each threshold.",
            )
        )
    return figures


def budget_figure_file(dataset: str) -> str:
    """The figure of one dataset's methods against updates and wall-clock, relative to the leaderboard folder."""
    return "figures/budget-" + re.sub(r"[^A-Za-z0-9._-]+", "-", dataset).strip(".-") + ".svg"


def write_budget_figures(board: Board, folder: Path) -> list[Figure]:
    """A multi-task board's learning curves: per dataset, every method against updates and against wall-clock seconds
    (offbench.plotting.budget), in the board's dataset order."""
    from offbench.plotting.budget import budget_caption, plot_budget

    label = board.spec.metric.label
    present = set(board.curves["dataset"])
    figures = []
    for dataset in (d for d in board.spec.datasets if d in present):
        figure = Figure(budget_figure_file(dataset), budget_caption(dataset, label, board.curves))
        plot_budget(board.curves, dataset, label, folder / figure.file)
        figures.append(figure)
    return figures


def _protocol_lines(spec: BenchmarkSpec) -> list[str]:
    """The protocol as plain sentences (each format escapes them its own way)."""
    names = {
        "episodes": "evaluation episodes per evaluation",
        "every_steps": "evaluation every (update steps)",
        "steps": "training updates",
        "target_returns": "target returns (DT)",
        "in_context_episodes": "in-context episodes per evaluation",
    }
    lines = [
        f"score: {spec.score} {spec.metric.label} ({spec.metric.name}; final = last evaluation, never mixed with best; "
        f"{better_direction(spec)} is better)",
        f"datasets: {', '.join(spec.datasets)}",
        f"at least {spec.min_seeds} seeds per baseline and dataset; intervals: 95% stratified bootstrap "
        f"({spec.bootstrap_reps} resamples, rliable)",
    ]
    lines += [f"{names[key]}: {value}" for key, value in spec.protocol.items() if key not in PER_KEYS]
    for dataset, keys in spec.protocol.get("dataset", {}).items():
        lines.append(f"on {dataset}: " + ", ".join(f"{names[key]}: {value}" for key, value in keys.items()))
    for baseline, keys in spec.protocol.get("baseline", {}).items():
        lines.append(f"{baseline} runs: " + ", ".join(f"{names[key]}: {value}" for key, value in keys.items()))
    return lines


def _cell_note(board: Board) -> str:
    spec = board.spec
    note = (
        f"Each cell: mean over seeds of the {spec.score_label}, [95% bootstrap interval], (n = seeds). "
        f"Rows are baselines as submitted (--label names a variant), best first ({better_direction(spec)} is better). "
        "method: offbench's own baseline, a plugin, someone's own code or a black-box policy (docs/submitting.md); "
        "verified: every run's final evaluation was replayed from its checkpoint to the same returns (yes), some were "
        "(partly), or none (no: a black box, a run submitted without --verify, or one whose checkpoint was not kept)."
    )
    if shows_best(board):
        note += (
            f" Beside each dataset's cell, the column '{best_column('DATASET')}' is the mean over seeds of each run's best "
            "evaluation during training (what some papers report; HarmoDT's does): shown for comparison, never ranked, "
            "and not the board's score, which is the final evaluation."
        )
    if len(spec.datasets) > 1 and aggregates_meaningful(spec):
        note += (
            " Mean, median and IQM aggregate every dataset and seed of a row (rows with all datasets only; "
            "a row's smallest seed count per dataset is used)."
        )
    elif len(spec.datasets) > 1:
        note += (
            " Raw returns are not comparable across datasets, so no aggregate is shown: rows are grouped by the "
            "first dataset they have a cell in, best first within it."
        )
    return note


REPORTED_NOTE = (
    "Rows marked reported [n] are published numbers, not runs made here: mean ± spread as the source "
    "gives them, under the source's own protocol. They take no part in any interval, aggregate, "
    "ranking or probability of improvement."
)
BEHAVIOUR_DEFINITION = {
    "success_rate": "the mean over tasks of the fraction of each task's episodes that succeed",
    "normalized_score": "the mean episode return, normalised with the card's reference scores",
}
IMPROVEMENT_NOTE = (
    "chance that a run of the row's baseline scores better than a run of the column's (averaged over datasets), [95% interval]."
)


def _source_line(number: int, row) -> str:
    source = row.source
    text = f"[{number}] {row.label}: {source['paper']}; {source['table']}; version {source['version']}"
    if "url" in source:
        text += f"; {source['url']}"
    return text + (f". {row.note}" if row.note else "")


def behaviour_note(spec: BenchmarkSpec) -> str:
    """What the data's row is, under a table that shows it."""
    return (
        f"The row '{BEHAVIOUR_LABEL}' is each dataset's own episodes scored in the board's metric: "
        f"{BEHAVIOUR_DEFINITION[spec.metric.name]} ([behaviour] in benchmark.toml, compared with the data by "
        "offbench leaderboard check where it is on disk). A method above it beats the data; the row is never ranked "
        "and takes no part in any interval, aggregate or best column."
    )


@dataclass
class ResultsTable:
    """The headline table: our rows best first, then the data's row and the published ones, set apart."""

    frame: pd.DataFrame
    reported: dict[int, int] = field(default_factory=dict)  # row number -> source number of a published row
    data_row: int | None = None  # the row number of the data's own row, where the board gives one

    @property
    def marks(self) -> dict[int, Mark]:
        marks = {row: reported_mark(number) for row, number in self.reported.items()}
        return marks | ({} if self.data_row is None else {self.data_row: DATA_MARK})

    def part(self, rows: list[int], columns: list[str]) -> ResultsTable:
        """Only `rows` (row numbers, in order) and `columns`, the marks renumbered."""
        return ResultsTable(
            pd.DataFrame(self.frame.iloc[rows][columns]).reset_index(drop=True),
            {rows.index(row): number for row, number in self.reported.items() if row in rows},
            rows.index(self.data_row) if self.data_row in rows else None,
        )


def _results_table(board: Board, results: Results) -> ResultsTable:
    """Our rows, then the data's row (`[behaviour]`), then the reported ones, in the same columns."""
    ours = (
        main_table(board, results)
        if not board.scores.empty
        else pd.DataFrame(columns=["baseline", "method", "verified", *board.spec.datasets])
    )
    others = [behaviour_table(board), reported_table(board).drop(columns="source")]
    frames = [ours, *(frame.reindex(columns=ours.columns, fill_value="—") for frame in others if not frame.empty)]
    combined = pd.concat(frames, ignore_index=True) if len(frames) > 1 else ours
    data_row = len(ours) if board.spec.behaviour else None
    first_reported = len(ours) + (data_row is not None)
    return ResultsTable(combined, {first_reported + i: i + 1 for i in range(len(board.spec.reported))}, data_row)


def _score_columns(frame: pd.DataFrame, spec: BenchmarkSpec) -> dict[str, str]:
    return {column: better_direction(spec) for column in frame.columns if column not in ("baseline", "method", "verified")}


def render_markdown(spec: BenchmarkSpec, board: Board, results: Results, figures: list[Figure]) -> str:
    description = html.escape(spec.description, quote=False)  # Markdown by design; never raw HTML
    parts = [f"# {markdown_text(spec.title)}", "", description, "", "## Protocol", ""]
    parts += [f"- {markdown_text(line)}" for line in _protocol_lines(spec)]
    parts += ["", "## Results", ""]
    if board.scores.empty:
        parts += [f"No accepted entries yet. Submit runs with `offbench submit RUN_DIR... --benchmark {spec.name}`.", ""]
    else:
        parts += [markdown_text(_cell_note(board)), ""]
    table = _results_table(board, results)
    if len(table.frame):
        parts += [markdown_table(table.frame, table.marks)]
    if table.data_row is not None:
        parts += ["", markdown_text(behaviour_note(spec))]
    if table.reported:
        parts += ["", markdown_text(REPORTED_NOTE), ""]
        parts += [f"- {markdown_text(_source_line(n, row))}" for n, row in enumerate(spec.reported, 1)]
    if not board.scores.empty:
        for dataset, frame in per_task_tables(board, results).items():
            parts += [
                "",
                f"### Per task: {markdown_text(dataset)}",
                "",
                markdown_text(f"Mean over seeds of each task's {spec.score} {spec.metric.label}."),
                "",
                markdown_table(frame),
            ]
        improvement = improvement_table(board, results)
        if not improvement.empty:
            parts += [
                "",
                "### Probability of improvement",
                "",
                markdown_text(f"{improvement_heading(spec)}: {IMPROVEMENT_NOTE}"),
                "",
                markdown_table(improvement),
            ]
        parts += ["", "## Figures", ""]
        parts += [f"![{markdown_text(f.caption)}]({f.file})\n\n*{markdown_text(f.caption)}*\n" for f in figures]
        parts += [
            "## Entries",
            "",
            "Every number traces back to these files in `entries/` (config, code version, "
            "dataset checksum, per-seed scores and learning curves).",
            "",
            markdown_table(pd.DataFrame(board.entries)),
        ]
    parts += [
        "",
        f"Rendered by `offbench leaderboard render {spec.name}`; the same page with a sortable table: [index.html](index.html).",
        "",
    ]
    return "\n".join(parts)


_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2rem auto; max-width: 72rem; padding: 0 1rem; color: #222; }
table { border-collapse: collapse; margin: 1rem 0; font-size: 0.9rem; }
th, td { border: 1px solid #ccc; padding: 0.3rem 0.6rem; text-align: left; }
table.sortable th { cursor: pointer; background: #f2f2f2; user-select: none; }
th[aria-sort="ascending"]::after { content: " \\25B2"; }
th[aria-sort="descending"]::after { content: " \\25BC"; }
tr.reported td, tr.data td { font-style: italic; background: #f7f4ea; color: #555; }
.tag { font-size: 0.75rem; font-style: normal; border: 1px solid #b9a96b; border-radius: 0.3rem; padding: 0 0.3rem; }
figure { margin: 1.5rem 0; } figure img { max-width: 100%; border: 1px solid #eee; }
.note { color: #555; font-size: 0.9rem; }
"""

# Sort by the leading number of a cell ("12.3 [10.1, 14.0] (n=3)" sorts as 12.3); text cells after numbers.
# The first click on a score column (data-better) puts the best first; on any other column, ascending.
_SCRIPT = """
document.querySelectorAll("table.sortable").forEach(function (table) {
  var headers = table.querySelectorAll("thead th");
  headers.forEach(function (th, column) {
    th.addEventListener("click", function () {
      var current = th.getAttribute("aria-sort");
      var ascending = current ? current !== "ascending" : th.getAttribute("data-better") !== "higher";
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


def description_html(text: str) -> str:
    """A board's Markdown description in the HTML page: escaped whole (never raw HTML), then each `code` span as
    <code>, the one piece of Markdown the descriptions use, so commands and dataset ids show without backticks."""
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(text))


def render_html(spec: BenchmarkSpec, board: Board, results: Results, figures: list[Figure]) -> str:
    e = html.escape
    body = [f"<h1>{e(spec.title)}</h1>", f"<p>{description_html(spec.description)}</p>", "<h2>Protocol</h2><ul>"]
    body += [f"<li>{e(line)}</li>" for line in _protocol_lines(spec)]
    body += ["</ul>", "<h2>Results</h2>"]
    if board.scores.empty:
        body.append(f"<p>No accepted entries yet. Submit runs with <code>offbench submit RUN_DIR... --benchmark {e(spec.name)}</code>.</p>")
    else:
        body.append(f'<p class="note">{e(_cell_note(board))} Click a column header to sort.</p>')
    table = _results_table(board, results)
    if len(table.frame):
        body.append(html_table(table.frame, "scores", _score_columns(table.frame, spec), table.marks))
    if table.data_row is not None:
        body.append(f'<p class="note">{e(behaviour_note(spec))}</p>')
    if table.reported:
        body += [f'<p class="note">{e(REPORTED_NOTE)}</p>', "<ul>"]
        body += [f"<li>{e(_source_line(n, row))}</li>" for n, row in enumerate(spec.reported, 1)]
        body.append("</ul>")
    if not board.scores.empty:
        for number, (dataset, frame) in enumerate(per_task_tables(board, results).items()):
            body += [
                f"<h3>Per task: {e(dataset)}</h3>",
                f'<p class="note">Mean over seeds of each task\'s {e(spec.score)} {e(spec.metric.label)}.</p>',
                html_table(frame, f"per-task-{number}", _score_columns(frame.drop(columns="task"), spec)),
            ]
        improvement = improvement_table(board, results)
        if not improvement.empty:
            body += [
                "<h3>Probability of improvement</h3>",
                f'<p class="note">{e(improvement_heading(spec))}: {e(IMPROVEMENT_NOTE)}</p>',
                html_table(improvement, "improvement"),
            ]
        body.append("<h2>Figures</h2>")
        body += [f'<figure><img src="{e(f.file)}" alt="{e(f.caption)}"><figcaption>{e(f.caption)}</figcaption></figure>' for f in figures]
        body += [
            "<h2>Entries</h2>",
            '<p class="note">Each entry file in <code>entries/</code> holds the config, code version, '
            "dataset checksum, per-seed scores and learning curves.</p>",
            html_table(pd.DataFrame(board.entries), "entries"),
        ]
    return "\n".join(
        [
            "<!doctype html>",
            '<html lang="en">',
            "<head>",
            '<meta charset="utf-8">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            '<link rel="icon" href="data:,">',
            f"<title>{e(spec.title)} · offbench leaderboard</title>",
            f"<style>{_STYLE}</style>",
            "</head>",
            "<body>",
            *body,
            f"<script>{_SCRIPT}</script>",
            "</body>",
            "</html>",
            "",
        ]
    )


def build_board(spec: BenchmarkSpec, previews: list[dict[str, Any]] | None = None, with_entries: bool = True) -> Board:
    """The accepted entries (and any previewed, unsubmitted ones) as a Board. Callers that write from it hold
    the benchmark's lock, so what they write is never older than the entries on disk."""
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
    remove_stale_figures(folder, figures)
    written = [write_results(board, results, folder / "results.json")]
    written += [folder / f.file for f in figures]
    written.append(atomic_write_text(folder / "README.md", render_markdown(spec, board, results, figures)))
    written.append(atomic_write_text(folder / "index.html", render_html(spec, board, results, figures)))
    return written


def remove_stale_figures(folder: Path, figures: list[Figure]) -> None:
    """Delete the SVGs under folder/figures that this render did not write: a figure of entries since withdrawn
    (or of a kind of plot the board no longer has) must not outlive them."""
    written = {folder / figure.file for figure in figures}
    for path in (folder / "figures").glob("*.svg"):
        if path not in written:
            path.unlink()


def render_benchmark(spec: BenchmarkSpec) -> list[Path]:
    """Re-render the accepted leaderboard in place; the caller holds spec.lock (as `submit` does)."""
    return render_to(build_board(spec), spec.folder)
