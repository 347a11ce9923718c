"""Multi-task boards explain themselves: every method of a dataset on one figure against updates and against
wall-clock seconds (drawn from the entries' curves), and the best evaluation during training beside the final score
in every table, labelled as not ranked; single-task boards keep their one learning-curve figure and no best column."""

from __future__ import annotations

import io
import json

import numpy as np
import pandas as pd
import pytest
from run_dirs import register_dataset, write_benchmark, write_run

from offbench.leaderboard.table import best_column

# seed -> task -> success rate at each of the three evaluations (multiples of 1/5: five episodes per task)
RATES = {
    "bc": {seed: {"reach-v3": [0.2, 1.0, 0.6], "push-v3": [0.0, 0.2 * seed, 0.4]} for seed in range(3)},
    "dt": {seed: {"reach-v3": [0.4, 0.6, 0.8], "push-v3": [0.2 * seed, 0.2, 0.4]} for seed in range(3)},
}
WALL_TIME = {"bc": [30.0, 60.0, 90.0], "dt": [300.0, 330.0, 240.0]}  # seconds per run, by seed


def _with_wall_time(run_dir, seconds):
    summary = json.loads((run_dir / "summary.json").read_text())
    (run_dir / "summary.json").write_text(json.dumps({**summary, "wall_time_s": seconds}))
    return run_dir


@pytest.fixture
def multi_task(root, tmp_path):
    """A multi-task board of two baselines x three seeds, each run with its own wall time; returns its spec."""
    from offbench.leaderboard.spec import load_spec
    from offbench.leaderboard.submit import submit

    checksum = register_dataset("test/mt")
    write_benchmark(root, "mt", ["test/mt"], metric="success_rate")
    spec = load_spec("mt")
    for baseline, by_seed in RATES.items():
        runs = [
            _with_wall_time(
                write_run(tmp_path / "runs", baseline, "test/mt", checksum, seed, [1.0, 2.0, 3.0], per_task_success=rates), wall
            )
            for (seed, rates), wall in zip(by_seed.items(), WALL_TIME[baseline])
        ]
        submit(spec, runs, render=False)
    return spec


def _entries(spec):
    from offbench.leaderboard.entries import load_entries

    return {entry["label"]: entry for _, entry in load_entries(spec)}


def test_each_evaluation_is_placed_at_its_runs_seconds_per_update(multi_task):
    from offbench.leaderboard.render import build_board

    board = build_board(multi_task)
    for label, entry in _entries(multi_task).items():
        for run in entry["runs"]:
            rows = board.curves.loc[(board.curves["label"] == label) & (board.curves["seed"] == run["seed"])]
            assert rows["step"].tolist() == [100, 200, 300]
            assert rows["seconds"].tolist() == pytest.approx([step * run["wall_time_s"] / run["steps"] for step in (100, 200, 300)])
    assert board.curves.loc[board.curves["label"] == "dt", "seconds"].max() == pytest.approx(330.0)  # seed 1's last evaluation


def test_the_figure_draws_the_entries_curves_against_updates_and_wall_clock(multi_task):
    from offbench.leaderboard.render import build_board
    from offbench.plotting.budget import budget_figure

    fig = budget_figure(build_board(multi_task).curves, "test/mt", multi_task.metric.label)
    by_updates, by_seconds = fig.axes
    for label, entry in _entries(multi_task).items():
        curves = np.array([run["curve"]["score"] for run in entry["runs"]])
        seconds = np.array([[step * run["wall_time_s"] / run["steps"] for step in run["curve"]["step"]] for run in entry["runs"]])
        (left,) = [line for line in by_updates.get_lines() if line.get_label() == f"{label} (n=3)"]
        (right,) = [line for line in by_seconds.get_lines() if line.get_label() == f"{label} (n=3)"]
        assert np.asarray(left.get_xdata()).tolist() == [100, 200, 300]
        assert np.asarray(left.get_ydata()) == pytest.approx(curves.mean(axis=0))
        assert np.asarray(right.get_xdata()) == pytest.approx(seconds.mean(axis=0))
        assert np.asarray(right.get_ydata()) == pytest.approx(curves.mean(axis=0))
    legends = fig.legends
    assert len(legends) == 1 and [text.get_text() for text in legends[0].get_texts()] == ["bc (n=3)", "dt (n=3)"]


