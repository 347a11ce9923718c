"""Leaderboards beyond one task and one direction: per-task tables for multi-task benchmarks, and
lower-is-better metrics (regret) end to end: best evaluation, ranking, probability of improvement, profiles."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from run_dirs import register_dataset, write_benchmark, write_run

from offbench.tracking.read_run import Refused

RATES = {"bc": {"reach-v3": [0.2, 0.4, 0.6], "push-v3": [0.0, 0.2, 0.2]}, "dt": {"reach-v3": [0.4, 0.8, 1.0], "push-v3": [0.2, 0.4, 0.8]}}


def _submit(name, runs, render=False):
    from offbench.leaderboard.spec import load_spec
    from offbench.leaderboard.submit import submit

    return submit(load_spec(name), runs, render=render)


def test_multi_task_benchmarks_get_a_per_task_table(root, tmp_path):
    checksum = register_dataset("test/mt")
    write_benchmark(root, "mt", ["test/mt"], metric="success_rate")
    for baseline, rates in RATES.items():
        runs = [
            write_run(tmp_path / "runs", baseline, "test/mt", checksum, seed, [10.0, 20.0, 30.0], per_task_success=rates)
            for seed in range(3)
        ]
        _submit("mt", runs, render=baseline == "dt")
    results = json.loads((root / "mt" / "results.json").read_text())
    per_task = {(c["label"], c["task"]): c["mean"] for c in results["per_task"]}
    assert per_task == {(label, task): pytest.approx(rates[-1]) for label, by_task in RATES.items() for task, rates in by_task.items()}
    assert [c["task"] for c in results["per_task"] if c["label"] == "dt"] == ["reach-v3", "push-v3"]  # task-id order
    cells = {c["label"]: c["mean"] for c in results["cells"]}
    assert cells == {"bc": pytest.approx(0.4), "dt": pytest.approx(0.9)}  # the mean over tasks
    readme = (root / "mt" / "README.md").read_text()
    assert "### Per task: test/mt" in readme and "| reach-v3 | 1.00 | 0.60 |" in readme
    assert "| task | dt (n=3) | bc (n=3) |" in readme  # best row first
    assert "per-task-0" in (root / "mt" / "index.html").read_text()


def test_a_per_task_success_rate_that_is_not_its_successes_is_refused(root, tmp_path):
    checksum = register_dataset("test/mt")
    write_benchmark(root, "mt", ["test/mt"], metric="success_rate")
    runs = [
        write_run(tmp_path / "runs", "bc", "test/mt", checksum, seed, [1.0, 2.0, 3.0], per_task_success=RATES["bc"]) for seed in range(3)
    ]
    path = runs[0] / "evaluations.jsonl"
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    lines[0]["per_task"]["push-v3"]["success_rate"] = 0.8
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    with pytest.raises(Refused, match=r"refused \(consistency\).*push-v3"):
        _submit("mt", runs)


@pytest.mark.parametrize("score", ["final", "best"])
def test_regret_is_lower_is_better_end_to_end(root, tmp_path, score):
    checksum = register_dataset("test/bandit")
    write_benchmark(root, "bandit", ["test/bandit"], metric="regret", score=score, evaluation={"episodes": 5, "in_context_episodes": 4})
    regrets = {"bc": [1.0, 2.0, 3.0, 4.0], "dt": [2.0, 4.0, 6.0, 8.0]}  # the final evaluation's cumulative curve
    for baseline, regret in regrets.items():
        runs = [
            write_run(
                tmp_path / "runs",
                baseline,
                "test/bandit",
                checksum,
                seed,
                [1.0, 2.0, 3.0],
                in_context=[0.5, 0.6, 0.7, 0.8 + 0.01 * seed],
                regret=[v + seed for v in regret],
            )
            for seed in range(3)
        ]
        entry = json.loads(_submit("bandit", runs, render=baseline == "dt")[0].read_text())
        # Earlier evaluations have 3x and 2x the final regret: best (the lowest) is the final one either way.
        assert [r["score"] for r in entry["runs"]] == pytest.approx([regret[-1] + seed for seed in range(3)])
    results = json.loads((root / "bandit" / "results.json").read_text())
    assert results["better"] == "lower"
    better = next(p for p in results["probability_of_improvement"] if p["x"] == "bc" and p["y"] == "dt")
    assert better["probability"] == pytest.approx(1.0)
    readme = (root / "bandit" / "README.md").read_text()
    rows = [line.split("|")[1].strip() for line in readme.splitlines() if line.startswith("| bc") or line.startswith("| dt")]
    assert rows[:2] == ["bc", "dt"]  # lowest regret first
    assert "P(row &lt; column)" in readme and "lower is better" in readme
    assert '<th data-better="lower">test/bandit</th>' in (root / "bandit" / "index.html").read_text()


def test_rows_without_an_aggregate_read_best_first_within_their_first_column(root, tmp_path):
    """Regret on two raw-return datasets has no aggregate: rows group by their first column, lowest first in it
    (name order would read bc, cql, dt, iql whatever their regret)."""
    checksums = {dataset: register_dataset(dataset, seed) for seed, dataset in enumerate(["test/first", "test/second"])}
    write_benchmark(root, "bandit", list(checksums), metric="regret", evaluation={"episodes": 5, "in_context_episodes": 4})
    final_regret = {("bc", "test/first"): 9.0, ("dt", "test/first"): 3.0, ("cql", "test/second"): 1.0, ("iql", "test/second"): 7.0}
    for (baseline, dataset), regret in final_regret.items():
        runs = [
            write_run(
                tmp_path / "runs",
                baseline,
                dataset,
                checksums[dataset],
                seed,
                [1.0, 2.0, 3.0],
                in_context=[0.5, 0.6, 0.7, 0.8],
                regret=[1.0, 2.0, 3.0, regret + 0.1 * seed],
            )
            for seed in range(3)
        ]
        _submit("bandit", runs, render=baseline == "iql")
    readme = (root / "bandit" / "README.md").read_text()
    rows = [line.split("|")[1].strip() for line in readme.splitlines() if line.startswith(("| bc", "| cql", "| dt", "| iql"))]
    assert rows[:4] == ["dt", "bc", "cql", "iql"]
    assert "grouped by the first dataset they have a cell in" in readme


def test_profiles_count_runs_below_the_threshold_where_lower_is_better():
    from offbench.stats import performance_profiles

    matrices = {"a": np.array([[1.0], [2.0], [3.0]])}
    higher, _ = performance_profiles(matrices, np.array([2.5]), reps=100)
    lower, _ = performance_profiles(matrices, np.array([2.5]), reps=100, lower_is_better=True)
    assert higher["a"][0] == pytest.approx(1 / 3) and lower["a"][0] == pytest.approx(2 / 3)


def test_profiles_are_rliables_own_numbers():
    """The vectorised score distribution gives rliable's profiles and intervals exactly (same resamples)."""
    from rliable import library

    from offbench.stats import _seeded, performance_profiles

    rng = np.random.default_rng(0)
    matrices = {"a": rng.random((3, 4)), "b": np.round(rng.random((3, 4)), 1)}  # b: ties with the thresholds
    taus = np.linspace(0.0, 1.0, 11)
    with _seeded():
        expected = library.create_performance_profile(matrices, taus, reps=50, confidence_interval_size=0.95)
    profiles, intervals = performance_profiles(matrices, taus, reps=50)
    for key in matrices:
        assert np.array_equal(profiles[key], expected[0][key]) and np.array_equal(intervals[key], expected[1][key])


