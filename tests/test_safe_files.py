"""Files land only where they belong, and a write that cannot finish leaves nothing: safe names, atomic
writers that clean up after killed processes, and full or read-only disks reported in one line."""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from helpers import make_store

from offbench.errors import OffbenchError
from offbench.utils import atomic_write_text, check_writable, remove_stale_temporaries, safe_component, temp_prefix


@pytest.mark.parametrize("name", ["a", "hopper-medium-v2", "bc+dt_1.0", "A" * 128, "x..y", "0"])
def test_safe_component_keeps_plain_names(name):
    assert safe_component(name, "label") == name


@pytest.mark.parametrize(
    "name", ["", ".", "..", ".hidden", "-rf", "a/b", "../x", "a\\b", "a b", "a\nb", "é", "A" * 129, "x\0y", "<script>", "a;b"]
)
def test_safe_component_refuses_anything_else_naming_what_and_the_value(name):
    with pytest.raises(OffbenchError, match=r"^label .* is not a safe file name"):
        safe_component(name, "label")


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_stale_temporaries_of_dead_processes_go_and_the_others_stay(tmp_path):
    live = tmp_path / (temp_prefix(tmp_path / "data.h5") + "abc.tmp")  # this process, still writing
    dead = tmp_path / live.name.replace(f".{os.getpid()}@", f".{dead_pid()}@")
    dead_dir = tmp_path / (temp_prefix(tmp_path / "export").replace(f".{os.getpid()}@", f".{dead_pid()}@") + "x_1.tmp")
    other_host = tmp_path / f".data.h5.{dead_pid()}@some-other-host.abc.tmp"  # maybe alive there (shared filesystem)
    user_files = [tmp_path / "data.h5", tmp_path / ".data.h5.tmp", tmp_path / "notes.1@x.y.tmp"]
    for path in (live, dead, other_host, *user_files):
        path.write_text("x")
    dead_dir.mkdir()
    (dead_dir / "half.hdf5").write_text("x")

    assert sorted(remove_stale_temporaries(tmp_path)) == sorted([dead, dead_dir])
    assert all(path.exists() for path in (live, other_host, *user_files)) and not dead.exists() and not dead_dir.exists()


