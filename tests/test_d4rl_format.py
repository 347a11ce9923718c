"""D4RL's flat layout: episode splitting, terminal vs timeout, last-step handling, on hand-built files.

Row layout used below (8 rows, obs[t] = [t, 10 * t]):

    row:       0  1  2 | 3  4  5 | 6  7
    terminal:  .  .  1 | .  .  . | .  .
    timeout:   .  .  . | .  .  1 | .  .      rows 6-7: the file stops mid-episode
"""

import h5py
import numpy as np
import pytest
from helpers import make_store

from offbench.data.d4rl_format import export_d4rl, from_d4rl_arrays, load_d4rl
from offbench.data.formats import detect_format

N = 8


def d4rl_arrays(next_observations=True, **flags):
    obs = np.stack([np.arange(N), 10 * np.arange(N)], axis=1).astype(np.float32)
    arrays = {
        "observations": obs,
        "actions": np.linspace(-1, 1, N, dtype=np.float32)[:, None],
        "rewards": np.arange(N, dtype=np.float32) + 0.5,
        "terminals": np.zeros(N, bool),
        "timeouts": np.zeros(N, bool),
    }
    arrays["terminals"][flags.get("terminal_rows", [2])] = True
    arrays["timeouts"][flags.get("timeout_rows", [5])] = True
    if next_observations:
        # the true s' of every row; at a flagged row it is *not* the next row (a reset happened)
        nxt = np.stack([np.arange(1, N + 1), 10 * np.arange(1, N + 1)], axis=1).astype(np.float32)
        for row in np.flatnonzero(arrays["terminals"] | arrays["timeouts"]):
            nxt[row] = [100 + row, 100 + row]
        arrays["next_observations"] = nxt
    return arrays


def write(path, arrays, infos=None):
    with h5py.File(path, "w") as f:
        for key, value in arrays.items():
            f[key] = value
        for key, value in (infos or {}).items():
            f[f"infos/{key}"] = value
    return path


def test_every_row_is_a_transition_with_its_true_next_observation(tmp_path):
    arrays = d4rl_arrays()
    path = write(tmp_path / "hopper_medium-v2.hdf5", arrays, infos={"qpos": np.arange(N * 3.0).reshape(N, 3)})
    assert detect_format(path) == "d4rl"
    store = load_d4rl(path)
    assert store.episode_starts.tolist() == [0, 3, 6, 8]
    assert store.num_transitions == N  # qlearning_dataset keeps 6: it drops the timeout row 5 and the last row 7
    np.testing.assert_array_equal(store.next_observations(), arrays["next_observations"])
    assert store.terminations.tolist() == [0, 0, 1, 0, 0, 0, 0, 0]
    assert store.truncations.tolist() == [0, 0, 0, 0, 0, 1, 0, 1]  # timeout row 5; trailing episode cut at row 7
    np.testing.assert_array_equal(store.rewards, arrays["rewards"])
    np.testing.assert_array_equal(store.columns["infos/qpos"][4], [12.0, 13.0, 14.0])
    notes = store.card["d4rl"]
    assert (notes["ended_by_terminal"], notes["ended_by_timeout"], notes["trailing_rows_truncated"]) == (1, 1, 2)
    assert store.card["id"] == "hopper_medium-v2"


def test_terminal_and_timeout_on_one_step_end_the_episode_once(tmp_path):
    arrays = d4rl_arrays(terminal_rows=[2, 5], timeout_rows=[5])  # hopper falling exactly at the time limit
    store = load_d4rl(write(tmp_path / "d.hdf5", arrays))
    assert store.episode_starts.tolist() == [0, 3, 6, 8]
    assert bool(store.terminations[5]) and bool(store.truncations[5])  # samplers bootstrap on terminations: no bootstrap
    assert store.card["d4rl"]["terminal_and_timeout_on_one_step"] == 1
    assert store.card["d4rl"]["ended_by_timeout"] == 0