def test_improvement_probabilities_are_rliables_own_numbers():
    """The pair-counting probability of improvement gives rliable's Mann-Whitney-based one exactly, ties included,
    for unequal run counts and for identical samples (one half), and so the same bootstrap intervals."""
    from rliable import library, metrics

    from offbench.stats import _seeded, improvement_probabilities, probability_of_improvement

    rng = np.random.default_rng(1)
    for runs_x, runs_y in ((3, 3), (5, 2)):
        x, y = np.round(rng.random((runs_x, 4)), 1), np.round(rng.random((runs_y, 4)), 1)
        assert probability_of_improvement(x, y) == metrics.probability_of_improvement(x, y)
    assert probability_of_improvement(x, x) == metrics.probability_of_improvement(x, x) == 0.5
    a, b = np.round(rng.random((3, 4)), 1), np.round(rng.random((3, 4)), 1)
    with _seeded():
        points, intervals = library.get_interval_estimates(
            {"0": (a, b)}, metrics.probability_of_improvement, reps=50, confidence_interval_size=0.95
        )
    assert improvement_probabilities({"a": a, "b": b}, reps=50)[("a", "b")] == (
        float(points["0"]),
        float(intervals["0"][0, 0]),
        float(intervals["0"][1, 0]),
    )


# ------------------------------------------------------------------------- published reference rows

