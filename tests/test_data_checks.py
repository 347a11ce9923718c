"""Data is checked before it trains: id and label columns of native files, XLand files on open and chunk by chunk,
MTDiff folders on import. Every file is tiny and written here; each bad one is a one-line error naming the file
and the field, with exit code 2 from the CLI and nothing written."""

from __future__ import annotations

import os

import gymnasium as gym
import h5py
import numpy as np
import pytest

import offbench
from offbench.data.samplers import make_sampler
from offbench.data.store import EpisodeStore, load_native
from offbench.data.xland import LAYOUT, XLandHistories, write_xland_file
from offbench.errors import OffbenchError


def cli(capsys, *args) -> tuple[int, str, str]:
    from offbench import cli as offbench_cli

    with pytest.raises(SystemExit) as exit_info:
        offbench_cli.main([str(a) for a in args])
    out, err = capsys.readouterr()
    return exit_info.value.code, out, err


# ---------------------------------------------------------------------------------------------- native files

DARKROOM_CARD = {"id": "test/darkroom-copy", "kind": "learning-history", "source": {"recipe": {"generator": "darkroom", "params": {"tasks": 10, "held_out": 2}}}}
MULTITASK_CARD = {"id": "test/mt3", "kind": "multi-task", "env": {"suite": "minigrid", "id": "MT3", "kwargs": {"tasks": ["a", "b", "c"]}}}


