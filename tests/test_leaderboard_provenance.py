"""A leaderboard row traces to one clean commit: runs made from uncommitted code, or seeds made at different commits,
are refused by default (rule `provenance`), admitted with --allow-dirty, and the page's entries table says which."""

from __future__ import annotations

import json

import pytest
from run_dirs import make_bench, runs_of, snapshot


@pytest.fixture
def bench(tmp_path, monkeypatch):
    monkeypatch.delenv("OFFBENCH_ALLOW_DIRTY")  # the suite admits dirty runs by default; this file tests the rule
    return make_bench(tmp_path, monkeypatch, {"bc": 60.0}, ("test/a",))


def edit_code(run, **code):
    info = json.loads((run / "run.json").read_text())
    info["code"].update(code)
    (run / "run.json").write_text(json.dumps(info))


def test_a_run_from_a_dirty_tree_is_refused_then_admitted_and_marked(bench, run_cli):
    runs = runs_of(bench, "bc", "test/a")
    edit_code(runs[1], git_dirty=True)
    before = snapshot(bench["folder"])
    proc = run_cli("submit", *runs, "--benchmark", "tb", "--no-render")
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert "refused (provenance)" in proc.stderr and "uncommitted changes" in proc.stderr and "--allow-dirty" in proc.stderr
    assert snapshot(bench["folder"]) == before

    run_cli("submit", *runs, "--benchmark", "tb", "--no-render", "--allow-dirty", check=True)
    from offbench.leaderboard.render import build_board
    from offbench.leaderboard.spec import load_spec

    [summary] = build_board(load_spec("tb")).entries
    assert summary["provenance"] == "dirty tree"


def test_seeds_made_at_different_commits_are_refused(bench, run_cli):
    runs = runs_of(bench, "bc", "test/a")
    edit_code(runs[2], git_commit="f" * 40)
    proc = run_cli("submit", *runs, "--benchmark", "tb", "--no-render")
    assert proc.returncode == 2 and "refused (provenance)" in proc.stderr and "different commits" in proc.stderr


def test_clean_runs_at_one_commit_pass_and_read_clean(bench):
    from offbench.leaderboard.render import build_board
    from offbench.leaderboard.spec import load_spec
    from offbench.leaderboard.submit import submit

    submit(load_spec("tb"), runs_of(bench, "bc", "test/a"), render=False)
    [summary] = build_board(load_spec("tb")).entries
    assert summary["provenance"] == "clean"
