"""`offbench cache list|delete`: what is on disk under $OFFBENCH_HOME/data, and deleting it safely."""

from __future__ import annotations

import io
import sys

import pytest
from helpers import make_store

from offbench.data import cache
from offbench.data.resolve import PREPARE_LOCK


def cli(capsys, *args, answer: str | None = None, monkeypatch: pytest.MonkeyPatch | None = None) -> tuple[int, str, str]:
    from offbench import cli as offbench_cli

    if answer is not None:
        assert monkeypatch is not None, "an answer is typed through monkeypatch"
        monkeypatch.setattr(sys, "stdin", io.StringIO(answer))
    with pytest.raises(SystemExit) as exit_info:
        offbench_cli.main([str(a) for a in args])
    out, err = capsys.readouterr()
    code = exit_info.value.code
    assert isinstance(code, int)
    return code, out, err


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


# ---------------------------------------------------------------------------------------- generators' work folders


def training_run(home, generator: str, name: str, size: int):
    """What a generator keeps under $OFFBENCH_HOME/work/<generator>/: a training run's files."""
    folder = home / "work" / generator / name
    folder.mkdir(parents=True)
    (folder / "checkpoint.zip").write_bytes(b"w" * size)
    return folder


def work_rows(out: str) -> dict[str, list[str]]:
    """`cache list`'s work table (after the blank line) as generator -> [size, unit, status..., path]."""
    lines = out.split("\n\n", 1)[1].splitlines()
    assert lines[0].split()[:3] == ["work", "of", "size"]
    return {line.split()[0]: line.split()[1:] for line in lines[1:-1]}


def test_list_shows_each_generators_work_folder_and_its_size_after_the_datasets(capsys, isolated_home):
    native(isolated_home, "mine/full")
    training_run(isolated_home, "mujoco-local", "Hopper-v4-s0-abc", 20_000)
    training_run(isolated_home, "minigrid-learned", "runs", 5_000)
    code, out, _ = cli(capsys, "cache", "list")
    assert code == 0
    assert set(rows(out.split("\n\n")[0] + "\n")) == {"mine/full"}  # the dataset table as before
    work = work_rows(out)
    assert set(work) == {"minigrid-learned", "mujoco-local"}
    assert work["mujoco-local"][2:] == ["reusable", str(isolated_home / "work" / "mujoco-local")]
    sizes = {folder.generator: folder.size for folder in cache.work_folders()}
    assert sizes["mujoco-local"] >= 20_000 and 5_000 <= sizes["minigrid-learned"] < 20_000
    assert "--work GENERATOR" in out.splitlines()[-1]


def test_list_shows_work_folders_when_there_are_no_datasets(capsys, isolated_home):
    training_run(isolated_home, "mujoco-local", "Hopper-v4-s0-abc", 100)
    code, out, _ = cli(capsys, "cache", "list")
    assert code == 0 and out.startswith(f"no datasets under {isolated_home / 'data'}\n") and set(work_rows(out)) == {"mujoco-local"}


def test_delete_work_asks_first_and_removes_only_that_generators_folder(capsys, monkeypatch, isolated_home):
    native(isolated_home, "mine/x")
    training_run(isolated_home, "mujoco-local", "Hopper-v4-s0-abc", 100)
    kept = training_run(isolated_home, "minigrid-learned", "runs", 100)
    code, out, _ = cli(capsys, "cache", "delete", "--work", "mujoco-local", answer="n\n", monkeypatch=monkeypatch)
    assert code == 1 and "work of mujoco-local" in out and (isolated_home / "work" / "mujoco-local").is_dir()
    code, out, _ = cli(capsys, "cache", "delete", "--work", "mujoco-local", answer="y\n", monkeypatch=monkeypatch)
    assert code == 0 and "deleted work of mujoco-local" in out
    assert sorted(p.name for p in (isolated_home / "work").iterdir()) == ["minigrid-learned"] and kept.is_dir()
    assert (isolated_home / "data" / "mine" / "x" / "data.h5").is_file()  # datasets go only when named
    code, out, _ = cli(capsys, "cache", "delete", "mine/x", "--work", "minigrid-learned", "--yes")
    assert code == 0 and list((isolated_home / "work").iterdir()) == [] and not (isolated_home / "data" / "mine").exists()


