"""Leaderboards that cannot be gamed: safe names, numbers recomputed and cross-checked, duplicates
found by what a run is, bounded free text, escaping in every output format, readers under the lock."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from run_dirs import make_bench, runs_of, snapshot

from offbench.errors import OffbenchError
from offbench.tracking.read_run import Refused

HOSTILE = "a|b\n<script>alert(1)</script> *x* _y_ `z` [l](http://e) $m$ & \\"


@pytest.fixture
def bench(tmp_path, monkeypatch):
    return make_bench(tmp_path, monkeypatch, {"bc": 40.0, "iql": 70.0}, datasets=("test/a",))


def submit(bench, runs, label=None, render=False):
    from offbench.leaderboard.spec import load_spec
    from offbench.leaderboard.submit import submit as submit_runs

    return submit_runs(load_spec("tb"), runs, label=label, render=render)


def edit_json(path, change):
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def edit_lines(run, change):
    """Apply change(line) to every evaluations.jsonl line, and keep summary.json's blocks equal to their lines."""
    path = run / "evaluations.jsonl"
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    for line in lines:
        change(line)
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    by_step = {line["step"]: line for line in lines}
    edit_json(
        run / "summary.json",
        lambda s: [s[which].update({k: by_step[s[which]["step"]].get(k) for k in s[which]}) for which in ("final", "best")],
    )


def refused(bench, runs, rule, label=None):
    """Submitting `runs` is refused by `rule`, and nothing under the test's folders changes."""
    before = snapshot(bench["root"].parent)
    with pytest.raises(Refused, match=rf"refused \({rule}\)"):
        submit(bench, runs, label=label)
    assert snapshot(bench["root"].parent) == before


# ------------------------------------------------------------------------------------ 1. names


@pytest.mark.parametrize("baseline", ["x/../../../../P", "<script>alert(1)</script>", "awac"])
def test_a_baseline_that_is_not_registered_is_refused(bench, baseline):
    runs = runs_of(bench, "bc")
    for run in runs:
        edit_json(run / "run.json", lambda info: info.update(baseline=baseline))
    refused(bench, runs, "baseline")


@pytest.mark.parametrize("label", ["../evil", "a/b", "", ".", "a|b", "x" * 129, "<b>"])
def test_unsafe_labels_are_refused_whether_given_or_defaulted(bench, label):
    before = snapshot(bench["root"].parent)
    with pytest.raises(OffbenchError, match="label"):
        submit(bench, runs_of(bench, "bc"), label=label)
    assert snapshot(bench["root"].parent) == before


def test_the_cli_refuses_a_forged_baseline_in_one_line(bench, run_cli):
    for run in runs_of(bench, "bc"):
        edit_json(run / "run.json", lambda info: info.update(baseline="x/../../../../P"))
    before = snapshot(bench["root"].parent)
    proc = run_cli("submit", *runs_of(bench, "bc"), "--benchmark", "tb")
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1 and "refused (baseline)" in proc.stderr
    assert snapshot(bench["root"].parent) == before


# ----------------------------------------------------------------------- 2. numbers recomputed


def _forged_score(runs):  # the headline number inflated 3.5x in evaluations and summary alike
    edit_lines(runs[0], lambda line: line.update(normalized_score=3.5 * line["normalized_score"]))


def _mean_not_of_returns(runs):
    edit_lines(runs[1], lambda line: line.update(mean_return=line["mean_return"] + 50.0, normalized_score=line["normalized_score"] + 5.0))


def _too_few_returns(runs):
    edit_lines(runs[0], lambda line: line.update(returns=line["returns"][:-1], lengths=line["lengths"][:-1]))


def _nan_return(runs):
    edit_lines(runs[0], lambda line: line["returns"].__setitem__(0, float("nan")))


def _success_out_of_range(runs):
    edit_lines(runs[0], lambda line: line.update(success_rate=1.5))


def _success_not_a_count(runs):  # 0.5 successes out of 5 episodes
    edit_lines(runs[0], lambda line: line.update(success_rate=0.1))


def _final_not_last(runs):
    edit_json(runs[0] / "summary.json", lambda s: s.update(final=s["best"] if s["best"] != s["final"] else {**s["final"], "step": 100}))


def _steps_disagree(runs):
    edit_json(runs[0] / "run.json", lambda info: info["config"].update(steps=123))


