"""Test isolation: every test gets its own OFFBENCH_HOME and Minari root, and nothing reaches the network."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def isolated_home(tmp_path, monkeypatch):
    home = tmp_path / "offbench_home"
    monkeypatch.setenv("OFFBENCH_HOME", str(home))
    monkeypatch.setenv("OFFBENCH_ALLOW_DIRTY", "1")  # the suite runs from a working tree; tests of the rule unset it
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari_home"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("MUJOCO_GL", "egl")
    monkeypatch.delenv("OFFBENCH_MIRROR", raising=False)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    return home


@pytest.fixture
def run_cli():
    """Run `offbench ARGS...` in a subprocess, as a user would; returns the CompletedProcess."""

    def run(*args: str, check: bool = False, timeout: float = 600) -> subprocess.CompletedProcess:
        proc = subprocess.run(
            [sys.executable, "-m", "offbench", *map(str, args)],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and proc.returncode != 0:
            raise AssertionError(f"offbench {' '.join(map(str, args))} exited {proc.returncode}:\n{proc.stderr}")
        return proc

    return run


@pytest.fixture
def one_thread():
    """One torch intra-op thread (the CQL / IQL tests: on a shared 2-core machine more threads spin)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def root(tmp_path, monkeypatch):
    """An empty leaderboards folder for this test (OFFBENCH_LEADERBOARDS), where its boards are written."""
    folder = tmp_path / "leaderboards"
    monkeypatch.setenv("OFFBENCH_LEADERBOARDS", str(folder))
    return folder
