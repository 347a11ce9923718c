"""Data-parallel training on CPU with gloo and 2 processes: the loss curve equals a 1-process run with the
same global batch (float tolerance), for a baseline with one optimiser (BC) and one keeping several in a dict
(IQL); every built-in's trained parameters are found; the run directory is written once, and a killed 2-process
run resumes to the same numbers as an uninterrupted one."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
import torch
from baseline_contract import tiny
from helpers import TRAINING_CONFIGS as CONFIGS
from helpers import offbench_command, read_jsonl
from test_protocols import contract_store
from tiny_runs import long_bc_run, wait_for_step

from offbench.baselines import BASELINES, get_baseline
from offbench.data.samplers import make_sampler
from offbench.data.spec import DatasetSpec
from offbench.paths import builtin_dir
from offbench.training.distributed import trained_parameters

TINY = ["--config", CONFIGS / "bc-tiny.toml", "--set", "steps=100"]
IQL_TINY = [
    "--config",
    builtin_dir("baselines") / "iql" / "pendulum-scripted.toml",
    "--set",
    "steps=20",
    "--set",
    "batch_size=32",
    "--set",
    "hidden_dim=32",
    "--set",
    "log_every=5",
    "--set",
    "eval_every=20",
    "--set",
    "eval_episodes=1",
    "--set",
    "checkpoint_every=20",
]


def assert_same_curves(a: Path, b: Path, rel: float, losses: tuple[str, ...] = ("actor_loss",)) -> None:
    ma, mb = read_jsonl(a / "metrics.jsonl"), read_jsonl(b / "metrics.jsonl")
    assert [m["step"] for m in ma] == [m["step"] for m in mb]
    for x, y in zip(ma, mb):
        for loss in losses:
            assert x[loss] == pytest.approx(y[loss], rel=rel), loss
    ea, eb = read_jsonl(a / "evaluations.jsonl"), read_jsonl(b / "evaluations.jsonl")
    assert [e["step"] for e in ea] == [e["step"] for e in eb]
    for x, y in zip(ea, eb):
        assert x["returns"] == pytest.approx(y["returns"], rel=rel)


def test_two_processes_follow_the_one_process_loss_curve(pendulum, cli, tmp_path):
    base = ["run", "baseline", "bc", "--dataset", "pendulum-scripted", *TINY, "--out", tmp_path]
    code, _, err = cli(*base, "--name", "one")
    assert code == 0, err
    code, _, err = cli(*base, "--name", "two", "--nproc", "2")
    assert code == 0, err
    assert_same_curves(tmp_path / "one", tmp_path / "two", rel=1e-6)
    record = json.loads((tmp_path / "two" / "run.json").read_text())
    assert record["distributed"] == {"world_size": 2, "backend": "gloo"} and record["config"]["batch_size"] == 32
    assert sorted(p.name for p in tmp_path.iterdir()) == ["one", "two"]  # rank 1 wrote no run directory of its own

    code, _, err = cli("run", "baseline", "bc", "--resume", tmp_path / "two")
    assert code == 2 and "trained with 2 process(es); resume it with --nproc 2" in err


@pytest.mark.slow
def test_two_processes_train_a_baseline_keeping_its_optimisers_in_a_dict(pendulum, cli, tmp_path):
    """IQL steps an optimiser per network, held in a dict: its 2-process run trains all three networks as the
    1-process run does. (Slow: two real processes; the default suite checks the same averaging in one process in
    test_every_parameter_an_update_gives_a_gradient_is_averaged_across_processes.)"""
    base = ["run", "baseline", "iql", "--dataset", "pendulum-scripted", *IQL_TINY, "--out", tmp_path]
    code, _, err = cli(*base, "--name", "one")
    assert code == 0, err
    code, _, err = cli(*base, "--name", "two", "--nproc", "2")
    assert code == 0, err
    assert_same_curves(tmp_path / "one", tmp_path / "two", rel=1e-5, losses=("value_loss", "critic_loss", "actor_loss"))


def parameters_of(baseline) -> list[torch.nn.Parameter]:
    """Every parameter the baseline holds: in its modules (directly or in a dict of them) and bare."""
    held = [item for value in vars(baseline).values() for item in (value.values() if isinstance(value, dict) else [value])]
    return [
        p
        for item in held
        for p in (item.parameters() if isinstance(item, torch.nn.Module) else [item])
        if isinstance(p, torch.nn.Parameter)
    ]


@pytest.mark.parametrize("name", sorted(n for n in BASELINES if getattr(get_baseline(n), "trains", True)))
def test_every_parameter_an_update_gives_a_gradient_is_averaged_across_processes(name, pendulum):
    """Wherever a built-in keeps its optimisers (an attribute, IQL's and MOORE-IQL's dict), the parameters whose
    gradients the ranks average are all those one update gives a gradient."""
    cls = get_baseline(name)
    store = contract_store(name, pendulum)
    baseline = cls(tiny(name, cls), DatasetSpec.from_store(store))
    options = baseline.sampler_options() if hasattr(baseline, "sampler_options") else {}
    baseline.update(make_sampler(cls.sampler, store, 8, 0, **options).sample())
    with_gradient = {id(p) for p in parameters_of(baseline) if p.grad is not None}
    assert with_gradient and with_gradient <= {id(p) for p in trained_parameters(baseline)}


def test_batch_not_divisible_by_the_processes_is_a_one_line_error(pendulum, cli, tmp_path):
    code, _, err = cli(
        "run", "baseline", "bc", "--dataset", "pendulum-scripted", *TINY, "--set", "batch_size=33", "--out", tmp_path, "--nproc", "2"
    )
    assert code == 2 and err.count("\n") == 1
    assert "--nproc 2: batch_size 33 must be divisible by the 2 processes" in err and not list(tmp_path.iterdir())


@pytest.mark.slow  # three 2-process launches: ~40 s on a quiet 2-core machine
def test_killed_two_process_run_resumes_to_the_same_numbers(pendulum, cli, tmp_path):
    args = long_bc_run(tmp_path, "--nproc", "2")
    killed = subprocess.Popen(
        offbench_command(*args, "--name", "killed"), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    metrics = tmp_path / "killed" / "metrics.jsonl"
    wait_for_step(metrics, 700, poll_s=0.01)
    os.killpg(killed.pid, signal.SIGKILL)  # the launcher and torchrun; the ranks (own sessions) die with torchrun
    killed.wait(timeout=30)
    time.sleep(2)
    assert not (tmp_path / "killed" / "summary.json").exists(), "the run finished before it could be killed"

    code, _, err = cli("run", "baseline", "bc", "--resume", tmp_path / "killed", "--nproc", "2")
    assert code == 0, err
    code, _, err = cli(*args, "--name", "whole")
    assert code == 0, err
    assert [m["step"] for m in read_jsonl(metrics)] == list(range(50, 1201, 50))
    assert_same_curves(tmp_path / "killed", tmp_path / "whole", rel=1e-9)
    assert json.loads((tmp_path / "killed" / "run.json").read_text())["resumes"][0]["from_step"] in (400, 800)


def test_a_gradient_that_couples_the_batch_rows_is_refused_under_nproc(monkeypatch):
    """T2MIR's contrastive pairs (and PCGrad's projections) span the whole batch: the average of per-process shard
    gradients is not its gradient, so --nproc refuses it; one process, or a dense AD, is not refused."""
    from offbench.errors import OffbenchError
    from offbench.training.trainer import check_data_parallel

    ad = get_baseline("ad")
    t2mir = ad.Config(moe="t2mir")
    check_data_parallel(ad, t2mir)  # one process
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    with pytest.raises(OffbenchError, match=r"^config: --nproc 2 averages .* ad cannot take apart: moe = 't2mir'"):
        check_data_parallel(ad, t2mir)
    check_data_parallel(ad, ad.Config())
