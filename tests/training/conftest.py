"""Fixtures for the training tests: the real pendulum-scripted dataset (generated once per session),
`offbench` run in this process as a user would, one torch thread."""

from __future__ import annotations

import os
from pathlib import Path

import pytest



def generated_home(tmp_path_factory, name: str, *datasets: str) -> Path:
    """A fresh OFFBENCH_HOME holding `datasets` (generated from their recipes)."""
    home = tmp_path_factory.mktemp(name)
    old = os.environ.get("OFFBENCH_HOME")
    os.environ["OFFBENCH_HOME"] = str(home)
    try:
        import offbench

        for dataset in datasets:
            offbench.load(dataset)
    finally:
        if old is None:
            del os.environ["OFFBENCH_HOME"]
        else:
            os.environ["OFFBENCH_HOME"] = old
    return home


@pytest.fixture(scope="session")
def pendulum_home(tmp_path_factory) -> Path:
    """An OFFBENCH_HOME holding pendulum-scripted, generated once for all training tests."""
    return generated_home(tmp_path_factory, "pendulum_home", "pendulum-scripted")


@pytest.fixture(scope="session")
def multitask_home(tmp_path_factory) -> Path:
    """An OFFBENCH_HOME holding the tiny Meta-World (continuous) and MiniGrid (discrete) multi-task datasets."""
    return generated_home(tmp_path_factory, "multitask_home", "metaworld/tiny-near-optimal", "minigrid/tiny-near-optimal")


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