def test_a_run_without_wall_time_is_left_off_the_wall_clock_panel_only(multi_task):
    from offbench.leaderboard.render import build_board
    from offbench.plotting.budget import budget_caption, budget_figure

    curves = build_board(multi_task).curves
    curves.loc[(curves["label"] == "dt") & (curves["seed"] == 2), "seconds"] = np.nan  # as an entry with wall_time_s null
    by_updates, by_seconds = budget_figure(curves, "test/mt", multi_task.metric.label).axes
    assert [line.get_label() for line in by_updates.get_lines()] == ["bc (n=3)", "dt (n=3)"]
    assert [line.get_label() for line in by_seconds.get_lines()] == ["bc (n=3)"]
    assert "dt" in by_seconds.get_title() and "left panel only" in budget_caption("test/mt", "success rate", curves)


def test_multi_task_tables_show_final_and_best_labelled_apart(multi_task, run_cli):
    from offbench.leaderboard.render import build_board
    from offbench.leaderboard.table import compute_results, main_table

    board = build_board(multi_task)
    table = main_table(board, compute_results(board)).set_index("baseline")
    assert list(table.columns[2:4]) == ["test/mt", best_column("test/mt")]
    assert "not ranked" in best_column("test/mt")
    for label, entry in _entries(multi_task).items():
        finals = [run["curve"]["score"][-1] for run in entry["runs"]]
        bests = [max(run["curve"]["score"]) for run in entry["runs"]]
        assert table.loc[label, "test/mt"].startswith(f"{np.mean(finals):.2f} ")
        assert table.loc[label, best_column("test/mt")] == f"{np.mean(bests):.2f}"
    assert table.loc["bc", best_column("test/mt")] != table.loc["bc", "test/mt"].split()[0]  # bc peaks mid-training
    shown = run_cli("leaderboard", "show", "mt", "--format", "csv", check=True).stdout
    exported = pd.read_csv(io.StringIO(shown), comment="#").set_index("baseline")
    assert exported.loc["bc", best_column("test/mt")] == pytest.approx(float(table.loc["bc", best_column("test/mt")]))


def test_the_rendered_page_shows_one_budget_figure_per_dataset_and_says_what_best_is(multi_task, tmp_path):
    from offbench.leaderboard.render import build_board, render_to

    out = tmp_path / "page"
    render_to(build_board(multi_task), out)
    readme = (out / "README.md").read_text()
    assert (out / "figures" / "budget-test-mt.svg").is_file() and not (out / "figures" / "curves.svg").exists()
    assert "(figures/budget-test-mt.svg)" in readme and "constant update rate" in readme
    assert "never ranked" in readme and "best during training" in (out / "index.html").read_text()


def test_single_task_boards_have_no_best_column_and_keep_their_learning_curves(root, tmp_path):
    from offbench.leaderboard.render import build_board, render_to
    from offbench.leaderboard.spec import load_spec
    from offbench.leaderboard.submit import submit
    from offbench.leaderboard.table import compute_results, main_table

    checksum = register_dataset("test/one")
    write_benchmark(root, "one", ["test/one"])
    spec = load_spec("one")
    submit(spec, [write_run(tmp_path / "runs", "bc", "test/one", checksum, seed, [10.0, 30.0, 20.0]) for seed in range(3)], render=False)
    board = build_board(spec)
    assert not board.multi_task
    assert list(main_table(board, compute_results(board)).columns) == ["baseline", "method", "verified", "test/one"]
    render_to(board, tmp_path / "page")
    figures = {p.name for p in (tmp_path / "page" / "figures").iterdir()}
    assert "curves.svg" in figures and not any(name.startswith("budget-") for name in figures)
    assert "best during training" not in (tmp_path / "page" / "README.md").read_text()


def test_the_results_page_block_of_one_dataset_keeps_its_best_column(multi_task):
    """docs/results.md's per-dataset tables (board_table with `datasets`) show the not-ranked best beside the final."""
    from offbench.leaderboard.index import board_table
    from offbench.leaderboard.render import render_benchmark

    render_benchmark(multi_task)
    header = board_table(multi_task, datasets=["test/mt"]).splitlines()[0]
    assert "| test/mt |" in header and f"| {best_column('test/mt')} |" in header
