"""Environment edges: a tabular world asked of a batch, an XLand ruleset file's first download, a one-ruleset XLand env stepped before reset, and
the MiniGrid observation wrapper on an environment without MiniGrid's image. Nothing reaches the network."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from helpers import tiny_rulesets

from offbench.data import download
from offbench.envs.benchmarks import BENCHMARKS, CONTEXTUAL_BENCHMARKS, split_tasks, tabular
from offbench.envs.minigrid import EgocentricObservation
from offbench.envs.xland import XLandEnv, read_rulesets, rulesets_path, write_rulesets
from offbench.errors import OffbenchError


def _fake_fetch(write):
    """A fetch_file that writes its payload with `write(dest)` and reports it as a first download (sha256 unrecorded)."""

    def fetch(session, remote, raw, mirror, progress):
        dest = raw / remote.relpath
        write(dest)
        return dest, download.file_sha256(dest)

    return fetch


def test_first_download_of_rulesets_is_a_path_and_its_checksum_is_recorded(isolated_home, monkeypatch):
    monkeypatch.setattr(download, "fetch_file", _fake_fetch(lambda dest: write_rulesets(dest, tiny_rulesets())))
    path = rulesets_path("trivial-1m")
    assert path == isolated_home / "xland" / "trivial_1m_v2"
    assert len(read_rulesets(path)["goals"]) == len(tiny_rulesets()["goals"])
    assert download.read_sums(path.parent) == {"trivial_1m_v2": download.file_sha256(path)}


def test_first_download_that_is_no_ruleset_file_is_deleted_and_not_recorded(isolated_home, monkeypatch):
    monkeypatch.setattr(download, "fetch_file", _fake_fetch(lambda dest: dest.write_bytes(b"<html>not found</html>")))
    with pytest.raises(OffbenchError, match="trivial_1m_v2: not an xminigrid benchmark file"):
        rulesets_path("trivial-1m")
    assert not (isolated_home / "xland" / "trivial_1m_v2").exists()
    assert download.read_sums(isolated_home / "xland") == {}


def test_xland_env_stepped_before_reset_says_so_in_one_line():
    env = XLandEnv(lambda seed: pytest.fail("no batch is made before reset"))
    with pytest.raises(OffbenchError, match="XLandEnv.step before reset"):
        env.step(0)


def test_minigrid_wrapper_refuses_an_environment_without_an_image():
    class Plain(gym.Env):
        observation_space = gym.spaces.Box(0, 1, (3,), np.float32)
        action_space = gym.spaces.Discrete(2)

    with pytest.raises(OffbenchError, match="not a MiniGrid environment"):
        EgocentricObservation(Plain())


def test_tabular_world_is_the_batch_itself_and_a_contextual_bandit_is_refused_in_one_line():
    grid = BENCHMARKS["darkroom"].make_batch([{"goal": [0, 0]}])
    assert tabular(grid, "the posterior needs") is grid
    bench = CONTEXTUAL_BENCHMARKS["contextual-bandit"]
    contextual = bench.make_batch(split_tasks(bench, 2, 1)[0], seed=0)
    with pytest.raises(OffbenchError, match="^the posterior needs a tabular environment .*; ContextualBanditBatch has no table of states$"):
        tabular(contextual, "the posterior needs")
