import gymnasium as gym
import h5py
import numpy as np
import pytest
from helpers import make_store

import offbench.data.store as store_module
from offbench.data.store import EpisodeStore, load_native
from offbench.errors import OffbenchError


def test_native_file_is_memory_mapped_and_keeps_the_card(tmp_path):
    """(The exact round trip of every format is tests/test_formats.py.)"""
    loaded = load_native(make_store().save(tmp_path / "d.h5"))
    assert isinstance(loaded.observations, np.memmap)
    assert loaded.card == {"id": "test/hand-built"}


def test_next_observation_uses_final_observation_at_episode_end():
    store = make_store()
    nxt = store.next_observations()
    ep0 = store.episode(0)
    np.testing.assert_array_equal(nxt[:3], ep0["observations"][1:])
    np.testing.assert_array_equal(nxt[2], store.final_observations[0])
    assert not np.array_equal(nxt[2], store.observations[3])  # not the next episode's reset observation


def test_episode_returns_and_lengths():
    store = make_store()
    assert store.episode_lengths.tolist() == [3, 5, 2]
    np.testing.assert_allclose(store.episode_returns()[1], store.rewards[3:8].sum(), rtol=1e-6)


def test_done_flag_inside_an_episode_is_rejected():
    store = make_store()
    terms = np.asarray(store.terminations).copy()
    terms[0] = True
    with pytest.raises(OffbenchError, match="step 0 ends an episode"):
        EpisodeStore(
            store.observations, store.actions, store.rewards, terms, store.truncations, store.episode_starts, store.final_observations
        )


