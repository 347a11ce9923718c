"""Fixtures for the training tests: the real pendulum-scripted dataset (generated once per session),
`offbench` run in this process as a user would, one torch thread."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


def generated_home(tmp_path_factory, *dataset_ids: str) -> Path:
    """A fresh OFFBENCH_HOME with `dataset_ids` generated in it (the caller's OFFBENCH_HOME is left as it was)."""
    home = tmp_path_factory.mktemp(dataset_ids[0].replace("/", "-") + "_home")
    old = os.environ.get("OFFBENCH_HOME")
    os.environ["OFFBENCH_HOME"] = str(home)
    try:
        import offbench

        for dataset_id in dataset_ids:
            offbench.load(dataset_id)
    finally:
        if old is None:
            del os.environ["OFFBENCH_HOME"]
        else:
            os.environ["OFFBENCH_HOME"] = old
    return home


@pytest.fixture(scope="session")
def pendulum_home(tmp_path_factory) -> Path:
    """An OFFBENCH_HOME holding pendulum-scripted, generated once for all training tests."""
    return generated_home(tmp_path_factory, "pendulum-scripted")


@pytest.fixture(scope="session")
def multitask_home(tmp_path_factory) -> Path:
    """An OFFBENCH_HOME holding the tiny Meta-World (continuous) and MiniGrid (discrete) multi-task datasets."""
    return generated_home(tmp_path_factory, "metaworld/tiny-near-optimal", "minigrid/tiny-near-optimal")


@pytest.fixture(scope="session")
def darkroom_home(tmp_path_factory) -> Path:
    """An OFFBENCH_HOME holding darkroom-small (Dark Room learning histories), generated once."""
    return generated_home(tmp_path_factory, "darkroom-small")


@pytest.fixture(scope="session")
def bandit_home(tmp_path_factory) -> Path:
    """An OFFBENCH_HOME holding bandit-small (UCB1 histories on adversarial Bernoulli bandits), generated once."""
    return generated_home(tmp_path_factory, "bandit-small")


@pytest.fixture
def bandit(bandit_home, monkeypatch):
    """Point this test (and its subprocesses) at the bandit-small home; returns the dataset."""
    monkeypatch.setenv("OFFBENCH_HOME", str(bandit_home))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    import offbench

    return offbench.load("bandit-small")


@pytest.fixture
def darkroom(darkroom_home, monkeypatch):
    """Point this test (and its subprocesses) at the darkroom-small home; returns the dataset."""
    monkeypatch.setenv("OFFBENCH_HOME", str(darkroom_home))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    import offbench

    return offbench.load("darkroom-small")


@pytest.fixture
def pendulum(pendulum_home, monkeypatch):
    """Point this test (and its subprocesses) at the shared home; returns the dataset."""
    monkeypatch.setenv("OFFBENCH_HOME", str(pendulum_home))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    import offbench

    return offbench.load("pendulum-scripted")


@pytest.fixture(autouse=True)
def torch_settings():
    """One intra-op thread (on a shared 2-core machine more threads spin against each other), and the
    global deterministic-algorithms flag that in-process training sets is put back afterwards."""
    import torch

    threads, deterministic = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
    if torch.are_deterministic_algorithms_enabled() != deterministic:
        torch.use_deterministic_algorithms(deterministic)


@pytest.fixture
def cli(capsys):
    """`offbench ARGS` in this process: returns (exit code, stdout, stderr)."""
    from offbench.cli import main

    def run(*args: str) -> tuple[int, str, str]:
        capsys.readouterr()
        try:
            main([str(a) for a in args])
        except SystemExit as exc:
            code = exc.code
        out, err = capsys.readouterr()
        return code, out, err

    return run
