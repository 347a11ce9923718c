"""`offbench cache list|delete`: what is on disk under $OFFBENCH_HOME/data, and deleting it safely."""

from __future__ import annotations

import io
import sys

import pytest
from helpers import make_store

from offbench.data import cache
from offbench.data.resolve import PREPARE_LOCK


def cli(capsys, *args, answer: str | None = None, monkeypatch=None) -> tuple[int, str, str]:
    from offbench import cli as offbench_cli

    if answer is not None:
        monkeypatch.setattr(sys, "stdin", io.StringIO(answer))
    with pytest.raises(SystemExit) as exit_info:
        offbench_cli.main([str(a) for a in args])
    out, err = capsys.readouterr()
    return exit_info.value.code, out, err


def native(home, dataset_id: str):
    """A complete dataset: its native file where a download or generation puts it."""
    return make_store().save(home / "data" / dataset_id / "data.h5")


def partial_download(home, dataset_id: str, name: str = "payload.hdf5"):
    """What an interrupted download leaves: the lock and a .part file under raw/."""
    folder = home / "data" / dataset_id
    (folder / "raw").mkdir(parents=True)
    (folder / PREPARE_LOCK).touch()
    (folder / "raw" / f"{name}.part").write_bytes(b"x" * 5000)
    return folder


def rows(out: str) -> dict[str, list[str]]:
    """`cache list`'s table as id -> [size, unit, status..., path]."""
    return {line.split()[0]: line.split()[1:] for line in out.splitlines()[1:-1]}


def test_list_shows_id_size_status_and_path(capsys, isolated_home):
    data = isolated_home / "data"
    full = native(isolated_home, "mine/full")
    partial_download(isolated_home, "d4rl/hopper-medium-v2", "hopper_medium-v2.hdf5")  # a registered card, its file not all there
    code, out, _ = cli(capsys, "cache", "list")
    assert code == 0
    table = rows(out)
    assert set(table) == {"mine/full", "d4rl/hopper-medium-v2"}  # namespace folders and raw/ are not datasets
    assert table["mine/full"][2:] == ["complete", str(data / "mine" / "full")]
    assert table["d4rl/hopper-medium-v2"][2:] == ["partial", str(data / "d4rl" / "hopper-medium-v2")]
    sizes = {dataset.id: dataset.size for dataset in cache.cached_datasets()}
    assert sizes["mine/full"] >= full.stat().st_size and sizes["d4rl/hopper-medium-v2"] >= 5000


def test_list_with_nothing_on_disk(capsys, isolated_home):
    code, out, _ = cli(capsys, "cache", "list")
    assert code == 0 and out.strip() == f"no datasets under {isolated_home / 'data'}"


def test_delete_asks_first_and_removes_only_what_was_named(capsys, monkeypatch, isolated_home):
    data = isolated_home / "data"
    native(isolated_home, "mine/x")
    native(isolated_home, "mine/y")
    code, out, _ = cli(capsys, "cache", "delete", "mine/x", answer="n\n", monkeypatch=monkeypatch)
    assert code == 1 and "Delete 1 folder(s)" in out and (data / "mine" / "x" / "data.h5").is_file()
    code, out, _ = cli(capsys, "cache", "delete", "mine/x", answer="y\n", monkeypatch=monkeypatch)
    assert code == 0 and "deleted mine/x" in out
    assert not (data / "mine" / "x").exists() and (data / "mine" / "y" / "data.h5").is_file()
    code, out, _ = cli(capsys, "cache", "delete", "mine/y", "--yes")
    assert code == 0 and sorted(p.name for p in data.iterdir()) == []  # the emptied namespace folder goes too
    assert isolated_home.is_dir() and data.is_dir()


@pytest.mark.parametrize("ids, fragment", [
    (["nope"], "nope: not on disk under"),
    (["mine/x", "nope"], "nope: not on disk under"),  # one unknown id: nothing is deleted
    (["../outside"], "'..' is not a safe file name"),
    (["mine"], "mine: not on disk under"),  # a namespace folder is not a dataset
    (["linked"], "a link (to"),
])  # fmt: skip
def test_delete_refuses_in_one_line_and_touches_nothing(ids, fragment, capsys, isolated_home, tmp_path):
    native(isolated_home, "mine/x")
    outside = tmp_path / "outside"
    native(outside.parent, "outside")  # tmp_path/data/outside: a dataset-looking folder outside OFFBENCH_HOME
    (isolated_home / "data" / "linked").symlink_to(tmp_path / "data" / "outside")
    before = sorted(p for p in tmp_path.rglob("*"))
    code, out, err = cli(capsys, "cache", "delete", *ids, "--yes")
    assert code == 2 and err.count("\n") == 1 and err.startswith("offbench: error:") and fragment in err, err
    assert sorted(p for p in tmp_path.rglob("*")) == before


def test_a_dataset_being_prepared_is_not_deleted(capsys, isolated_home):
    from filelock import FileLock

    folder = partial_download(isolated_home, "mine/downloading")
    with FileLock(str(folder / PREPARE_LOCK)):  # what resolve.ensure_local holds while it downloads or generates
        code, _, err = cli(capsys, "cache", "delete", "mine/downloading", "--yes")
    assert code == 2 and "another process is downloading or generating it" in err
    assert (folder / "raw" / "payload.hdf5.part").is_file()


def test_an_interrupted_delete_leaves_nothing_that_looks_complete(capsys, monkeypatch, isolated_home):
    from offbench.data.cards import get_card
    from offbench.data.resolve import is_local

    native(isolated_home, "darkroom-small")  # a registered recipe card's dataset
    assert is_local(get_card("darkroom-small"))

    def cut_short(path, *args, **kwargs):
        raise KeyboardInterrupt  # Ctrl-C once the folder is renamed, before anything is removed

    with monkeypatch.context() as patch, pytest.raises(KeyboardInterrupt):
        patch.setattr(cache.shutil, "rmtree", cut_short)
        cache._remove(next(d for d in cache.cached_datasets() if d.id == "darkroom-small"))
    assert not is_local(get_card("darkroom-small"))  # offbench would make it afresh, never open half of it
    code, out, _ = cli(capsys, "cache", "list")
    assert rows(out)["darkroom-small"][2:4] == ["interrupted", "delete"]
    code, out, _ = cli(capsys, "cache", "delete", "darkroom-small", "--yes")
    assert code == 0 and list((isolated_home / "data").iterdir()) == []