def test_truncated_file_gives_one_line_error(tmp_path):
    path = make_store().save(tmp_path / "d.h5")
    data = path.read_bytes()
    bad = tmp_path / "bad.h5"
    bad.write_bytes(data[: len(data) // 2])
    with pytest.raises(OffbenchError, match="bad.h5"):
        load_native(bad)
    assert bad.read_bytes() == data[: len(data) // 2]


def test_foreign_hdf5_is_refused(tmp_path):
    path = tmp_path / "foreign.h5"
    with h5py.File(path, "w") as f:
        f["x"] = np.arange(3)
    with pytest.raises(OffbenchError, match="not an offbench dataset"):
        load_native(path)


def test_failed_save_leaves_existing_file_untouched(tmp_path, monkeypatch):
    store = make_store()
    path = store.save(tmp_path / "d.h5")
    before = path.read_bytes()
    monkeypatch.setattr(store_module, "_digest_parts", lambda *args: (_ for _ in ()).throw(RuntimeError("boom")))  # fails mid-write
    with pytest.raises(RuntimeError):
        store.save(path)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["d.h5"]


def test_episode_columns_round_trip_and_are_checked(tmp_path):
    store = make_store()
    store.episode_columns = {"seed": np.array([5, 6, 7], np.uint64), "reset_infos/x": np.zeros((3, 2), np.float32)}
    loaded = load_native(store.save(tmp_path / "d.h5"))
    assert loaded.episode_columns["seed"].tolist() == [5, 6, 7]
    assert loaded.episode_columns["reset_infos/x"].shape == (3, 2)
    assert loaded.content_sha256() == store.content_sha256() != make_store().content_sha256()
    store.episode_columns = {"seed": np.zeros(2)}
    with pytest.raises(OffbenchError, match="episode column seed has 2 rows, expected 3"):
        store.validate()


def test_written_files_get_the_usual_permissions_not_mkstemps_private_ones(tmp_path):
    """A dataset folder shared between users must stay readable: temp-file writes end with umask-based modes."""
    import os
    import stat

    from offbench.data.d4rl_format import export_d4rl
    from offbench.data.minari_format import export_minari
    from offbench.utils import atomic_write_text

    umask = os.umask(0o022)
    try:
        store = make_store()
        written = [
            store.save(tmp_path / "a" / "data.h5"),
            atomic_write_text(tmp_path / "card.toml", "x"),
            export_d4rl(store, tmp_path / "d4rl"),
        ]
        minari_dir = export_minari(store, tmp_path / "minari")
    finally:
        os.umask(umask)
    assert [stat.S_IMODE(p.stat().st_mode) for p in written] == [0o644] * 3
    assert stat.S_IMODE(minari_dir.stat().st_mode) == 0o755


def _replaced(store, **arrays):
    fields = {
        name: getattr(store, name)
        for name in ("observations", "actions", "rewards", "terminations", "truncations", "episode_starts", "final_observations")
    }
    return {**fields, "observation_space": store.observation_space, "action_space": store.action_space, **arrays}


def _with(name, index, value):
    def change(store):
        arr = np.array(getattr(store, name))
        arr[index] = value
        return {name: arr}

    return change


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (_with("rewards", 7, np.nan), r"rewards\[7\] is not finite \(nan\)"),
        (_with("rewards", 0, np.inf), r"rewards\[0\] is not finite \(inf\)"),
        (_with("observations", (4, 3), -np.inf), r"observations\[4\] is not finite"),
        (_with("actions", (9, 0), np.nan), r"actions\[9\] is not finite"),
        (lambda s: {"rewards": np.zeros((10, 2), np.float32)}, r"rewards must have one value per step, got shape \(10, 2\)"),
        (lambda s: {"terminations": np.zeros(10, np.int64)}, "terminations must be an array of booleans, got dtype int64"),
        (lambda s: {"final_observations": np.zeros((3, 2), np.float32)}, r"final_observations rows have shape \(2,\), observations \(4,\)"),
        (lambda s: {"action_space": gym.spaces.Box(-1, 1, (3,))}, r"actions rows have shape \(2,\), but the action space is Box"),
        (
            lambda s: {"actions": np.array([0, 1, 2, 1, 0, 3, 1, 0, 1, 2]), "action_space": gym.spaces.Discrete(3)},
            r"actions\[5\] = 3 is outside",
        ),
        (
            lambda s: {"actions": np.array([0, 1, 2, 1, 0.5, 0, 1, 0, 1, 2]), "action_space": gym.spaces.Discrete(3)},
            r"actions\[4\] = 0.5 is outside",
        ),
        (
            lambda s: {"actions": np.array([1, 1, 1, 1, 1, 1, 1, 1, 1, 0]), "action_space": gym.spaces.Discrete(3, start=1)},
            r"actions\[9\] = 0 is outside",
        ),
    ],
)
def test_values_a_baseline_cannot_train_on_are_refused_naming_the_first_bad_index(change, message):
    store = make_store()  # 10 steps in 3 episodes, 4-d observations, 2-d actions
    with pytest.raises(OffbenchError, match=message):
        EpisodeStore(**_replaced(store, **change(store)))


def test_value_checks_read_a_memory_mapped_file_in_blocks(tmp_path, monkeypatch):
    """The first bad row is found across block boundaries (blocks of 3 rows here)."""
    from offbench.data import store as store_module

    store = make_store(episode_lengths=(5, 5, 5), terminal_last=(True, True, False))
    path = store.save(tmp_path / "d.h5")
    with h5py.File(path, "r+") as f:
        f["rewards"][13] = np.nan
    original = store_module._first_row
    monkeypatch.setattr(store_module, "_first_row", lambda arr, is_bad, block_rows=3: original(arr, is_bad, block_rows))
    with pytest.raises(OffbenchError, match=r"d\.h5: rewards\[13\] is not finite"):
        load_native(path)


def test_observation_statistics_are_exact_far_from_zero():
    """Two float64 passes: a one-pass sum of squares would lose this std to cancellation. Baselines get them
    through DatasetSpec, without epsilon."""
    from offbench.baselines.base import DatasetSpec

    store = make_store(episode_lengths=(400, 600), terminal_last=(True, True))
    store.observations = 1e6 + np.random.default_rng(0).normal(0, 1e-3, store.observations.shape)
    spec = DatasetSpec.from_store(store)
    np.testing.assert_allclose(spec.observation_std, store.observations.std(0), rtol=1e-4)
    np.testing.assert_allclose(spec.observation_mean, store.observations.mean(0), rtol=1e-7)


def test_write_native_from_parts_equals_saving_the_joined_arrays(tmp_path):
    from offbench.data.store import write_native

    store = make_store()
    arrays = store._named_arrays()
    parts = {name: [arr[: len(arr) // 3], arr[len(arr) // 3 :]] for name, arr in arrays.items()}
    path = write_native(tmp_path / "parts.h5", parts, store.card, store.observation_space, store.action_space)
    loaded = load_native(path)
    assert loaded.content_sha256() == store.content_sha256() == h5py.File(path)["/"].attrs["content_sha256"]
    for name, arr in arrays.items():
        np.testing.assert_array_equal(loaded._named_arrays()[name], arr)