def _negative_seed(runs):
    edit_json(runs[0] / "run.json", lambda info: (info.update(seed=-1), info["config"].update(seed=-1)))


def _seed_not_an_integer(runs):
    edit_json(runs[0] / "run.json", lambda info: (info.update(seed="1"), info["config"].update(seed="1")))


def _seed_not_the_configs(runs):
    edit_json(runs[0] / "run.json", lambda info: info["config"].update(seed=7))


def _no_environment(runs):
    edit_json(runs[0] / "run.json", lambda info: info["evaluation"].pop("env"))


def _episodes_not_the_configs(runs):
    edit_json(runs[0] / "run.json", lambda info: info["config"].update(eval_episodes=9))


def _no_checkpoint(runs):
    (runs[0] / "checkpoints" / "last.pt").unlink()


@pytest.mark.parametrize(
    "forge, rule",
    [
        (_forged_score, "consistency"),
        (_mean_not_of_returns, "consistency"),
        (_too_few_returns, "consistency"),
        (_nan_return, "metric-finite"),
        (_success_out_of_range, "metric-range"),
        (_success_not_a_count, "consistency"),
        (_final_not_last, "schema"),
        (_steps_disagree, "schema"),
        (_negative_seed, "schema"),
        (_seed_not_an_integer, "schema"),
        (_seed_not_the_configs, "schema"),
        (_no_environment, "protocol"),
        (_episodes_not_the_configs, "schema"),
        (_no_checkpoint, "run-files"),
    ],
    ids=lambda value: getattr(value, "__name__", value).strip("_"),
)
def test_forged_runs_are_refused(bench, forge, rule):
    runs = runs_of(bench, "iql")
    forge(runs)
    refused(bench, runs, rule)


def test_scores_come_from_the_returns_and_the_benchmarks_own_card(bench, tmp_path, monkeypatch):
    """A user card shadowing the benchmark's card with another ref_max: the run's recorded normalised scores
    (made with the shadow) disagree with the benchmark card's and are refused; recomputed, they are accepted."""
    from offbench.data.cards import card_from_dict, read_card, write_card
    from offbench.leaderboard import scoring

    builtin = tmp_path / "builtin" / "datasets"
    write_card(
        card_from_dict(
            {
                "id": "test/a",
                "description": "the benchmark's own card",
                "format": "offbench",
                "source": {"recipe": {"generator": "test"}},
                "env": {"id": "Pendulum-v1", "suite": "gymnasium", "kwargs": {}},
                "scores": {"ref_min": -1000.0, "ref_max": 1000.0},
            }
        ),
        builtin / "test-a.toml",
    )
    monkeypatch.setattr(scoring, "builtin_cards", lambda: {"test/a": read_card(builtin / "test-a.toml")})  # as if it shipped
    assert scoring.benchmark_card("test/a").ref_max_score == 1000.0  # not the registered user card's 0.0
    runs = runs_of(bench, "iql")
    refused(bench, runs, "consistency")
    for run in runs:  # the same returns, scored the benchmark card's way: 100 * (R + 1000) / 2000
        edit_lines(run, lambda line: line.update(normalized_score=100 * (line["mean_return"] + 1000.0) / 2000.0))
    [path] = submit(bench, runs)
    entry = json.loads(path.read_text())
    finals = [json.loads((run / "evaluations.jsonl").read_text().splitlines()[-1])["returns"] for run in sorted(runs)]
    assert [r["score"] for r in entry["runs"]] == pytest.approx([100 * (sum(r) / len(r) + 1000) / 2000 for r in finals])


def test_the_same_runs_renamed_and_relabelled_are_duplicates(bench, tmp_path):
    submit(bench, runs_of(bench, "bc"))
    copies = []
    for run in runs_of(bench, "bc"):
        copy = shutil.copytree(run, tmp_path / "copies" / (run.name + "-renamed"))
        edit_json(copy / "run.json", lambda info, copy=copy: info.update(run_id=copy.name))
        copies.append(copy)
    refused(bench, copies, "duplicate", label="bc-again")
    # Seeds edited as well: the checkpoint still says it is the same run.
    for copy in copies:
        seed = json.loads((copy / "run.json").read_text())["seed"] + 10
        edit_json(copy / "run.json", lambda info, seed=seed: (info.update(seed=seed), info["config"].update(seed=seed)))
    refused(bench, copies, "duplicate", label="bc-again")


