"""Leaderboard files read through their records: benchmark.toml (`BenchmarkFile`) and entry files
(`LeaderboardEntry`). A bad field is one line naming the file and the field, the entry a submission writes is what
the record writes, and the field tables in docs/leaderboards.md are the records'."""

from __future__ import annotations

import json
import re

import pytest
from run_dirs import make_bench, runs_of, write_benchmark

from offbench.errors import OffbenchError
from offbench.leaderboard.entries import DOCS_PAGE, LEADERBOARD_RECORDS, entry_record, load_entries
from offbench.leaderboard.scoring import protocol_problem
from offbench.leaderboard.spec import load_spec
from offbench.records import fill_field_tables, to_dict
from offbench.tracking.read_run import Refused

CHECKSUM = "ab" * 32


def test_the_field_tables_in_the_leaderboards_doc_are_the_records():
    page = DOCS_PAGE.read_text()
    assert fill_field_tables(page, *LEADERBOARD_RECORDS) == page, "run offbench.leaderboard.entries.write_field_docs()"


# ------------------------------------------------------------------------------ benchmark.toml
BOARD_EDITS = {
    "wrong type": ({"min_seeds": "three"}, r"'min_seeds' must be an integer, got 'three'"),
    "unknown key": (
        {"seeds": 3},
        r"'seeds' is not a known key \(known: behaviour, bootstrap_reps, dataset_checksums, dataset_made_on, datasets",
    ),
    "unknown protocol key": ({"evaluation": {"episodes": 5, "epsiodes": 5}}, r"'evaluation.epsiodes' is not a known key"),
    "missing key": ({"metric": None}, r"missing required key 'metric'"),
    "out of range": ({"bootstrap_reps": 10}, r"'bootstrap_reps' must be at least 100, got 10"),
    "out of range in a baseline's protocol": (
        {"evaluation": {"episodes": 5, "baseline": {"dt": {"episodes": 0}}}},
        r"'evaluation.baseline.dt.episodes' must be at least 1, got 0",
    ),
    "unknown metric": ({"metric": "reward"}, r"'metric' must be one of normalized_score, success_rate"),
    "empty protocol": ({"evaluation": {}}, r"'evaluation' must give the protocol"),
    "a checksum that is not one": ({"dataset_checksums": {"test/a": "abc"}}, r"'dataset_checksums.test/a' must be 64 lowercase hex"),
    "a checksum of another dataset": (
        {"dataset_checksums": {"test/z": CHECKSUM}},
        r"'dataset_checksums' names 'test/z', which is not in 'datasets'",
    ),
    "the kernels of an unpinned dataset": (
        {"dataset_made_on": {"test/a": {"torch_cpu_capability": "AVX2", "numpy_simd": ["X86_V3"]}}},
        r"'dataset_made_on' names 'test/a', which has no pin in 'dataset_checksums'",
    ),
    "kernels without torch's": (
        {"dataset_checksums": {"test/a": CHECKSUM}, "dataset_made_on": {"test/a": {"numpy_simd": ["X86_V3"]}}},
        r"missing required key 'dataset_made_on.test/a.torch_cpu_capability'",
    ),
    "a dataset twice": ({"datasets": ["test/a", "test/a"]}, r"'datasets' lists a dataset twice"),
    "an in-context metric without in-context episodes": ({"metric": "regret"}, r"metric 'regret' needs evaluation.in_context_episodes"),
    "an in-context metric without in-context episodes for one dataset": (
        {"datasets": ["test/a", "test/b"], "metric": "regret", "evaluation": {"dataset": {"test/a": {"in_context_episodes": 300}}}},
        r"metric 'regret' needs evaluation.in_context_episodes \(for dataset 'test/b'\)",
    ),
    "a protocol table of another dataset": (
        {"evaluation": {"episodes": 5, "dataset": {"test/z": {"episodes": 50}}}},
        r"'evaluation.dataset' names 'test/z', which is not in 'datasets'",
    ),
}