@pytest.mark.parametrize("args, fragment", [
    ([], "name dataset ids, --work GENERATOR, or both"),
    (["--work", "nope"], "--work nope: no work folder under"),
    (["--work", "mujoco-local", "--work", "nope"], "--work nope: no work folder under"),  # one unknown: nothing deleted
    (["--work", ".."], "'..' is not a safe file name"),
    (["--work", "linked"], "a link (to"),
])  # fmt: skip
def test_delete_work_refuses_in_one_line_and_touches_nothing(args, fragment, capsys, isolated_home, tmp_path):
    training_run(isolated_home, "mujoco-local", "Hopper-v4-s0-abc", 100)
    training_run(tmp_path, "elsewhere", "run", 100)
    (isolated_home / "work" / "linked").symlink_to(tmp_path / "work" / "elsewhere")
    before = sorted(tmp_path.rglob("*"))
    code, _, err = cli(capsys, "cache", "delete", *args, "--yes")
    assert code == 2 and err.count("\n") == 1 and fragment in err, err
    assert sorted(tmp_path.rglob("*")) == before


def test_an_interrupted_work_delete_is_listed_and_finished(capsys, monkeypatch, isolated_home):
    training_run(isolated_home, "mujoco-local", "Hopper-v4-s0-abc", 100)

    def cut_short(path, *args, **kwargs):
        raise KeyboardInterrupt  # Ctrl-C once the folder is renamed, before anything is removed

    with monkeypatch.context() as patch, pytest.raises(KeyboardInterrupt):
        patch.setattr(cache.shutil, "rmtree", cut_short)
        cache._remove_work(cache.work_folders()[0])
    assert not (isolated_home / "work" / "mujoco-local").exists()  # no generator resumes from half a run
    code, out, _ = cli(capsys, "cache", "list")
    assert work_rows(out)["mujoco-local"][2:4] == ["interrupted", "delete"]
    code, _, _ = cli(capsys, "cache", "delete", "--work", "mujoco-local", "--yes")
    assert code == 0 and list((isolated_home / "work").iterdir()) == []


def test_delete_work_is_refused_while_a_run_is_being_trained_and_done_once_it_is_not(capsys, isolated_home):
    from filelock import FileLock

    from offbench.generators.work_lock import lock_file, work_lock

    run = training_run(isolated_home, "mujoco-local", "Hopper-v4-s0-abc", 100)
    with work_lock(training_run(isolated_home, "mujoco-local", "Walker2d-v4-s0-def", 100)):
        pass  # a finished run: its lock file is left, free
    with FileLock(str(lock_file(run))):  # what a generation holds while it trains the run
        code, _, err = cli(capsys, "cache", "delete", "--work", "mujoco-local", "--yes")
    assert code == 2 and err.count("\n") == 1 and f"another process is working on {run} (" in err, err
    assert (run / "checkpoint.zip").is_file()
    code, out, _ = cli(capsys, "cache", "delete", "--work", "mujoco-local", "--yes")
    assert code == 0 and "deleted work of mujoco-local" in out and list((isolated_home / "work").iterdir()) == []


def test_lock_files_are_not_listed_as_work(capsys, isolated_home):
    from offbench.generators.work_lock import work_lock

    run = training_run(isolated_home, "mujoco-local", "Hopper-v4-s0-abc", 100)
    with work_lock(run), work_lock(isolated_home / "work" / "minigrid-learned" / "runs" / "task-s0-abc.npz"):
        pass  # minigrid-learned's training failed before it wrote its run: only the lock is left
    code, out, _ = cli(capsys, "cache", "list")
    assert code == 0 and set(work_rows(out)) == {"mujoco-local"}