def test_jump_in_next_observation_without_flag_starts_a_new_episode(tmp_path):
    arrays = d4rl_arrays(terminal_rows=[2], timeout_rows=[])
    arrays["observations"][4:] += 1000  # two files joined mid-episode: row 3 is cut short
    arrays["next_observations"][4:] += 1000
    arrays["next_observations"][3] = [4, 40]  # row 3's true s', not row 4's observation
    store = load_d4rl(write(tmp_path / "d.hdf5", arrays))
    assert store.episode_starts.tolist() == [0, 3, 4, 8]
    assert store.truncations.tolist() == [0, 0, 0, 1, 0, 0, 0, 1]
    np.testing.assert_array_equal(store.next_observations(), arrays["next_observations"])
    assert store.card["d4rl"]["split_where_next_observation_jumps"] == 1


def test_without_next_observations_nothing_is_invented_for_bootstrapped_steps(tmp_path):
    arrays = d4rl_arrays(next_observations=False, terminal_rows=[2], timeout_rows=[3, 6])
    store = load_d4rl(write(tmp_path / "d.hdf5", arrays))
    # rows: ep [0,1,2] terminal (kept, s' unknown but never bootstrapped: zeros); ep [3] timeout of one row:
    # removed entirely; ep [4,5,6] timeout: row 6 removed, its observation is row 5's s'; trailing [7]: removed.
    assert store.episode_starts.tolist() == [0, 3, 5]
    np.testing.assert_array_equal(store.observations[:, 0], [0, 1, 2, 4, 5])
    np.testing.assert_array_equal(store.final_observations, [[0, 0], [6, 60]])
    assert store.terminations.tolist() == [0, 0, 1, 0, 0]
    assert store.truncations.tolist() == [0, 0, 0, 0, 1]
    notes = store.card["d4rl"]
    assert notes["rows_removed_for_missing_next_observation"] == 3
    assert notes["episodes_removed_for_missing_next_observation"] == 2
    assert notes["terminal_final_observation"].startswith("zeros")


def test_column_shaped_rewards_and_missing_timeouts_are_accepted():
    arrays = d4rl_arrays()
    arrays["rewards"] = arrays["rewards"][:, None]
    arrays["terminals"] = arrays["terminals"] | arrays.pop("timeouts")
    store = from_d4rl_arrays(arrays)
    assert store.rewards.shape == (N,)
    assert store.card["d4rl"]["has_timeouts"] is False


def test_export_round_trip_is_lossless(tmp_path):
    store = make_store(task_id=lambda n: np.full(n, 4, np.int32), **{"infos/success": lambda n: np.arange(n) == n - 1})
    store.episode_columns = {"seed": np.array([1, 2, 3], np.uint64)}
    store.card = {"id": "test/hand-built-v0", "scores": {"ref_min": 0.0, "ref_max": 1.0}}
    path = export_d4rl(store, tmp_path)
    assert path == tmp_path / "test-hand-built-v0.hdf5"  # the id's namespace is kept in the name
    with h5py.File(path) as f:
        np.testing.assert_array_equal(f["next_observations"][()], store.next_observations())
        assert f["timeouts"][()].tolist() == store.truncations.tolist()
        assert "infos/success" in f and "task_id" in f
    back = load_d4rl(path)
    assert back.content_sha256() == store.content_sha256()
    assert back.card == store.card and back.action_space == store.action_space
    with pytest.raises(Exception, match="already exists"):
        export_d4rl(store, tmp_path)


def test_one_name_in_two_namespaces_exports_to_two_files(tmp_path):
    paths = []
    for namespace in ("minigrid", "metaworld"):
        store = make_store(seed=len(paths))
        store.card = {"id": f"{namespace}/tiny-near-optimal"}
        paths.append(export_d4rl(store, tmp_path))
    assert [p.name for p in paths] == ["minigrid-tiny-near-optimal.hdf5", "metaworld-tiny-near-optimal.hdf5"]
    assert [load_d4rl(p).card["id"] for p in paths] == ["minigrid/tiny-near-optimal", "metaworld/tiny-near-optimal"]


def test_episode_end_without_flag_is_exported_as_timeout(tmp_path):
    store = make_store()
    truncations = np.asarray(store.truncations).copy()
    truncations[7] = False  # episode 1 ends with neither flag
    store.truncations = truncations
    back = load_d4rl(export_d4rl(store, tmp_path / "x.hdf5"))
    assert back.episode_starts.tolist() == store.episode_starts.tolist()
    assert bool(back.truncations[7])