@pytest.mark.parametrize("case", BOARD_EDITS)
def test_a_bad_benchmark_toml_is_one_line_naming_the_file_and_the_key(tmp_path, case):
    overrides, problem = BOARD_EDITS[case]
    given = {key: value for key, value in overrides.items() if key != "datasets" and value is not None}
    path = write_benchmark(tmp_path, "tb", overrides.get("datasets", ["test/a"]), **given)
    for key in (key for key, value in overrides.items() if value is None):  # a required key left out
        path.write_text("\n".join(line for line in path.read_text().splitlines() if not line.startswith(f"{key} =")))
    with pytest.raises(OffbenchError, match=rf"^{re.escape(str(path))}: {problem}") as caught:
        load_spec("tb", tmp_path)
    assert len(str(caught.value).splitlines()) == 1


def test_a_benchmark_resolves_with_its_defaults(tmp_path):
    path = write_benchmark(tmp_path, "tb", ["test/a"], evaluation={"episodes": 5, "baseline": {"dt": {"episodes": 50}}})
    path.write_text(
        "\n".join(line for line in path.read_text().splitlines() if not line.startswith(("title", "score", "min_seeds", "bootstrap_reps")))
    )
    spec = load_spec("tb", tmp_path)
    assert (spec.title, spec.score, spec.min_seeds, spec.bootstrap_reps) == ("tb", "final", 3, 2000)
    assert spec.protocol == {"episodes": 5, "baseline": {"dt": {"episodes": 50}}}
    assert spec.protocol_for("dt", "test/a") == {"episodes": 50} and spec.protocol_for("bc", "test/a") == {"episodes": 5}


def test_a_datasets_protocol_keys_apply_to_its_runs_and_a_baselines_win(tmp_path):
    """Cards whose histories differ in length score regret at their own horizon; a baseline's own protocol still wins."""
    evaluation = {
        "in_context_episodes": 500,
        "every_steps": 100,
        "dataset": {"short": {"in_context_episodes": 300}},
        "baseline": {"x": {"every_steps": 7}},
    }
    write_benchmark(tmp_path, "tb", ["long", "short"], metric="regret", evaluation=evaluation)
    spec = load_spec("tb", tmp_path)
    assert spec.protocol_for("ad", "long") == {"in_context_episodes": 500, "every_steps": 100}
    assert spec.protocol_for("ad", "short") == {"in_context_episodes": 300, "every_steps": 100}
    assert spec.protocol_for("x", "short") == {"in_context_episodes": 300, "every_steps": 7}
    assert (spec.dataset_note("short"), spec.dataset_note("long")) == (" on short", "")
    five_hundred = {"protocol": "in-context", "tasks": "held-out", "in_context_episodes": 500, "every_steps": 100}
    assert protocol_problem(spec, "ad", "long", five_hundred, 1000, black_box=False) is None
    assert protocol_problem(spec, "ad", "short", five_hundred, 1000, black_box=False) == (
        "run.json evaluation.in_context_episodes is 500; benchmark tb requires 300"
    )


# ------------------------------------------------------------------------------ entry files
@pytest.fixture
def accepted(tmp_path, monkeypatch):
    """A board 'tb' with one accepted entry (bc on test/a, three seeds)."""
    from offbench.leaderboard.submit import submit

    bench = make_bench(tmp_path, monkeypatch, {"bc": 40.0}, datasets=("test/a",))
    spec = load_spec("tb")
    [path] = submit(spec, runs_of(bench, "bc"), render=False)
    return spec, path


def edit(path, change):
    entry = json.loads(path.read_text())
    change(entry)
    path.write_text(json.dumps(entry))


