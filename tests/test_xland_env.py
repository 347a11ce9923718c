"""XLand-MiniGrid rulesets as a batched in-context benchmark (xminigrid on CPU).

Ruleset files are tiny, written by the tests in xminigrid's format; nothing reaches the network."""

from __future__ import annotations

import bz2
import os
import pickle

import numpy as np
import pytest
from helpers import registered_xland_card, tiny_rulesets

from offbench.envs.xland import held_out_rulesets, read_rulesets, rulesets_path, write_rulesets, xland_split
from offbench.errors import OffbenchError


def test_ruleset_files_round_trip_and_code_in_a_pickle_is_refused(tmp_path):
    arrays = {
        "goals": np.arange(10, dtype=np.uint8).reshape(2, 5),
        "rules": np.zeros((2, 1, 7), np.uint8),
        "init_tiles": np.ones((2, 1, 2), np.uint8),
        "num_rules": np.zeros(2, np.int64),
    }
    back = read_rulesets(write_rulesets(tmp_path / "bench", arrays))
    assert all(np.array_equal(back[k], arrays[k]) for k in arrays)
    with bz2.open(tmp_path / "evil", "wb") as handle:
        pickle.dump({"goals": os.system}, handle)
    with pytest.raises(OffbenchError, match="not an xminigrid benchmark file.*posix.system is not an array type"):
        read_rulesets(tmp_path / "evil")


def test_held_out_rulesets_are_unused_by_training_and_seeded():
    train = np.array([0, 3, 5, 7])
    held_out = held_out_rulesets(10, train, 4, seed=1)
    assert len(held_out) == 4 and not set(held_out) & set(train)
    assert np.array_equal(held_out, held_out_rulesets(10, train, 4, seed=1))
    with pytest.raises(OffbenchError, match="only 6 of 10"):
        held_out_rulesets(10, train, 7)


def test_split_takes_the_data_rulesets_for_training_and_unused_ones_as_held_out(tmp_path):
    arrays = {
        "goals": np.zeros((12, 5), np.uint8),
        "rules": np.zeros((12, 1, 7), np.uint8),
        "init_tiles": np.zeros((12, 1, 2), np.uint8),
        "num_rules": np.zeros(12, np.int64),
    }
    spec = {"suite": "xland", "id": "XLand-MiniGrid-R1-9x9", "kwargs": {"rulesets_file": str(write_rulesets(tmp_path / "b", arrays))}}
    train, held_out = xland_split(spec, np.array([2, 4, 6]), held_out=5, seed=0)
    assert train == [{"ruleset": 2}, {"ruleset": 4}, {"ruleset": 6}]
    assert len(held_out) == 5 and not {t["ruleset"] for t in held_out} & {2, 4, 6}


def test_benchmark_names_map_to_the_files_the_datasets_index(isolated_home):
    (isolated_home / "xland").mkdir(parents=True)
    (isolated_home / "xland" / "trivial_1m_v2").write_bytes(b"")  # present: no download is attempted
    assert rulesets_path("trivial-1m") == isolated_home / "xland" / "trivial_1m_v2"
    with pytest.raises(OffbenchError, match="unknown xminigrid benchmark 'trivial-21k'"):
        rulesets_path("trivial-21k")


@pytest.mark.slow  # jit-compiles xminigrid's reset and step (~30 s on a busy 2-core machine)
def test_batch_steps_rulesets_together_with_terminations_truncations_and_masked_resets():
    from offbench.envs.xland import XLandBatch

    rulesets = tiny_rulesets()
    batch = XLandBatch("XLand-MiniGrid-R1-9x9", rulesets, [0, 1, 2, 3], seed=0, max_steps=20)
    assert batch.horizon == 20 and np.isnan(batch.optimal_returns).all()
    first = batch.reset()
    assert first.shape == (4, 5, 5, 2) and first.dtype == np.uint8
    rng = np.random.default_rng(0)
    ended_rows, steps = set(), np.zeros(4, int)
    for _ in range(60):
        obs, rewards, terminated, truncated = batch.step(rng.integers(0, 6, 4))
        steps += 1
        assert not (terminated & truncated).any()
        assert (rewards[~terminated] == 0).all() and (rewards[terminated] > 0).all()  # 1 - 0.9 * t / max_steps
        assert (steps[truncated] == 20).all()
        done = terminated | truncated
        ended_rows |= set(np.flatnonzero(done))
        if done.any():
            before = obs.copy()
            after = batch.reset(done)
            assert np.array_equal(after[~done], before[~done])  # rows that go on are untouched
            steps[done] = 0
    assert ended_rows == {0, 1, 2, 3}
    again = XLandBatch("XLand-MiniGrid-R1-9x9", rulesets, [0, 1, 2, 3], seed=0, max_steps=20)
    assert np.array_equal(again.reset(), first)  # same seed, same layouts


def test_card_tasks_of_an_xland_card(tmp_path, isolated_home):
    from offbench.data.cards import get_card
    from offbench.envs.benchmarks import card_tasks

    placeholders = {
        "goals": np.zeros((4, 5), np.uint8),
        "rules": np.zeros((4, 1, 7), np.uint8),
        "init_tiles": np.zeros((4, 1, 2), np.uint8),
        "num_rules": np.zeros(4, np.int64),
    }
    registered_xland_card(isolated_home, tmp_path, held_out=1, rulesets=placeholders)
    train, held_out = card_tasks(get_card("test/xland"))
    assert train == [{"ruleset": 0}, {"ruleset": 1}, {"ruleset": 2}] and held_out == [{"ruleset": 3}]  # the only unused one


@pytest.mark.slow  # jit-compiles xminigrid
def test_in_context_protocol_loop_runs_on_xland_rulesets(tmp_path, isolated_home):
    from offbench.data.cards import get_card
    from offbench.envs.benchmarks import card_tasks, make_batch_env
    from offbench.evaluation.protocols import run_in_context

    class RandomPolicy:
        def reset(self, num_envs):
            self.rng, self.n = np.random.default_rng(0), num_envs

        def act(self, observations):
            assert observations.shape == (self.n, 5, 5, 2)
            return self.rng.integers(0, 6, self.n)

        def observe(self, rewards, dones):
            pass

    registered_xland_card(isolated_home, tmp_path, held_out=1, rulesets=tiny_rulesets())
    card = get_card("test/xland")
    train, _ = card_tasks(card)
    env = make_batch_env(card.env, train, seed=0)  # the card's suite picks XLandBatch
    assert env.num_envs == 3 and env.horizon == 10 and env.single_observation_space.shape == (5, 5, 2)
    results = run_in_context(RandomPolicy(), env, episodes=3)
    assert results.returns.shape == (3, 3) and (results.lengths <= 10).all() and (results.returns <= 1).all()
