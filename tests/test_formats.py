"""The contract every registered on-disk format keeps (as d3rlpy and Minari test every backend): export writes
a dataset its own detector recognises, loading it gives back the same episodes, columns and spaces, and
export never overwrites."""

import numpy as np
import pytest
from helpers import make_store

from offbench.data.formats import FORMATS, detect_format, load_path
from offbench.errors import OffbenchError

WRITTEN = sorted(name for name, fmt in FORMATS.items() if getattr(fmt, "writes", True))
READ_ONLY = sorted(set(FORMATS) - set(WRITTEN))  # published layouts offbench reads, never writes (mtdiff, xland)


def rich_store():
    """Episodes ending by termination and by truncation, a per-step and a per-episode column."""
    store = make_store(task_id=lambda n: np.full(n, n, np.int64))
    store.episode_columns["seed"] = np.arange(store.num_episodes, dtype=np.uint64)
    return store


@pytest.mark.parametrize("name", WRITTEN)
def test_format_round_trip_is_exact(name, tmp_path):
    store = rich_store()
    out = FORMATS[name].export(store, tmp_path / "out")
    assert detect_format(out) == name
    loaded = load_path(out)
    assert loaded.content_sha256() == store.content_sha256()  # every array, episode boundaries, final observations
    assert sorted(loaded.columns) == ["task_id"] and sorted(loaded.episode_columns) == ["seed"]
    np.testing.assert_array_equal(loaded.columns["task_id"], store.columns["task_id"])
    np.testing.assert_array_equal(loaded.episode_columns["seed"], store.episode_columns["seed"])
    assert (loaded.observation_space, loaded.action_space) == (store.observation_space, store.action_space)


@pytest.mark.parametrize("name", WRITTEN)
def test_format_export_never_overwrites(name, tmp_path):
    first = FORMATS[name].export(rich_store(), tmp_path / "out")
    with pytest.raises(OffbenchError, match="already exists"):
        FORMATS[name].export(make_store(seed=1), tmp_path / "out")
    assert load_path(first).content_sha256() == rich_store().content_sha256()


@pytest.mark.parametrize("name", WRITTEN)
def test_other_formats_do_not_claim_the_file(name, tmp_path):
    out = FORMATS[name].export(rich_store(), tmp_path / "out")
    assert [other for other, fmt in FORMATS.items() if fmt.detect(out)] == [name]


@pytest.mark.parametrize("name", READ_ONLY)
def test_read_only_formats_refuse_export_in_one_line(name, tmp_path):
    with pytest.raises(OffbenchError, match="does not write") as info:
        FORMATS[name].export(rich_store(), tmp_path / "out")
    assert "\n" not in str(info.value) and not (tmp_path / "out").exists()