def test_one_run_twice_in_one_submission_is_a_duplicate(bench, tmp_path):
    runs = runs_of(bench, "bc")
    copy = shutil.copytree(runs[0], tmp_path / "copy")
    edit_json(copy / "run.json", lambda info: (info.update(seed=5, run_id="copy"), info["config"].update(seed=5)))
    refused(bench, [*runs, copy], "duplicate")


def test_entries_from_before_run_identities_still_catch_their_runs(bench):
    """An entry in the first format (no run identity, method or verification) still validates, and a run with one
    of its runs' seed, final and best evaluations and learning curve is that run."""
    from offbench.leaderboard.entries import load_entries, same_run
    from offbench.leaderboard.spec import load_spec

    [path] = submit(bench, runs_of(bench, "bc"))
    edit_json(path, lambda entry: (entry.pop("method"), [run.pop(key) for run in entry["runs"] for key in ("identity", "verification")]))
    [(_, entry)] = load_entries(load_spec("tb"))
    old = entry["runs"][0]
    new = {
        **{k: old[k] for k in ("seed", "final", "best", "curve")},
        "identity": {"evaluations_sha256": "0" * 64, "checkpoint_sha256": "1" * 64},
    }
    assert same_run(new, old, True) is not None
    assert same_run({**new, "seed": old["seed"] + 1}, old, True) is None


def test_the_same_evaluations_under_another_config_are_not_a_duplicate():
    """Greedy policies of two methods can score the very same episodes on a discrete suite (MTBC and MTBC+PCGrad
    did on MiniGrid); only the same config or the same checkpoint makes it the same run."""
    from offbench.leaderboard.entries import same_run as _same_run

    new = {"seed": 0, "identity": {"evaluations_sha256": "e" * 64, "checkpoint_sha256": "1" * 64}}
    old = {"seed": 0, "identity": {"evaluations_sha256": "e" * 64, "checkpoint_sha256": "2" * 64}}
    assert _same_run(new, old, same_setting=True) == "evaluations"
    assert _same_run(new, old, same_setting=False) is None
    assert _same_run({**new, "identity": {**new["identity"], "checkpoint_sha256": "2" * 64}}, old, same_setting=False) == "final checkpoint"


def test_one_network_acting_greedily_and_by_draws_is_two_policies_not_a_duplicate():
    """MTBC's weights acting greedily and by draws from their softmax (MTBC-sampled) are two rows; the same weights
    acting by the same rule under another label are one run."""
    from offbench.leaderboard.entries import acting_rule, check_against_accepted
    from offbench.tracking.read_run import Refused

    run = {"run_id": "r0", "seed": 0, "path": "r0", "identity": {"evaluations_sha256": "e" * 64, "checkpoint_sha256": "1" * 64}}
    greedy = {
        "label": "MTBC",
        "baseline": "bc",
        "dataset": {"id": "d"},
        "config_sha256": "a",
        "evaluation": {"deterministic": True},
        "runs": [run],
    }
    sampled_run = {**run, "identity": {"evaluations_sha256": "f" * 64, "checkpoint_sha256": "1" * 64}}
    sampled = {**greedy, "label": "MTBC-sampled", "config_sha256": "b", "evaluation": {"deterministic": False}, "runs": [sampled_run]}
    assert (acting_rule(greedy), acting_rule(sampled), acting_rule({})) == (True, False, True)
    check_against_accepted(sampled, [(Path("greedy.json"), greedy)])
    with pytest.raises(Refused, match="same final checkpoint"):
        check_against_accepted({**greedy, "label": "MTBC-again", "config_sha256": "b"}, [(Path("greedy.json"), greedy)])


@pytest.mark.parametrize("where", ["config", "code", "started_at"])
def test_free_text_copied_into_an_entry_is_bounded(bench, where):
    runs = runs_of(bench, "bc")
    long_text = "x" * 5000
    for run in runs:
        if where == "config":
            edit_json(run / "run.json", lambda info: info["config"].update(notes=long_text))
        elif where == "code":
            edit_json(run / "run.json", lambda info: info["code"].update(version=long_text))
        else:
            edit_json(run / "run.json", lambda info: info.update(started_at=long_text))
    refused(bench, runs, "free-text")


def test_an_edited_entry_file_is_an_error_naming_it(bench):
    from offbench.leaderboard.entries import load_entries
    from offbench.leaderboard.spec import load_spec

    [path] = submit(bench, runs_of(bench, "bc"))
    edit_json(path, lambda entry: entry.update(label="<script>"))
    with pytest.raises(OffbenchError, match=f"{path.name}.*entry label"):
        load_entries(load_spec("tb"))


