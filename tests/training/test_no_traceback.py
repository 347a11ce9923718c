"""Broken sweep specs, sweep state, checkpoints and run.json fields are one line naming the file and field, exit 2,
with nothing changed on disk (the hardening pass's "no traceback, ever" cases)."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

TINY = ["--steps", "10", "--set", "eval_every=10", "--set", "eval_episodes=1", "--set", "log_every=10", "--set", "checkpoint_every=10"]
SPEC = (
    'name = "t"\nbaselines = ["bc"]\ndatasets = ["pendulum-scripted"]\nseeds = [0]\n'
    "[set]\nsteps = 10\neval_every = 10\neval_episodes = 1\nlog_every = 10\ncheckpoint_every = 10\n"
)


def one_line_error(code: int, err: str, *needles: str) -> None:
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert all(needle in err for needle in needles), err


@pytest.fixture
def finished(cli, tmp_path, pendulum):
    code, _, err = cli("run", "baseline", "bc", "--dataset", "pendulum-scripted", "--out", tmp_path, "--name", "done", *TINY)
    assert code == 0, err
    return tmp_path / "done"


def unfinished_copy(run, name):
    copy = shutil.copytree(run, run.parent / name)
    (copy / "summary.json").unlink()
    return copy


@pytest.mark.parametrize("command", [["sweep"], ["sweep", "status"]])
def test_a_latin1_sweep_spec(cli, tmp_path, command):
    spec = tmp_path / "spec.toml"
    spec.write_bytes(SPEC.replace('"t"', '"caf\xe9"').encode("latin-1"))
    one_line_error(*cli(*command, spec, "--runs", tmp_path / "runs")[::2], "spec.toml: sweep spec is not UTF-8 text")


@pytest.mark.parametrize(
    "state, problem",
    [
        ([1, 2], "must hold an object with a 'failed' object"),
        ({"failed": {"bc-pendulum-scripted-s0": {"error": "boom"}}}, "needs a non-negative integer 'attempts'"),
    ],
)
def test_a_broken_sweep_state_file(cli, tmp_path, pendulum, state, problem):
    spec, runs = tmp_path / "spec.toml", tmp_path / "runs"
    spec.write_text(SPEC)
    (runs / ".sweep").mkdir(parents=True)
    (runs / ".sweep" / "state.json").write_text(json.dumps(state))
    one_line_error(*cli("sweep", "status", spec, "--runs", runs)[::2], "state.json", problem)


def test_a_truncated_summary_is_reported_not_raised_and_the_summary_starts_its_own_line(cli, run_cli, tmp_path, pendulum):
    spec, runs = tmp_path / "spec.toml", tmp_path / "runs"
    spec.write_text(SPEC)
    proc = run_cli("sweep", spec, "--runs", runs)  # stdout a pipe, as under a batch scheduler
    assert proc.returncode == 0, proc.stderr
    assert any(line.startswith("summary: 1 done") for line in proc.stderr.splitlines()), proc.stderr  # not glued to the counts
    summary = runs / "bc-pendulum-scripted-s0" / "summary.json"
    summary.write_text(summary.read_text()[:30])
    code, out, err = cli("sweep", "status", spec, "--runs", runs)
    assert code == 0 and "summary.json is unreadable" in out, err


def test_runs_under_proc(cli, tmp_path):
    spec = tmp_path / "spec.toml"
    spec.write_text(SPEC)
    one_line_error(*cli("sweep", spec, "--runs", "/proc/offbench-runs")[::2], "cannot make folder /proc/offbench-runs")


@pytest.mark.parametrize(
    "checkpoint, problem",
    [
        ([1, 2], "not a checkpoint (holds a list"),
        ({"baseline": {}}, "field 'step' must be a non-negative integer, got None"),
        ({"step": "5"}, "field 'step' must be a non-negative integer, got '5'"),
        ({"step": 5, "baseline": {}}, "field 'sampler' is missing"),
    ],
)
def test_a_broken_checkpoint_is_refused_before_the_resume_is_recorded(cli, finished, checkpoint, problem):
    run = unfinished_copy(finished, "cut")
    torch.save(checkpoint, run / "checkpoints" / "last.pt")
    before = (run / "run.json").read_text()
    one_line_error(*cli("run", "baseline", "bc", "--resume", run)[::2], "last.pt", problem)
    assert (run / "run.json").read_text() == before


def test_resuming_another_baselines_run_records_nothing(cli, finished):
    run = unfinished_copy(finished, "cut")
    before = (run / "run.json").read_text()
    one_line_error(*cli("run", "baseline", "dt", "--resume", run)[::2], "is a 'bc' run, not 'dt'")
    assert (run / "run.json").read_text() == before


@pytest.mark.parametrize(
    "edit, problem",
    [
        (lambda r: (r.update(seed=2**70), r["config"].update(seed=2**70)), "run.json: 'seed' must be at least 0 and less than 4294967296"),
        (lambda r: r["evaluation"].update(episodes="ten"), "run.json: 'evaluation.episodes' must be an integer, got 'ten'"),
        (lambda r: r["evaluation"].pop("every_steps"), "run.json: missing required key 'evaluation.every_steps'"),
        (
            lambda r: r["evaluation"].update(target_returns=["x"]),
            "run.json: 'evaluation.target_returns[0]' must be a finite number, got 'x'",
        ),
    ],
)
def test_evaluate_on_a_broken_run_json(cli, finished, edit, problem):
    record = json.loads((finished / "run.json").read_text())
    edit(record)
    (finished / "run.json").write_text(json.dumps(record))
    one_line_error(*cli("evaluate", finished)[::2], "run.json", problem)
