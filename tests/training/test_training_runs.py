"""`offbench run baseline` end to end on real data in subprocesses: the run directory contract, identical
numbers for the same seed, SIGKILL + --resume ending exactly like an uninterrupted run, re-evaluation,
and one-line errors for bad input before anything trains."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from helpers import interrupt_then_resume, offbench_command, read_jsonl, require_extra
from helpers import logged_metrics as losses
from tiny_runs import long_bc_run, run_args, wait_for_step

from offbench.baselines import get_baseline
from offbench.errors import OffbenchError

CONTRACT_FILES = {"run.json", "metrics.jsonl", "evaluations.jsonl", "summary.json", "checkpoints"}


def test_dt_run_writes_the_run_directory_contract(pendulum, cli, tmp_path):
    code, out, err = cli(*run_args("dt", "pendulum-scripted", "--seed", "3", tiny=True, out=tmp_path, name="dt-run"))
    assert code == 0, err
    assert "final normalized_score" in out
    run_dir = tmp_path / "dt-run"
    assert {p.name for p in run_dir.iterdir()} == CONTRACT_FILES
    run = json.loads((run_dir / "run.json").read_text())
    assert run["schema"] == 1 and run["run_id"] == "dt-run" and run["baseline"] == "dt" and run["seed"] == 3
    assert run["dataset"]["id"] == "pendulum-scripted" and run["dataset"]["content_sha256"] == pendulum.content_sha256()
    assert run["config"]["steps"] == 50 and run["config"]["embedding_dim"] == 16 and run["config"]["reward_scale"] == 1e-2
    assert run["config_sources"][0].endswith("baselines/dt/pendulum-scripted.toml") and run["config_sources"][1].endswith("dt-tiny.toml")
    assert run["evaluation"]["target_returns"] == [-140.0, -700.0] and run["evaluation"]["episodes"] == 2
    assert run["evaluation"]["env"] == {"suite": "gymnasium", "id": "Pendulum-v1"}
    assert set(run["code"]) == {"version", "git_commit", "git_dirty"} and run["env"]["device"] == "cpu"
    from numpy._core._multiarray_umath import __cpu_dispatch__, __cpu_features__

    assert run["env"]["torch_cpu_capability"] == torch.backends.cpu.get_cpu_capability()  # the kernels the numbers came from
    assert run["env"]["numpy_simd"] == [feature for feature in __cpu_dispatch__ if __cpu_features__[feature]]
    metrics = read_jsonl(run_dir / "metrics.jsonl")
    assert [m["step"] for m in metrics] == [10, 20, 30, 40, 50] and all(np.isfinite(m["action_loss"]) for m in metrics)
    evaluations = read_jsonl(run_dir / "evaluations.jsonl")
    assert [(e["step"], e["target_return"]) for e in evaluations] == [(25, -140.0), (25, -700.0), (50, -140.0), (50, -700.0)]
    for e in evaluations:
        assert len(e["returns"]) == 2 and e["lengths"] == [200, 200] and e["success_rate"] is None
        assert e["normalized_score"] == pytest.approx(100 * (e["mean_return"] + 1207.555223) / (-143.595898 + 1207.555223))
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["steps"] == 50 and summary["score_metric"] == "normalized_score"
    assert summary["final"] == {k: evaluations[2][k] for k in ("step", "mean_return", "normalized_score", "success_rate", "target_return")}
    assert summary["best"]["normalized_score"] == max(evaluations[0]["normalized_score"], evaluations[2]["normalized_score"])
    checkpoint = torch.load(run_dir / "checkpoints" / "last.pt", weights_only=True)
    assert checkpoint["step"] == 50

    code, _, err = cli("run", "baseline", "dt", "--dataset", "pendulum-scripted", "--out", tmp_path, "--name", "dt-run")
    assert code == 2 and "run directory already exists" in err and len(err.strip().splitlines()) == 1
    assert json.loads((run_dir / "run.json").read_text()) == run  # untouched

    code, out, err = cli("evaluate", run_dir, "--episodes", "2")
    assert code == 0, err
    assert "step 50, target return -140" in out
    row = next(line.split() for line in out.splitlines() if line.split()[:1] == ["all"])  # the first target's table
    assert float(row[2]) == pytest.approx(evaluations[2]["mean_return"], abs=0.01)  # same checkpoint, same seeds
    code, _, err = cli("evaluate", run_dir, "--actions", "sampled")
    assert code == 2 and "dt samples discrete actions only" in err and len(err.strip().splitlines()) == 1


def test_same_seed_same_numbers_other_seed_other_numbers(pendulum, cli, tmp_path):
    for name, seed in (("a", 1), ("b", 1), ("c", 2)):  # DT: dropout draws from torch's RNG every update
        code, _, err = cli(*run_args("dt", "pendulum-scripted", "--seed", seed, tiny=True, out=tmp_path, name=name))
        assert code == 0, err
    assert losses(tmp_path / "a") == losses(tmp_path / "b")
    assert (tmp_path / "a" / "evaluations.jsonl").read_text() == (tmp_path / "b" / "evaluations.jsonl").read_text()
    assert losses(tmp_path / "a") != losses(tmp_path / "c")


def test_interrupted_dt_resumes_to_the_same_numbers(pendulum, cli, tmp_path, monkeypatch):
    """Ctrl-C between checkpoints (step 37 of 50, checkpoint at 25): resuming restores the LR schedule,
    the dropout RNG and the sampler, and truncates what was logged after the checkpoint."""
    args = run_args("dt", "pendulum-scripted", tiny=True, out=tmp_path)
    code, _, err = cli(*args, "--name", "whole")
    assert code == 0, err

    def logged_up_to_the_interruption(cut: Path) -> None:
        assert [m["step"] for m in losses(cut)] == [10, 20, 30]

    interrupt_then_resume(cli, monkeypatch, get_baseline("dt"), args, tmp_path, stop_at=37, check_cut=logged_up_to_the_interruption)
    assert losses(tmp_path / "cut") == losses(tmp_path / "whole")
    assert (tmp_path / "cut" / "evaluations.jsonl").read_text() == (tmp_path / "whole" / "evaluations.jsonl").read_text()


def interrupted_bc_run(cli, monkeypatch, run_dir: Path) -> None:
    """A tiny bc run at run_dir stopped by Ctrl-C at update 30, after its step-25 checkpoint (exit 130)."""
    bc = get_baseline("bc")
    update, calls = bc.update, []

    def interrupted_update(self, batch):
        calls.append(1)
        if len(calls) == 30:
            raise KeyboardInterrupt
        return update(self, batch)

    monkeypatch.setattr(bc, "update", interrupted_update)
    code, _, _ = cli(*run_args("bc", "pendulum-scripted", tiny=True, out=run_dir.parent, name=run_dir.name))
    assert code == 130
    monkeypatch.setattr(bc, "update", update)


def test_checkpoint_that_no_longer_fits_the_code_is_a_one_line_error(pendulum, cli, tmp_path, monkeypatch):
    """A checkpoint from a version with another state layout (CQL's optimisers were merged into one Adam, for
    one): resuming says which file and commit, and leaves the run directory as it was."""
    interrupted_bc_run(cli, monkeypatch, tmp_path / "old")
    path = tmp_path / "old" / "checkpoints" / "last.pt"
    checkpoint = torch.load(path, weights_only=True)
    checkpoint["baseline"]["optimizers"] = checkpoint["baseline"].pop("optimizer")  # an older layout
    torch.save(checkpoint, path)
    before = {p: p.read_bytes() for p in (tmp_path / "old").rglob("*") if p.is_file()}
    code, _, err = cli("run", "baseline", "bc", "--resume", tmp_path / "old")
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and str(path) in err and "does not fit" in err
    assert {p: p.read_bytes() for p in (tmp_path / "old").rglob("*") if p.is_file()} == before


def test_a_run_being_trained_cannot_be_resumed_beside_it(pendulum, cli, tmp_path, monkeypatch):
    """Two processes on one run directory would write the same files: while one holds the run's lock (an flock on
    the directory, a second descriptor conflicts even within one process), `--resume` is a one-line error that
    changes nothing; once it is released, the resume goes ahead. The lock leaves no file behind."""
    from offbench.tracking.run_dir import TrainingLock

    run_dir = tmp_path / "busy"
    interrupted_bc_run(cli, monkeypatch, run_dir)
    before = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    other = TrainingLock(run_dir)  # the interrupted run released its own lock, or this would fail
    with pytest.raises(OffbenchError, match="another process is training this run"):
        TrainingLock(run_dir)
    code, _, err = cli("run", "baseline", "bc", "--resume", run_dir)
    assert code == 2 and len(err.strip().splitlines()) == 1 and f"{run_dir}: another process is training this run" in err
    assert {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()} == before
    other.release()
    code, _, err = cli("run", "baseline", "bc", "--resume", run_dir)
    assert code == 0, err
    assert {p.name for p in run_dir.iterdir()} == CONTRACT_FILES
    TrainingLock(run_dir).release()  # the finished run let go of it


def test_sigkill_then_resume_ends_like_an_uninterrupted_run(pendulum, cli, tmp_path):
    args = long_bc_run(tmp_path)
    killed = subprocess.Popen(offbench_command(*args, "--name", "killed"), stderr=subprocess.DEVNULL)
    wait_for_step(tmp_path / "killed" / "metrics.jsonl", 700, poll_s=0.005)  # after the step-400 checkpoint and the step-600 evaluation
    killed.send_signal(signal.SIGKILL)
    assert killed.wait(timeout=30) == -signal.SIGKILL
    assert not (tmp_path / "killed" / "summary.json").exists(), "the run finished before it could be killed"
    assert (tmp_path / "killed" / "evaluations.jsonl").read_text()  # written after the checkpoint: must not be duplicated

    code, _, err = cli("run", "baseline", "bc", "--resume", tmp_path / "killed")
    assert code == 0, err
    code, _, err = cli(*args, "--name", "whole")
    assert code == 0, err
    assert [m["step"] for m in losses(tmp_path / "killed")] == list(range(50, 1201, 50))  # none lost or duplicated
    assert losses(tmp_path / "killed") == losses(tmp_path / "whole")
    assert (tmp_path / "killed" / "evaluations.jsonl").read_text() == (tmp_path / "whole" / "evaluations.jsonl").read_text()
    summaries = [json.loads((tmp_path / name / "summary.json").read_text()) for name in ("killed", "whole")]
    assert summaries[0]["final"] == summaries[1]["final"] and summaries[0]["best"] == summaries[1]["best"]
    run = json.loads((tmp_path / "killed" / "run.json").read_text())
    assert [r["from_step"] for r in run["resumes"]] in ([400], [800])

    code, _, err = cli("run", "baseline", "bc", "--resume", tmp_path / "killed")
    assert code == 2 and "already completed" in err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--set", "hidden_dim=wide"], "'hidden_dim' must be an integer, got 'wide'"),
        (["--set", "width=3"], "unknown config key 'width' for baseline 'bc'"),
        (["--logger", "neptune"], "unknown logger 'neptune'"),
        (["--device", "cuda:7"] if not torch.cuda.is_available() else ["--device", "tpu"], "--device"),
    ],
)
def test_bad_input_is_one_line_before_anything_is_created(pendulum, cli, tmp_path, args, message):
    code, _, err = cli("run", "baseline", "bc", "--dataset", "pendulum-scripted", "--out", tmp_path / "runs", *args)
    assert code == 2 and message in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_action_kind_and_environment_are_checked_before_training(pendulum, monkeypatch):
    from offbench.baselines.base import DatasetSpec
    from offbench.data.cards import card_from_dict
    from offbench.evaluation.protocols import EvaluationSetup, build_protocol
    from offbench.training.trainer import Dataset, check_fit

    class ContinuousOnly:
        name = "continuous-only"
        action_kinds = ("continuous",)
        evaluation_protocols = ("single-task",)

    discrete = DatasetSpec(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(4), (3,), 4, True, 10)
    data = Dataset("toy/discrete", Path("toy.h5"), "offbench", None, None)
    bare = build_protocol(EvaluationSetup(card=None, seed=0, episodes=0, every_steps=1))
    with pytest.raises(OffbenchError, match=r"toy/discrete: discrete actions .* baseline 'continuous-only' takes only continuous"):
        check_fit(ContinuousOnly, discrete, data, bare, evaluate=False)

    spec = DatasetSpec.from_store(pendulum)
    card = card_from_dict(
        {
            "id": "toy/hopper",
            "description": "",
            "format": "offbench",
            "source": {"recipe": {"generator": "x"}},
            "env": {"suite": "gymnasium", "id": "Hopper-v5"},
        }
    )
    protocol = build_protocol(EvaluationSetup(card=card, seed=0, episodes=1, every_steps=1))
    monkeypatch.setitem(sys.modules, "mujoco", None)  # as if the mujoco extra were not installed
    with pytest.raises(OffbenchError, match=r"pip install 'offbench\[mujoco\]'"):
        check_fit(ContinuousOnly, spec, Dataset("toy/hopper", Path("x"), "offbench", pendulum, card), protocol, evaluate=True)
    monkeypatch.delitem(sys.modules, "mujoco")
    require_extra("mujoco", "mujoco")
    with pytest.raises(OffbenchError, match=r"observation shape \(3,\) differs from Hopper-v5's \(11,\)"):
        check_fit(ContinuousOnly, spec, Dataset("toy/hopper", Path("x"), "offbench", pendulum, card), protocol, evaluate=True)


def test_dataset_path_without_card_trains_only_without_evaluation(pendulum, cli, tmp_path):
    from offbench.data.store import EpisodeStore

    path = tmp_path / "bare.h5"
    EpisodeStore.from_episodes(
        [pendulum.episode(i) for i in range(4)], observation_space=pendulum.observation_space, action_space=pendulum.action_space
    ).save(path)
    args = run_args("bc", path, tiny=True, out=tmp_path / "runs")
    code, _, err = cli(*args)
    assert code == 2 and "no dataset card with an [env]" in err and "eval_episodes=0" in err
    code, _, err = cli(*args, "--set", "eval_episodes=0", "--name", "bare")
    assert code == 0, err
    run_dir = tmp_path / "runs" / "bare"
    run = json.loads((run_dir / "run.json").read_text())
    assert run["dataset"]["id"] == "bare" and run["dataset"]["path"] == str(path) and run["config_sources"][0].endswith("bc/default.toml")
    assert (run_dir / "evaluations.jsonl").read_text() == "" and len(losses(run_dir)) == 5
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["final"] is None and summary["score_metric"] == "mean_return"
