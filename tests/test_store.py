import h5py
import numpy as np
import pytest

from conftest import make_store
import offbench.data.store as store_module
from offbench.data.store import EpisodeStore, load_native
from offbench.errors import OffbenchError


def test_round_trip_is_memory_mapped_and_identical(tmp_path):
    store = make_store(task_id=lambda n: np.full(n, 3, np.int32))
    path = store.save(tmp_path / "d.h5")
    loaded = load_native(path)
    assert isinstance(loaded.observations, np.memmap)
    for name in ("observations", "actions", "rewards", "terminations", "truncations", "episode_starts", "final_observations"):
        np.testing.assert_array_equal(np.asarray(getattr(loaded, name)), np.asarray(getattr(store, name)))
    np.testing.assert_array_equal(loaded.columns["task_id"], store.columns["task_id"])
    assert loaded.content_sha256() == store.content_sha256()
    assert loaded.action_space == store.action_space
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
        EpisodeStore(store.observations, store.actions, store.rewards, terms, store.truncations, store.episode_starts, store.final_observations)


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
        written = [store.save(tmp_path / "a" / "data.h5"), atomic_write_text(tmp_path / "card.toml", "x"), export_d4rl(store, tmp_path / "d4rl")]
        minari_dir = export_minari(store, tmp_path / "minari")
    finally:
        os.umask(umask)
    assert [stat.S_IMODE(p.stat().st_mode) for p in written] == [0o644] * 3
    assert stat.S_IMODE(minari_dir.stat().st_mode) == 0o755


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
