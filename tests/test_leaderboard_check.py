"""`offbench leaderboard check`: every admission rule re-run over every entry file, so a hand-edited entry (a pull
request) is refused as a submission would be, at check, build, render and show alike."""

from __future__ import annotations

import json

import pytest
from run_dirs import REPO_ROOT, make_bench, runs_of

from offbench.tracking.read_run import Refused


@pytest.fixture
def accepted(tmp_path, monkeypatch):
    """A board 'tb' with two accepted entries (bc and iql on test/a, three seeds each)."""
    from offbench.leaderboard.spec import load_spec
    from offbench.leaderboard.submit import submit

    bench = make_bench(tmp_path, monkeypatch, {"bc": 40.0, "iql": 70.0}, datasets=("test/a",))
    spec = load_spec("tb")
    paths = [submit(spec, runs_of(bench, name), render=False)[0] for name in ("bc", "iql")]
    return spec, paths


def edit(path, change):
    entry = json.loads(path.read_text())
    change(entry)
    path.write_text(json.dumps(entry, allow_nan=True))


def check(spec):
    from offbench.leaderboard.entries import load_entries

    return load_entries(spec)


def score_and_final(run, value):
    run["score"] = value
    run["final"]["normalized_score"] = value
    run["final"]["mean_return"] = value * 10 - 1000  # consistent with the card's reference scores (-1000, 0)
    run["curve"]["score"][-1] = value


EDITS = {
    "score of 1e6 alone": (lambda e: e["runs"][0].update(score=1e6), "metric-range"),
    "score raised alone, within range": (lambda e: e["runs"][0].update(score=99.0), "consistency"),
    "score, final block and curve raised together": (lambda e: score_and_final(e["runs"][0], 1e6), "metric-range"),
    "score of 1e308, its final mean_return overflowing to infinity": (lambda e: score_and_final(e["runs"][0], 1e308), "schema"),
    "score differing from the recorded final value": (lambda e: e["runs"][1].update(score=e["runs"][1]["score"] + 0.5), "consistency"),
    "one run listed three times": (lambda e: e.update(runs=[e["runs"][0]] * 3), "duplicate"),
    "n=1 under min_seeds 3": (lambda e: e.update(runs=e["runs"][:1]), "seed-count"),
    "an unknown baseline": (lambda e: e.update(baseline="awac", label="awac", method={"kind": "built-in", "name": "awac"}), "baseline"),
    "a zeroed dataset checksum": (lambda e: e["dataset"].update(content_sha256="0" * 64), "dataset-checksum"),
    "an edited config under the old config_sha256": (lambda e: e["config"].update(lr=1.0), "config-consistency"),
    "a verified mark without a replay": (lambda e: e["runs"][0].update(verification={"status": "verified"}), "schema"),
    "another protocol": (lambda e: e["evaluation"].update(episodes=50), "protocol"),
}


@pytest.mark.parametrize("case", EDITS)
def test_a_hand_edited_entry_is_refused_by_the_rule_it_breaks(accepted, case):
    spec, paths = accepted
    change, rule = EDITS[case]
    edit(paths[0], change)
    with pytest.raises(Refused, match=rf"{paths[0].name}: refused \({rule}\)"):
        check(spec)


def test_an_entry_merged_into_another_baselines_row_is_refused(accepted):
    spec, paths = accepted
    edit(paths[1], lambda e: e.update(label="bc"))  # iql's entry under bc's row
    with pytest.raises(Refused, match=r"refused \(config-consistency\): row 'bc' holds baseline bc"):
        check(spec)


def test_a_copied_entry_is_a_duplicate_whatever_its_label(accepted):
    spec, paths = accepted
    copy = paths[0].with_name("zz-copy.json")
    copy.write_text(paths[0].read_text())
    edit(copy, lambda e: e.update(label="bc-again"))
    with pytest.raises(Refused, match=r"zz-copy.json: refused \(duplicate\)"):
        check(spec)


def test_the_cli_check_reports_each_board_and_fails_on_a_broken_one(accepted, run_cli):
    spec, paths = accepted
    assert run_cli("leaderboard", "check", "tb").returncode == 0
    edit(paths[0], lambda e: e["runs"][0].update(score=1e6))
    proc = run_cli("leaderboard", "check")
    assert proc.returncode == 2 and "refused (metric-range)" in proc.stderr
    assert run_cli("leaderboard", "show", "tb").returncode == 2  # tables are built from checked entries only


def test_the_repositorys_leaderboards_pass_every_rule(monkeypatch):
    """What CI runs on every pull request: `offbench leaderboard check` over leaderboards/."""
    from offbench.leaderboard.spec import known_benchmarks, load_spec

    monkeypatch.delenv("OFFBENCH_LEADERBOARDS", raising=False)
    root = REPO_ROOT / "leaderboards"
    names = known_benchmarks(root)
    assert {"pendulum-scripted", "darkroom", "minigrid-mt"} <= set(names)
    for name in names:
        check(load_spec(name, root))