CORL_ROW = {
    "label": "IQL",
    "source": {"paper": "CORL", "table": "Last Scores", "version": "commit eeeeef2"},
    "scores": {"test/a": {"mean": 1000.0, "std": 0.5}},
}


def test_reported_rows_are_shown_apart_and_never_in_our_statistics(tmp_path, monkeypatch):
    from run_dirs import make_bench, runs_of

    bench = make_bench(tmp_path, monkeypatch, {"bc": 40.0, "iql": 70.0}, datasets=("test/a",))
    write_benchmark(bench["root"], "tb", ["test/a"], reported=[CORL_ROW])
    for baseline in ("bc", "iql"):
        _submit("tb", runs_of(bench, baseline), render=baseline == "iql")
    results = json.loads((bench["folder"] / "results.json").read_text())
    assert {c["label"] for c in results["cells"]} == {"bc", "iql"}
    assert {p["x"] for p in results["probability_of_improvement"]} == {"bc", "iql"}
    assert results["reported"] == [
        {"label": "IQL", "source": CORL_ROW["source"], "note": "", "scores": {"test/a": {"mean": 1000.0, "std": 0.5}}}
    ]
    readme = (bench["folder"] / "README.md").read_text()
    table = [line for line in readme.splitlines() if line.startswith("| ")]
    assert (
        table[1].startswith("| iql |") and table[3] == "| *IQL* (reported \\[1\\]) | *—* | *—* | *1000 ± 0.5* |"
    )  # ours ranked, then reported
    assert "- \\[1\\] IQL: CORL; Last Scores; version commit eeeeef2" in readme
    assert '<tr class="reported"><td>IQL <span class="tag">reported [1]</span></td>' in (bench["folder"] / "index.html").read_text()


@pytest.mark.parametrize(
    "change, problem",
    [
        (lambda row: row["source"].pop("version"), r"missing required key 'reported\[0\]\.source\.version'"),
        (
            lambda row: row["scores"].update({"test/zzz": {"mean": 1.0}}),
            r"'reported\[0\]\.scores' names 'test/zzz', which is not one of the benchmark's datasets",
        ),
        (
            lambda row: row["scores"].update({"test/a": {"mean": float("nan")}}),
            r"'reported\[0\]\.scores\.test/a\.mean' must be a finite number",
        ),
        (
            lambda row: row["scores"].update({"test/a": {"mean": 1.0, "std": -0.5}}),
            r"'reported\[0\]\.scores\.test/a\.std' must be at least 0",
        ),
        (lambda row: row.update(label="two\nlines"), r"'reported\[0\]\.label' must be one line of 1-64 characters"),
        (lambda row: row["source"].update(url="javascript:alert(1)"), r"'reported\[0\]\.source\.url' must start with https://"),
    ],
)
def test_malformed_reported_rows_are_one_line_errors(tmp_path, change, problem):
    from offbench.errors import OffbenchError
    from offbench.leaderboard.spec import load_spec

    row = json.loads(json.dumps(CORL_ROW))
    change(row)
    write_benchmark(tmp_path, "tb", ["test/a"], reported=[row])
    with pytest.raises(OffbenchError, match=problem) as caught:
        load_spec("tb", tmp_path)
    assert len(str(caught.value).splitlines()) == 1


def test_the_repositorys_reported_rows_cover_their_benchmarks():
    """CORL's rows cover all nine D4RL datasets and cite the README at the commit they name; the MT50 rows are fractions."""
    from run_dirs import REPO_ROOT

    from offbench.leaderboard.spec import load_spec

    d4rl = load_spec("d4rl-locomotion", REPO_ROOT / "leaderboards")
    assert [row.label for row in d4rl.reported] == ["BC", "CQL", "IQL", "DT", "TD3+BC"]
    for row in d4rl.reported:
        commit = re.search(r"commit ([0-9a-f]{40})", row.source["version"])
        assert set(row.scores) == set(d4rl.datasets) and commit and f"/blob/{commit[1]}/" in row.source["url"]
    mt50 = load_spec("metaworld-mt50", REPO_ROOT / "leaderboards")
    assert {row.label for row in mt50.reported} == {"MTBC", "MTIQL", "MTDT", "Prompt-DT", "HarmoDT-F"}
    assert all(set(row.scores) == set(mt50.datasets) and all(0 <= m <= 1 for m, _ in row.scores.values()) for row in mt50.reported)
    hopper = d4rl.datasets[0]
    assert d4rl.protocol_for("dt", hopper)["episodes"] == 100 and d4rl.protocol_for("cql", hopper)["episodes"] == 10