def test_a_write_killed_with_sigkill_is_cleaned_up_by_the_next_write_in_its_folder(tmp_path):
    """kill -9 in the middle of writing a dataset leaves its temporary; the next save next to it removes it."""
    target = tmp_path / "data.h5"
    script = textwrap.dedent(f"""
        import os, signal
        from offbench.utils import atomic_path
        with atomic_path({str(target)!r}) as tmp:
            tmp.write_bytes(b"x" * 100_000)
            os.kill(os.getpid(), signal.SIGKILL)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=120)
    assert proc.returncode == -9
    leftovers = [p.name for p in tmp_path.iterdir()]
    assert len(leftovers) == 1 and leftovers[0].startswith(".data.h5.") and leftovers[0].endswith(".tmp")

    make_store().save(target)
    assert [p.name for p in tmp_path.iterdir()] == ["data.h5"]


def test_check_writable_creates_nothing_and_names_what_is_in_the_way(tmp_path):
    (tmp_path / "afile").write_text("x")
    with pytest.raises(OffbenchError, match=r"cannot make folder .*afile/a/b: .*afile is not a folder"):
        check_writable(tmp_path / "afile" / "a" / "b")
    assert check_writable(tmp_path / "new" / "deeper") == tmp_path / "new" / "deeper"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]
    with pytest.raises(OffbenchError, match="File name too long"):
        atomic_write_text(tmp_path / ("a" * 300), "x")


# ---------------------------------------------------------------------------------------- full and read-only disks
def files_under(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())


@pytest.fixture
def small_disk(tmp_path):
    """A 64 KiB filesystem (a tmpfs mount; needs root), for a real ENOSPC."""
    folder = tmp_path / "small"
    folder.mkdir()
    if (
        os.geteuid() != 0
        or shutil.which("mount") is None
        or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(folder)], capture_output=True).returncode
    ):
        pytest.skip("mounting a small filesystem needs root and the right to mount")
    yield folder
    subprocess.run(["umount", str(folder)], check=True)


def run_main(*argv) -> int:
    """`offbench ARGV` in this process; its exit code (stderr goes to capsys)."""
    from offbench import cli

    with pytest.raises(SystemExit) as exit_info:
        cli.main([str(arg) for arg in argv])
    return exit_info.value.code


@pytest.mark.parametrize("fmt", ["offbench", "d4rl", "minari"])
def test_full_disk_during_export_is_one_line_and_leaves_no_file(fmt, small_disk, tmp_path, capsys):
    """HDF5 does not survive a write failing half-way (the process crashed here on ENOSPC), so the space is
    checked before the write starts."""
    make_store(episode_lengths=(2000, 2000), terminal_last=(True, False)).save(tmp_path / "big.h5")
    code = run_main("export", tmp_path / "big.h5", "--format", fmt, "--out", small_disk / "out")
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith(f"offbench: error: disk full writing {small_disk / 'out'}"), lines
    assert files_under(small_disk) == []


def test_full_disk_during_generate_is_one_line_and_leaves_no_file(small_disk, capsys):
    code = run_main("generate", "darkroom", "--tasks", "2", "--episodes", "200", "-q", "--out", small_disk / "gen")
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith(f"offbench: error: disk full writing {small_disk / 'gen' / 'data.h5'}"), (
        lines
    )
    assert files_under(small_disk) == []


def test_a_write_failing_half_way_is_one_line_and_leaves_no_temporary(tmp_path):
    """Past the free-space check the write itself fails (here: RLIMIT_FSIZE, EFBIG, where a disk filled by
    someone else gives ENOSPC): one line naming the file, and no temporary left behind."""
    script = f"from offbench.utils import atomic_write_bytes; atomic_write_bytes({str(tmp_path / 'x.bin')!r}, bytes(100_000))"

    def limit_file_size():
        resource.setrlimit(resource.RLIMIT_FSIZE, (20_000, 20_000))

    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, preexec_fn=limit_file_size)
    assert (
        proc.returncode == 1
        and proc.stderr.strip().splitlines()[-1] == f"offbench.errors.OffbenchError: cannot write {tmp_path / 'x.bin'}: File too large"
    )
    assert files_under(tmp_path) == []


def test_full_disk_at_a_training_checkpoint_is_one_line(tmp_path, monkeypatch, capsys):
    """Training has begun when the disk fills: the checkpoint is refused in one line; the run can be resumed."""
    import offbench.utils

    make_store(episode_lengths=(50, 50), terminal_last=(True, False)).save(tmp_path / "data.h5")
    real_disk_usage = shutil.disk_usage

    def full_under_checkpoints(path):
        usage = real_disk_usage(path)
        return usage._replace(free=0) if Path(path).name == "checkpoints" else usage

    monkeypatch.setattr(offbench.utils.shutil, "disk_usage", full_under_checkpoints)
    code = run_main(
        "run",
        "baseline",
        "bc",
        "--dataset",
        tmp_path / "data.h5",
        "--out",
        tmp_path / "runs",
        "--name",
        "r",
        "--steps",
        "2",
        "--set",
        "eval_episodes=0",
        "--set",
        "checkpoint_every=1",
        "--set",
        "hidden_dim=8",
    )
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("offbench:")]
    checkpoint = tmp_path / "runs" / "r" / "checkpoints" / "last.pt"
    assert code == 2 and len(errors) == 1 and errors[0].startswith(f"offbench: error: disk full writing {checkpoint} (0 bytes free;")
    left = files_under(tmp_path / "runs" / "r")
    assert "run.json" in left and not [name for name in left if name.startswith("checkpoints/")]


@pytest.fixture
def read_only_dir(tmp_path):
    """A folder no one may write into: a read-only tmpfs mount as root (root ignores modes), else mode 0555."""
    folder = tmp_path / "ro"
    folder.mkdir()
    if os.geteuid() != 0:
        folder.chmod(0o555)
        yield folder
        folder.chmod(0o755)
        return
    if (
        shutil.which("mount") is None
        or subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(folder)], capture_output=True).returncode
    ):
        pytest.skip("running as root without the right to mount a read-only filesystem")
    yield folder
    subprocess.run(["umount", str(folder)], check=True)


def test_read_only_offbench_home_is_one_line_before_any_work(read_only_dir, monkeypatch, capsys):
    monkeypatch.setenv("OFFBENCH_HOME", str(read_only_dir))
    for argv in (["download", "darkroom-small"], ["generate", "darkroom", "--tasks", "2", "--episodes", "5", "-q"]):
        code = run_main(*argv)
        err = capsys.readouterr().err.strip()
        assert code == 2 and err == f"offbench: error: cannot write into {read_only_dir}: read-only or no permission"
