"""Leaderboards: submission rules, refusals that leave everything as it was, parallel submissions, roll-up statistics."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib

import numpy as np
import pytest
import scipy.stats
from run_dirs import REPO_ROOT, make_bench, register_dataset, runs_of, snapshot, write_benchmark, write_run

DATASETS = ["test/a", "test/b"]
# Final normalised scores per baseline: bc clearly below iql on both datasets.
LEVELS = {"bc": 40.0, "iql": 70.0}


@pytest.fixture
def bench(tmp_path, monkeypatch):
    return make_bench(tmp_path, monkeypatch, LEVELS, DATASETS)


def submit_in_process(bench, baseline, render=False, label=None):
    from offbench.leaderboard.spec import load_spec
    from offbench.leaderboard.submit import submit

    return submit(load_spec("tb"), runs_of(bench, baseline), label=label, render=render)


def test_rliable_imports_with_the_pinned_pandas():
    """rliable pulls arch, which fails at import under pandas 3: the pin pandas<3 is deliberate."""
    import pandas
    from rliable import library, metrics  # noqa: F401

    assert int(pandas.__version__.split(".")[0]) < 3
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    assert any(dep.replace(" ", "").startswith("pandas") and "<3" in dep for dep in project["dependencies"])
    assert any(dep.startswith("rliable") for dep in project["optional-dependencies"]["stats"])


def test_submit_rolls_up_with_rliable_statistics(bench, run_cli):
    submit_in_process(bench, "bc")
    folder = bench["folder"]
    first = snapshot(folder / "entries")
    proc = run_cli("submit", *runs_of(bench, "iql"), "--benchmark", "tb")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("accepted:") == 2
    assert {k: v for k, v in snapshot(folder / "entries").items() if k in first} == first  # accepted entries untouched
    entries = sorted((folder / "entries").glob("*.json"))
    assert len(entries) == 4
    entry = json.loads(next(p for p in entries if "--iql--test-a--" in p.name).read_text())
    assert entry["dataset"]["content_sha256"] == bench["checksums"]["test/a"]
    assert [r["seed"] for r in entry["runs"]] == [0, 1, 2]
    assert entry["runs"][0]["code"]["git_commit"].startswith("0123")
    assert "seed" not in entry["config"] and entry["config"]["lr"] == 3e-4
    assert entry["runs"][0]["curve"]["step"] == [100, 200, 300]

    results = json.loads((folder / "results.json").read_text())
    per_seed = {}
    for path in entries:
        e = json.loads(path.read_text())
        per_seed[(e["label"], e["dataset"]["id"])] = [r["score"] for r in e["runs"]]
    for cell in results["cells"]:
        values = per_seed[(cell["label"], cell["dataset"])]
        assert cell["mean"] == pytest.approx(np.mean(values))
        assert cell["low"] <= cell["mean"] <= cell["high"] and cell["seeds"] == 3
    iqm = next(a for a in results["aggregates"] if a["label"] == "iql" and a["aggregate"] == "IQM")
    matrix = np.stack([per_seed[("iql", d)] for d in DATASETS], axis=1)
    assert iqm["estimate"] == pytest.approx(scipy.stats.trim_mean(matrix, 0.25, axis=None))
    assert iqm["low"] <= iqm["estimate"] <= iqm["high"]
    better = next(p for p in results["probability_of_improvement"] if p["x"] == "iql" and p["y"] == "bc")
    assert better["probability"] == pytest.approx(1.0)
    assert results["score"] == "final"

    readme = (folder / "README.md").read_text()
    assert "| bc " in readme and "| iql " in readme and "final normalised score" in readme
    assert "figures/curves.svg" in readme and "figures/profiles.svg" in readme
    html = (folder / "index.html").read_text()
    assert '<table id="scores" class="sortable">' in html and '<th data-better="higher">test/a</th>' in html and "<script>" in html
    for name in ("curves", "aggregates", "profiles"):
        assert (folder / "figures" / f"{name}.svg").read_text().lstrip().startswith("<?xml")

    # Rendering is reproducible: the same entries give byte-identical files.
    from offbench.leaderboard.render import render_benchmark
    from offbench.leaderboard.spec import load_spec

    before = snapshot(folder)
    render_benchmark(load_spec("tb"))
    assert snapshot(folder) == before

    shown = run_cli("leaderboard", "show", "tb")
    assert shown.returncode == 0 and "iql" in shown.stdout and "P(row > column)" in shown.stdout

    for path in entries:  # every entry withdrawn: no figure of them is left behind
        path.unlink()
    render_benchmark(load_spec("tb"))
    assert not list((folder / "figures").glob("*.svg")) and "No accepted entries yet" in (folder / "README.md").read_text()


def _missing_summary(bench, runs):
    (runs[0] / "summary.json").unlink()


def _tampered_checksum(bench, runs):
    info = json.loads((runs[1] / "run.json").read_text())
    info["dataset"]["content_sha256"] = "f" * 64
    (runs[1] / "run.json").write_text(json.dumps(info))


def _nan_score(bench, runs):
    """The last evaluation diverged: NaN in evaluations.jsonl and in summary.json (as json.dumps writes it)."""
    summary = json.loads((runs[2] / "summary.json").read_text())
    for block in ("final", "best"):
        if summary[block]["step"] == summary["final"]["step"]:
            summary[block]["normalized_score"] = float("nan")
    (runs[2] / "summary.json").write_text(json.dumps(summary))
    lines = [json.loads(line) for line in (runs[2] / "evaluations.jsonl").read_text().splitlines()]
    lines[-1]["normalized_score"] = float("nan")
    (runs[2] / "evaluations.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))


def _other_protocol(bench, runs):
    info = json.loads((runs[0] / "run.json").read_text())
    info["evaluation"]["episodes"] = 7
    (runs[0] / "run.json").write_text(json.dumps(info))


def _other_environment(bench, runs):
    info = json.loads((runs[0] / "run.json").read_text())
    info["evaluation"]["env"] = {"id": "Pendulum-v1", "suite": "gymnasium", "kwargs": {"g": 3.7}}
    (runs[0] / "run.json").write_text(json.dumps(info))


def _too_few_seeds(bench, runs):
    import shutil

    shutil.rmtree(runs[2])


def _other_config(bench, runs):
    info = json.loads((runs[1] / "run.json").read_text())
    info["config"]["lr"] = 1e-3
    (runs[1] / "run.json").write_text(json.dumps(info))


@pytest.mark.parametrize(
    "damage, rule",
    [
        (_missing_summary, "run-files"),
        (_tampered_checksum, "dataset-checksum"),
        (_nan_score, "metric-finite"),
        (_other_protocol, "protocol"),
        (_other_environment, "protocol"),
        (_too_few_seeds, "seed-count"),
        (_other_config, "config-consistency"),
    ],
    ids=["no-summary", "tampered-checksum", "nan-score", "other-protocol", "other-environment", "too-few-seeds", "mixed-configs"],
)
def test_bad_runs_are_refused_and_nothing_changes(bench, run_cli, damage, rule):
    submit_in_process(bench, "bc")
    (bench["folder"] / "README.md").write_text("the rendered table\n")  # stands for a rendered page: must stay
    before = snapshot(bench["folder"])
    runs = runs_of(bench, "iql", "test/a")
    damage(bench, runs)
    proc = run_cli("submit", *runs_of(bench, "iql", "test/a"), "--benchmark", "tb")
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and f"refused ({rule})" in lines[0], proc.stderr
    assert snapshot(bench["folder"]) == before


def test_unknown_benchmark_and_resubmissions_are_refused(bench, run_cli):
    submit_in_process(bench, "bc")
    before = snapshot(bench["folder"])
    proc = run_cli("submit", *runs_of(bench, "iql"), "--benchmark", "no-such-benchmark")
    assert proc.returncode == 2 and "unknown benchmark 'no-such-benchmark'" in proc.stderr and "tb" in proc.stderr
    proc = run_cli("submit", *runs_of(bench, "bc", "test/a"), "--benchmark", "tb")
    assert proc.returncode == 2 and "refused (duplicate)" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    # Same baseline, new config, same row name: refused; under its own --label it is a new row.
    for run in runs_of(bench, "iql", "test/a"):
        info = json.loads((run / "run.json").read_text())
        info["baseline"], info["run_id"] = "bc", info["run_id"] + "-variant"
        info["config"]["lr"] = 1e-3
        (run / "run.json").write_text(json.dumps(info))
    proc = run_cli("submit", *runs_of(bench, "iql", "test/a"), "--benchmark", "tb")
    assert proc.returncode == 2 and "refused (config-consistency)" in proc.stderr
    assert snapshot(bench["folder"]) == before
    proc = run_cli("submit", *runs_of(bench, "iql"), "--benchmark", "tb", "--label", "bc-lr1e-3")
    assert proc.returncode == 2 and "several baselines" in proc.stderr
    from offbench.leaderboard.spec import load_spec
    from offbench.leaderboard.submit import submit

    written = submit(load_spec("tb"), runs_of(bench, "iql", "test/a"), label="bc-lr1e-3", render=False)
    assert len(written) == 1 and json.loads(written[0].read_text())["label"] == "bc-lr1e-3"


def test_a_run_on_a_dataset_outside_the_benchmark_is_refused(bench, run_cli):
    checksum = register_dataset("test/other", seed=5)
    for seed in range(3):
        write_run(bench["runs"], "bc", "test/other", checksum, seed, [1.0, 2.0, 3.0])
    proc = run_cli("submit", *runs_of(bench, "bc", "test/other"), "--benchmark", "tb")
    assert proc.returncode == 2 and "refused (benchmark-dataset)" in proc.stderr
    assert not (bench["folder"] / "entries").exists()


def test_parallel_submissions_lose_nothing(bench, tmp_path):
    """Eight processes at once: six distinct rows all land; two racing copies of one row land once."""
    for k in range(6):
        for seed in range(3):
            write_run(tmp_path / f"batch{k}", "bc", "test/a", bench["checksums"]["test/a"], seed, [10.0 * k, 11.0 * k, 12.0 * k + seed])
    batches = [(tmp_path / f"batch{k}", f"algo{k}") for k in range(6)] + [(tmp_path / "batch0", "algo0-again")]
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "offbench", "submit", str(b), "--benchmark", "tb", "--no-render", "--label", label],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for b, label in batches
    ]
    outcomes = [(p.wait(timeout=120), p.stderr.read()) for p in procs]
    for p in procs:
        p.stdout.close()
        p.stderr.close()
    assert sum(code == 0 for code, _ in outcomes) == 6, outcomes
    refused = [err for code, err in outcomes if code != 0]
    assert len(refused) == 1 and "refused (duplicate)" in refused[0]
    entries = [json.loads(p.read_text()) for p in (bench["folder"] / "entries").glob("*.json")]
    first_of_the_twins = {"algo0", "algo0-again"} & {e["label"] for e in entries}  # whichever process locked first
    assert len(first_of_the_twins) == 1
    assert sorted(e["label"] for e in entries) == sorted([*first_of_the_twins, *(f"algo{k}" for k in range(1, 6))])
    assert not list((bench["folder"] / "entries").glob(".*.tmp"))


def test_preview_runs_without_touching_the_leaderboard(bench, run_cli, tmp_path):
    submit_in_process(bench, "bc")
    (bench["folder"] / "README.md").write_text("the rendered table\n")
    before = snapshot(bench["folder"])
    (runs_of(bench, "bc", "test/a")[0] / "summary.json").unlink()  # already accepted anyway; now also broken
    proc = run_cli("leaderboard", "build", "tb", "--runs", bench["runs"])
    assert proc.returncode == 2 and "--out" in proc.stderr
    out = tmp_path / "preview.json"
    proc = run_cli("leaderboard", "build", "tb", "--runs", bench["runs"], "--out", out)
    assert proc.returncode == 0, proc.stderr
    assert "not shown" in proc.stderr and "run-files" in proc.stderr
    labels = {c["label"] for c in json.loads(out.read_text())["cells"]}
    assert labels == {"bc", "iql"}
    assert snapshot(bench["folder"]) == before


def test_bad_benchmark_spec_is_one_line(bench, run_cli):
    write_benchmark(bench["root"], "broken", DATASETS, metric="episode_length")
    proc = run_cli("leaderboard", "show", "broken")
    assert proc.returncode == 2 and "'metric' must be one of" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