ENTRY_EDITS = {
    "wrong type": (lambda e: e["runs"][1].update(seed="1"), r"'runs\[1\].seed' must be an integer, got '1'"),
    "wrong type, nested": (lambda e: e["runs"][0]["final"].update(step=1.5), r"'runs\[0\].final.step' must be an integer, got 1.5"),
    "unknown key": (lambda e: e.update(rank=1), r"'rank' is not a known key \(known: baseline, benchmark, config"),
    "unknown key in a run": (lambda e: e["runs"][0].update(notes="best run"), r"'runs\[0\].notes' is not a known key"),
    "missing key": (lambda e: e.pop("config_sha256"), r"missing required key 'config_sha256'"),
    "missing key in a run": (lambda e: e["runs"][2].pop("curve"), r"missing required key 'runs\[2\].curve'"),
    "out of range": (lambda e: e["runs"][0].update(seed=-1), r"'runs\[0\].seed' must be at least 0, got -1"),
    "unknown method kind": (lambda e: e.update(method={"kind": "magic", "name": "bc"}), r"'method.kind' must be one of built-in"),
    "a curve of unequal lists": (lambda e: e["runs"][0]["curve"]["step"].pop(), r"'runs\[0\].curve' needs equally long"),
    "a verified run without its replay": (
        lambda e: e["runs"][0].update(verification={"status": "verified"}),
        r"'runs\[0\].verification.status' is verified, but where, when and by which offbench",
    ),
    "no runs": (lambda e: e.update(runs=[]), r"'runs' must be a non-empty list"),
    "an identity without its digest": (
        lambda e: e["runs"][0]["identity"].update(evaluations_sha256="x"),
        r"'runs\[0\].identity.evaluations_sha256' must be a sha256 hex digest",
    ),
}


@pytest.mark.parametrize("case", ENTRY_EDITS)
def test_a_hand_edited_entry_field_is_one_line_naming_the_file_and_the_field(accepted, case):
    spec, path = accepted
    change, problem = ENTRY_EDITS[case]
    edit(path, change)
    with pytest.raises(Refused, match=rf"^{re.escape(str(path))}: refused \(schema\): {problem}") as caught:
        load_entries(spec)
    assert len(str(caught.value).splitlines()) == 1


def test_check_and_render_name_the_entry_file_and_the_field(accepted, run_cli):
    spec, path = accepted
    edit(path, lambda e: e["runs"][0].update(steps="300"))
    problem = f"{path}: refused (schema): 'runs[0].steps' must be an integer, got '300'"
    for command in (("leaderboard", "check", "tb"), ("leaderboard", "render", "tb")):
        proc = run_cli(*command)
        assert proc.returncode == 2 and any(line.endswith(problem) for line in proc.stderr.splitlines()), proc.stderr
        assert "Traceback" not in proc.stderr
    assert not (spec.folder / "README.md").exists()  # nothing rendered from an entry that does not read


def test_a_submitted_entry_is_what_its_record_writes(accepted):
    _, path = accepted
    written = json.loads(path.read_text())
    assert to_dict(entry_record(written, path)) == written
    run = written["runs"][0]
    assert run["env"] is not None and "checkpoint_sha256" in run["identity"] and "normalized_score" in run["final"]
    assert "success_rate" in run["final"] and run["final"]["success_rate"] is None  # measured fields keep their nulls


def test_entries_from_before_methods_identities_and_verification_still_read(accepted):
    spec, path = accepted
    edit(path, lambda e: (e.pop("method"), [run.pop(key) for run in e["runs"] for key in ("identity", "verification")]))
    [(_, entry)] = load_entries(spec)
    assert "method" not in entry and "identity" not in entry["runs"][0]


def test_the_contextual_bandit_boards_sweeps_evaluate_each_card_at_its_history_length():
    from run_dirs import REPO_ROOT

    from offbench.sweep.spec import load_sweep

    folder = REPO_ROOT / "leaderboards" / "contextual-bandit"
    pulls = {
        (run.baseline, run.dataset): run.values["eval_episodes"]
        for name in ("sweep-cpu-ad", "sweep-cpu-headless-ad")
        for run in load_sweep(folder / f"{name}.toml").expand()
    }
    assert pulls == {
        ("ad", "contextual-bandit-linucb"): 500,
        ("ad", "contextual-bandit-thompson"): 500,
        ("ad", "contextual-bandit-headless-linucb"): 300,
        ("headless-ad", "contextual-bandit-headless-linucb"): 300,
    }
