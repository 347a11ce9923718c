"""The Store protocol: what every caller asks of a dataset, met alike by an EpisodeStore and by an XLand file read
in place, and the callers that decide by `read_in_place` (info and verify: tests/test_xland_data.py and
tests/test_cli_basics.py; the learning curve: tests/test_icrl_plot.py and tests/training/test_xland_runs.py)."""

from __future__ import annotations

import pytest
from helpers import make_store

import offbench
from offbench.data.commands import export
from offbench.data.formats import FORMATS, detect_format, reads_in_place
from offbench.data.spec import DatasetSpec
from offbench.data.store import Store
from offbench.data.xland import write_xland_file
from offbench.errors import OffbenchError


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("stores")
    return {
        "offbench": make_store().save(folder / "native.h5"),
        "xland": write_xland_file(folder / "histories.hdf5", tasks=2, histories=2, steps=300, chunk_steps=128),
    }


def test_both_stores_meet_the_protocol_and_their_format_says_how_they_are_read(files):
    for name, path in files.items():
        store = offbench.load(path)
        assert detect_format(path) == name and isinstance(store, Store)
        assert store.read_in_place is FORMATS[name].read_in_place is (name == "xland")
        store.validate()
        assert len(store.content_sha256()) == 64
    native, histories = offbench.load(files["offbench"]), offbench.load(files["xland"])
    assert (native.id, len(native), native.num_transitions) == ("test/hand-built", 3, 10)  # the card's id; episodes
    assert (histories.id, len(histories), histories.num_transitions) == ("histories", 4, 1200)  # the file's stem; histories
    assert not isinstance({"card": {}, "path": None}, Store)


def test_every_format_declares_whether_it_reads_in_place():
    assert all(isinstance(fmt.read_in_place, bool) for fmt in FORMATS.values())
    assert reads_in_place("xland") and not reads_in_place("offbench") and not reads_in_place("no-such-format")


def test_a_spec_is_computed_from_episodes_or_asked_of_a_store_read_in_place(files):
    native = DatasetSpec.from_store(offbench.load(files["offbench"]))
    assert native.max_episode_length == 5 and native.observation_mean is not None and native.return_range is not None
    histories = DatasetSpec.from_store(offbench.load(files["xland"]))
    assert histories.max_episode_length == 3 * 9 * 9 and histories.num_tasks == 2  # XLand-MiniGrid-R1-9x9's time limit
    assert histories.observation_mean is None and histories.return_range is None  # no pass over the file


def test_a_store_read_in_place_is_not_exported(files, tmp_path):
    with pytest.raises(OffbenchError, match="1,200 transitions read in place; offbench does not convert"):
        export(str(files["xland"]), format="d4rl", out=tmp_path / "exported")
    assert not (tmp_path / "exported").exists()
