"""`offbench leaderboard show --format markdown|csv|latex`: the main table as text to paste; the default stays the terminal table."""

from __future__ import annotations

import csv
import io

import pytest
from run_dirs import make_bench, runs_of

DATASETS = ["test/a", "test/b"]


@pytest.fixture
def bench(tmp_path, monkeypatch):
    from offbench.leaderboard.spec import load_spec
    from offbench.leaderboard.submit import submit

    bench = make_bench(tmp_path, monkeypatch, {"bc": 40.0, "iql": 70.0}, DATASETS)
    for baseline in ("bc", "iql"):
        submit(load_spec("tb"), runs_of(bench, baseline), render=False)
    return bench


def test_show_exports_csv_markdown_and_latex(bench, run_cli):
    shown = run_cli("leaderboard", "show", "tb", "--format", "csv")
    assert shown.returncode == 0, shown.stderr
    rows = list(csv.DictReader(io.StringIO(shown.stdout)))
    assert sorted(row["baseline"] for row in rows) == ["bc", "iql"]
    assert rows[0]["test/a"].endswith("(n=3)") and "IQM" in rows[0]

    shown = run_cli("leaderboard", "show", "tb", "--format", "markdown")
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0].startswith("| baseline |") and "| test/a |" in lines[0] and set(lines[1]) <= set("|-")
    assert sum(line.startswith("| bc |") or line.startswith("| iql |") for line in lines) == 2

    shown = run_cli("leaderboard", "show", "tb", "--format", "latex")
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith("\\begin{tabular}{l") and "\\end{tabular}" in shown.stdout
    assert "test/a" in shown.stdout and "\\\\" in shown.stdout and "(n=3)" in shown.stdout


def test_show_default_is_the_terminal_table_and_bad_formats_are_refused(bench, run_cli):
    default = run_cli("leaderboard", "show", "tb")
    table = run_cli("leaderboard", "show", "tb", "--format", "table")
    assert default.returncode == table.returncode == 0 and "P(row > column)" in default.stdout
    assert default.stdout == table.stdout
    bad = run_cli("leaderboard", "show", "tb", "--format", "xml")
    assert bad.returncode == 2 and "--format" in bad.stderr and "xml" in bad.stderr


def test_latex_escapes_special_characters():
    from offbench.leaderboard.commands import _latex

    assert _latex("MTBC+PCGrad_50% & co #1 — x") == r"MTBC+PCGrad\_50\% \& co \#1 --- x"