# ------------------------------------------------------------------------------ 3. escaping


def _hostile_board(bench):
    """A board with hostile text everywhere a page shows text: labels, baselines and dataset ids of entries (as
    if an entry file had been edited by hand), the benchmark title, and a reported row."""
    import dataclasses

    from offbench.leaderboard.spec import ReportedRow, load_spec
    from offbench.leaderboard.table import board_from_entries

    spec = load_spec("tb")
    [path] = submit(bench, runs_of(bench, "bc"))
    entry = json.loads(path.read_text())
    entry.update(label=HOSTILE, baseline=HOSTILE)
    reported = ReportedRow(
        label=HOSTILE.replace("\n", " "),
        source={"paper": HOSTILE, "table": "T|1", "version": "<v>"},
        scores={"test/a": (1.0, 0.5)},
        note=HOSTILE,
    )
    spec = dataclasses.replace(spec, title=f"Title {HOSTILE}", reported=(reported,))
    return board_from_entries(spec, [(path, entry)])


def test_markdown_and_html_escape_hostile_text(bench):
    from offbench.leaderboard.render import render_html, render_markdown
    from offbench.leaderboard.table import compute_results

    board = _hostile_board(bench)
    results = compute_results(board)
    markdown = render_markdown(board.spec, board, results, [])
    assert "<script>" not in markdown and "<v>" not in markdown and "[l](http://e)" not in markdown
    tables = [line for line in markdown.splitlines() if line.startswith("|")]
    assert tables and all(line.replace("\\|", "").count("|") == tables[0].count("|") for line in tables[:4])
    assert "&lt;script&gt;" in markdown and "\\*x\\*" in markdown and "(reported \\[1\\])" in markdown
    page = render_html(board.spec, board, results, [])
    assert "<script>alert" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert '<tr class="reported">' in page and "&lt;v&gt;" in page


def test_the_html_page_shows_code_spans_of_the_description_as_code_and_nothing_else_as_html(bench):
    import dataclasses

    from offbench.leaderboard.render import build_board, render_html
    from offbench.leaderboard.spec import load_spec
    from offbench.leaderboard.table import compute_results

    submit(bench, runs_of(bench, "bc"))
    description = "Train on `minigrid/mt3-*` with `offbench run bc --steps 10`; <script>alert(1)</script> and `<b>x</b>` & `a"
    spec = dataclasses.replace(load_spec("tb"), description=description)
    board = build_board(spec)
    page = render_html(spec, board, compute_results(board), [])
    paragraph = next(line for line in page.splitlines() if line.startswith("<p>Train on"))
    assert paragraph == (
        "<p>Train on <code>minigrid/mt3-*</code> with <code>offbench run bc --steps 10</code>; "
        "&lt;script&gt;alert(1)&lt;/script&gt; and <code>&lt;b&gt;x&lt;/b&gt;</code> &amp; `a</p>"
    )


def test_svg_figures_escape_hostile_labels(bench, tmp_path):
    from offbench.leaderboard.render import write_figures

    board = _hostile_board(bench)
    figures = write_figures(board, tmp_path / "out")
    assert figures
    for figure in figures:
        svg = (tmp_path / "out" / figure.file).read_text()
        assert "<script>" not in svg and "&lt;script&gt;alert(1)&lt;/script&gt;" in svg


# ------------------------------------------------------------------------------ 4. the lock


@pytest.mark.parametrize("command", ["build", "render"])
def test_build_and_render_read_the_entries_under_the_lock(bench, monkeypatch, command):
    from filelock import FileLock, Timeout

    from offbench.leaderboard import commands, render

    submit(bench, runs_of(bench, "bc"))
    original, held = render.load_entries, []

    def load_entries_checking_the_lock(spec):
        try:
            probe = FileLock(str(spec.folder / ".submit.lock"))
            probe.acquire(timeout=0)
            probe.release()
            held.append(False)
        except Timeout:
            held.append(True)
        return original(spec)

    monkeypatch.setattr(render, "load_entries", load_entries_checking_the_lock)
    if command == "build":
        commands.build("tb", runs=None, out=None, root=None)
    else:
        commands.render("tb", runs=None, out=None, root=None)
    assert held == [True]
