"""Test isolation: every test gets its own OFFBENCH_HOME and Minari root, and nothing reaches the network."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def isolated_home(tmp_path, monkeypatch):
    home = tmp_path / "offbench_home"
    monkeypatch.setenv("OFFBENCH_HOME", str(home))
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


def make_store(episode_lengths=(3, 5, 2), obs_dim=4, act_dim=2, terminal_last=(True, False, True), seed=0, **columns):
    """A small hand-built dataset: episode i has the given length; its last step terminates or is truncated."""
    from offbench.data.store import EpisodeStore

    rng = np.random.default_rng(seed)
    episodes = []
    for length, term in zip(episode_lengths, terminal_last):
        terminations = np.zeros(length, bool)
        truncations = np.zeros(length, bool)
        (terminations if term else truncations)[-1] = True
        ep = {
            "observations": rng.normal(size=(length + 1, obs_dim)).astype(np.float32),
            "actions": rng.uniform(-1, 1, size=(length, act_dim)).astype(np.float32),
            "rewards": rng.normal(size=length).astype(np.float32),
            "terminations": terminations,
            "truncations": truncations,
        }
        for name, fn in columns.items():
            ep[name] = fn(length)
        episodes.append(ep)
    import gymnasium as gym

    return EpisodeStore.from_episodes(
        episodes,
        observation_space=gym.spaces.Box(-np.inf, np.inf, (obs_dim,), np.float32),
        action_space=gym.spaces.Box(-1, 1, (act_dim,), np.float32),
        card={"id": "test/hand-built"},
    )