def darkroom_copy(card=DARKROOM_CARD, episodes=6, length=5, obs_space=None, observations=None) -> EpisodeStore:
    """A Dark-Room-shaped learning history: (x, y) int64 cells, Discrete(5), task_id / history_id / optimal_action."""
    rng = np.random.default_rng(0)
    eps = []
    for e in range(episodes):
        ends = np.zeros(length, bool)
        ends[-1] = True
        eps.append({
            "observations": rng.integers(0, 9, (length + 1, 2)) if observations is None else observations(length + 1),
            "actions": rng.integers(0, 5, length), "rewards": rng.random(length).astype(np.float32),
            "terminations": np.zeros(length, bool), "truncations": ends,
            "task_id": np.full(length, e % 3, np.int32), "history_id": np.full(length, e // 2, np.int32),
            "optimal_action": rng.integers(0, 5, length).astype(np.uint8),
        })
    space = obs_space or gym.spaces.Box(0, 8, (2,), np.int64)
    return EpisodeStore.from_episodes(eps, observation_space=space, action_space=gym.spaces.Discrete(5), card=dict(card))


def rewrite(path, name, values) -> None:
    """Replace one array of a written native file (the dtype may change), as a hand-edited copy would."""
    with h5py.File(path, "r+") as f:
        del f[name]
        f[name] = values


@pytest.mark.parametrize(("card", "change", "message"), [
    (DARKROOM_CARD, lambda ids: ids.__setitem__(7, 99), r"columns/task_id\[7\] = 99 is out of range \(the card's recipe's tasks - held_out names 8 task\(s\): ids 0\.\.7\)"),
    (MULTITASK_CARD, lambda ids: ids.__setitem__(12, 3), r"columns/task_id\[12\] = 3 is out of range \(the card's env.kwargs.tasks names 3 task\(s\)"),
    (MULTITASK_CARD, lambda ids: ids.__setitem__(0, -1), r"columns/task_id\[0\] = -1 is out of range"),
    ({"id": "no-count"}, lambda ids: ids.__setitem__(29, -1), r"columns/task_id\[29\] = -1 is out of range \(a task id is never negative\)"),
])
def test_task_ids_outside_the_cards_tasks_are_refused_by_verify_and_by_training(tmp_path, capsys, card, change, message):
    path = darkroom_copy(card).save(tmp_path / "d.h5")
    ids = load_native(path).columns["task_id"][()].copy()
    change(ids)
    rewrite(path, "columns/task_id", ids)
    code, out, err = cli(capsys, "verify", path)
    assert code == 2 and not out and err.count("\n") == 1
    assert str(path) in err
    assert __import__("re").search(message, err), err
    code, _, err = cli(capsys, "run", "baseline", "bc", "--dataset", path, "--out", tmp_path / "runs", "--steps", "1")
    assert code == 2 and err.count("\n") == 1 and "columns/task_id" in err
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_a_float_task_id_column_and_a_missing_one_on_a_multi_task_card_are_refused(tmp_path):
    path = darkroom_copy(MULTITASK_CARD).save(tmp_path / "d.h5")
    rewrite(path, "columns/task_id", load_native(path).columns["task_id"][()].astype(np.float32))
    with pytest.raises(OffbenchError, match=r"d\.h5: columns/task_id must hold one integer per step, got dtype float32"):
        load_native(path)
    with h5py.File(path, "r+") as f:
        del f["columns/task_id"]
    with pytest.raises(OffbenchError, match=r"d\.h5: the card is multi-task but there is no column task_id"):
        load_native(path)
    store = darkroom_copy(DARKROOM_CARD)  # a learning-history card may leave it out (one task)
    del store.columns["task_id"]
    store.validate()


def test_an_optimal_action_outside_the_action_space_is_refused_before_dpt_indexes_with_it(tmp_path, capsys):
    path = darkroom_copy().save(tmp_path / "d.h5")
    labels = load_native(path).columns["optimal_action"][()].copy()
    labels[17] = 77
    rewrite(path, "columns/optimal_action", labels)
    code, _, err = cli(capsys, "verify", path)
    assert code == 2 and err.count("\n") == 1
    assert f"{path}: columns/optimal_action[17] = 77 is outside the action space Discrete(5)" in err.replace("\n", "")
    rewrite(path, "columns/optimal_action", labels.astype(np.float64) * 0 + 0.5)
    with pytest.raises(OffbenchError, match=r"columns/optimal_action must hold integers in the discrete action space Discrete\(5\), got dtype float64"):
        load_native(path)
    rewrite(path, "columns/optimal_action", np.zeros((len(labels), 2), np.uint8))
    with pytest.raises(OffbenchError, match=r"columns/optimal_action rows have shape \(2,\), but the action space is Discrete\(5\)"):
        load_native(path)


def test_observations_outside_a_bounded_integer_box_are_refused(tmp_path):
    space = gym.spaces.Box(0, 255, (4,), np.uint8)
    path = darkroom_copy(obs_space=space, observations=lambda n: np.full((n, 4), 7, np.int64)).save(tmp_path / "d.h5")
    observations = load_native(path).observations[()].copy()
    observations[11, 2] = 10**15
    rewrite(path, "observations", observations)
    with pytest.raises(OffbenchError, match=r"d\.h5: observations\[11\] = \[ *7 +7 +1000000000000000 +7\] is outside the observation space Box\(0, 255, \(4,\), uint8\)"):
        load_native(path)
    rewrite(path, "observations", observations.astype(np.float64) * 0 + 2.5)  # not integers
    with pytest.raises(OffbenchError, match=r"observations\[0\] = \[2.5 2.5 2.5 2.5\] is outside"):
        load_native(path)
    finals = np.full((6, 4), 7, np.int64)
    finals[4, 0] = -1
    rewrite(path, "observations", np.full((30, 4), 7, np.int64))
    rewrite(path, "final_observations", finals)
    with pytest.raises(OffbenchError, match=r"final_observations\[4\] = \[-1 +7 +7 +7\] is outside"):
        load_native(path)
    with pytest.raises(OffbenchError, match=r"observations\[3\] = \[9 0\] is outside the observation space Box\(0, 8, \(2,\), int64\)"):
        darkroom_copy(observations=lambda n: np.array([[0, 0]] * 3 + [[9, 0]] + [[0, 0]] * (n - 4)))


def test_bounds_that_differ_by_dimension_are_checked_dimension_by_dimension():
    """Key-to-Door's (x, y, has_key) under Box(0, [8, 8, 1]): 8 is fine in x, not in has_key."""
    space = gym.spaces.Box(0, np.array([8, 8, 1]), (3,), np.int64)
    darkroom_copy(obs_space=space, observations=lambda n: np.tile([8, 8, 1], (n, 1)).astype(np.uint8))
    with pytest.raises(OffbenchError, match=r"observations\[2\] = \[0 0 8\] is outside"):
        darkroom_copy(obs_space=space, observations=lambda n: np.array([[8, 8, 1]] * 2 + [[0, 0, 8]] + [[1, 1, 0]] * (n - 3), np.uint8))


def test_continuous_optimal_actions_must_be_finite():
    store = darkroom_copy()
    store.action_space = gym.spaces.Box(-1, 1, (2,), np.float32)
    store.actions = np.zeros((len(store.actions), 2), np.float32)
    store.columns["optimal_action"] = np.zeros((len(store.actions), 2), np.float32)
    store.validate()
    store.columns["optimal_action"][4, 1] = np.nan
    with pytest.raises(OffbenchError, match=r"columns/optimal_action\[4\] = \[ 0. nan\] is not finite"):
        store.validate()


def test_label_checks_read_a_memory_mapped_file_in_blocks(tmp_path, monkeypatch):
    """The first bad row is found across block boundaries (blocks of 4 rows here), in the mapped file."""
    from offbench.data import store as store_module

    path = darkroom_copy(MULTITASK_CARD).save(tmp_path / "d.h5")
    with h5py.File(path, "r+") as f:
        f["columns/task_id"][22] = 5
    original = store_module._first_row
    blocks = []

    def in_blocks(arr, is_bad, block_rows=4):
        blocks.append(type(arr))
        return original(arr, is_bad, block_rows)

    monkeypatch.setattr(store_module, "_first_row", in_blocks)
    with pytest.raises(OffbenchError, match=r"columns/task_id\[22\] = 5"):
        load_native(path)
    assert np.memmap in blocks


def test_a_uint8_image_under_box_0_255_is_not_read_for_the_bounds():
    """No uint8 value can leave Box(0, 255, uint8): nothing to read, whatever the size."""
    from offbench.data.store import _outside

    assert _outside(np.dtype(np.uint8), np.asarray(0), np.asarray(255)) is None
    assert _outside(np.dtype(np.int64), np.asarray(0), np.asarray(255)) is not None
