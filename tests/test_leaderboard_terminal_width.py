"""`offbench leaderboard show` in an 80-column terminal: a table wider than the terminal is cut into parts that
each repeat the row names, so every cell stays whole on its line."""

from __future__ import annotations

import csv
import io

import pandas as pd
from rich.console import Console

from offbench.leaderboard.table import terminal_tables

DATASETS = [f"minigrid/mt{n}-{quality}" for n in (3, 5, 7) for quality in ("near-optimal", "noisy-planner")]
LABELS = ["MOORE-BC", "MTBC", "MOORE-IQL", "MTIQL", "Prompt-DT", "MTDT", "MOORE-CQL", "HarmoDT"]


def board_frame() -> pd.DataFrame:
    """The shape of the MiniGrid board's main table: name, method, verified, six datasets, three aggregates."""
    rows = []
    for i, label in enumerate(LABELS):
        row = {"baseline": label, "method": "offbench", "verified": "yes"}
        row.update({dataset: f"0.{60 - i}{j} [0.{50 - i}{j}, 0.{70 - i}{j}] (n=3)" for j, dataset in enumerate(DATASETS)})
        row.update({name: f"0.{60 - i} [0.{50 - i}, 0.{70 - i}]" for name in ("mean", "median", "IQM")})
        rows.append(row)
    return pd.DataFrame(rows)


def printed(tables) -> str:
    out = Console(width=80, file=io.StringIO(), record=True)
    for table in tables:
        out.print(table)
    return out.export_text()


def test_a_wide_board_is_cut_into_parts_that_fit_80_columns(monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    frame = board_frame()
    tables = terminal_tables("", frame, Console().width)
    text = printed(tables)
    assert max(len(line) for line in text.splitlines()) <= 80
    assert len(tables) > 1 and [t.title for t in tables] == [f"({n} of {len(tables)})" for n in range(1, len(tables) + 1)]
    lines = text.splitlines()
    for value in frame.drop(columns="baseline").to_numpy().ravel():  # every cell whole on one line
        assert any(value in line for line in lines), value
    for column in frame.columns[1:]:
        assert sum(column in line for line in lines) == 1  # each column shown once
    for label in LABELS:  # every part names its rows
        assert sum(f" {label} " in line for line in lines) == len(tables)


def test_a_table_that_fits_is_one_table_as_before(monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    frame = board_frame()[["baseline", "method", DATASETS[0]]]
    [table] = terminal_tables("per task", frame, Console().width)
    assert table.title == "per task" and [c.header for c in table.columns] == list(frame.columns)
    assert max(len(line) for line in printed([table]).splitlines()) <= 80


def test_a_column_wider_than_the_terminal_alone_folds_instead_of_being_cut():
    frame = pd.DataFrame({"baseline": ["bc"], "note": ["x" * 120]})
    text = printed(terminal_tables("", frame, 80))
    assert max(len(line) for line in text.splitlines()) <= 80 and text.count("x") == 120


def test_leaderboard_show_in_an_80_column_terminal_keeps_every_line_within_it(tmp_path, monkeypatch, run_cli):
    from run_dirs import make_bench, runs_of

    from offbench.leaderboard.spec import load_spec
    from offbench.leaderboard.submit import submit

    bench = make_bench(tmp_path, monkeypatch, {"bc": 40.0, "iql": 70.0, "cql": 55.0}, ["test/a", "test/b", "test/c"])
    for baseline in ("bc", "iql", "cql"):
        submit(load_spec("tb"), runs_of(bench, baseline), render=False)
    monkeypatch.setenv("COLUMNS", "80")
    shown = run_cli("leaderboard", "show", "tb")
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80
    assert "(1 of " in shown.stdout and "P(row > column)" in shown.stdout  # the main table was cut into parts
    cells = run_cli("leaderboard", "show", "tb", "--format", "csv").stdout.split("\n\n")[0]
    rows = list(csv.DictReader(io.StringIO(cells)))
    assert sorted(row["baseline"] for row in rows) == ["bc", "cql", "iql"]
    for row in rows:  # every cell whole on one line, not folded into a narrow column
        assert all(any(str(value) in line for line in lines) for value in row.values()), row
