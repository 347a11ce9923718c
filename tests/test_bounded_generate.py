"""`offbench generate minigrid` is bounded: a collection that cannot fit on the disk or in memory is refused before
any work, and killing the collecting process leaves no worker behind (the next run resumes and cleans up)."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
from helpers import offbench_command, require_extra

from offbench.errors import OffbenchError

require_extra("minigrid", "minigrid")


def minigrid(params: dict, out: Path) -> Path:
    from offbench.generators import get_generator

    return get_generator("minigrid")({"workers": 1, **params}, 0, out, True)


def test_a_billion_episodes_are_refused_up_front_in_one_line(tmp_path, run_cli):
    """3 x 10^9 episodes: today the jobs alone take minutes to list, then the collection runs until the disk fills."""
    out = tmp_path / "out"
    started = time.monotonic()
    proc = run_cli("generate", "minigrid", "--suite", "MT3", "--episodes", "1000000000", "--out", out, "--quiet", timeout=60)
    assert proc.returncode == 2 and time.monotonic() - started < 30
    line = proc.stderr.strip()
    assert "\n" not in line and re.match(
        r"offbench: error: minigrid MT3: 3,000,000,000 episodes \(1,000,000,000 per task\) take at least [\d,]+ bytes, "
        r"(twice on disk while merging: disk full writing .*data\.h5|which the merge holds in memory)",
        line,
    ), line
    assert not out.exists()


class Started(Exception):
    """Raised by the first job: the collection got past its checks."""


def no_jobs(monkeypatch) -> None:
    from offbench.generators import multitask

    def started(*args):
        raise Started

    monkeypatch.setattr(multitask, "run_job", started)


def test_the_disk_check_counts_the_shards_and_the_merged_file(tmp_path, monkeypatch):
    out = tmp_path / "new" / "folder" / "data.h5"
    free = 10_000_000
    real = shutil.disk_usage
    monkeypatch.setattr(shutil, "disk_usage", lambda path: real(path)._replace(free=free))
    no_jobs(monkeypatch)
    with pytest.raises(OffbenchError) as info:
        minigrid({"suite": "MT3", "episodes_per_task": 100_000}, out)
    message = str(info.value)
    least = int(re.search(r"take at least ([\d,]+) bytes", message)[1].replace(",", ""))
    assert least >= 300_000 * 150  # every step holds at least a 148-byte view
    assert f"disk full writing {out} ({free:,} bytes free; {2 * least:,} bytes needed)" in message
    assert not (tmp_path / "new").exists()  # nothing made, not even the folder

    free = 10 * least  # fits: the check lets it through
    with pytest.raises(Started):
        minigrid({"suite": "MT3", "episodes_per_task": 100_000}, out)


def test_the_memory_check_refuses_a_merge_that_cannot_fit(tmp_path, monkeypatch):
    from offbench.generators import multitask

    monkeypatch.setattr(multitask, "_available_memory", lambda: 1_000_000, raising=False)
    no_jobs(monkeypatch)
    with pytest.raises(
        OffbenchError,
        match=r"^minigrid MT3: 300,000 episodes \(100,000 per task\) take at least [\d,]+ bytes, which the "
        r"merge holds in memory, and 1,000,000 bytes of memory are available; collect fewer episodes per task$",
    ):
        minigrid({"suite": "MT3", "episodes_per_task": 100_000}, tmp_path / "data.h5")
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------------------------------ a killed parent
def _descendants(pid: int) -> set[int]:
    """Every process below `pid` (children, their children, ...), from /proc."""
    parents = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, todo = set(), [pid]
    while todo:
        parent = todo.pop()
        children = [child for child, ppid in parents.items() if ppid == parent]
        found.update(children)
        todo += children
    return found


def _running(pid: int) -> bool:
    """Alive and not a zombie (a zombie's only wait is for whoever reaps it)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def kill_when(args: list[str], ready, least_workers: int) -> None:
    """Start `offbench ARGS`, SIGKILL it once `ready()` holds and it has `least_workers` descendants, and check that
    none of them outlives it."""
    parent = subprocess.Popen(offbench_command(*args), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    workers: set[int] = set()
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and parent.poll() is None and (len(_descendants(parent.pid)) < least_workers or not ready()):
            time.sleep(0.05)
        workers = _descendants(parent.pid)
        assert parent.poll() is None and len(workers) >= least_workers, "the work ended before it could be killed"
        parent.send_signal(signal.SIGKILL)
        parent.wait(10)
        deadline = time.monotonic() + 10
        while any(_running(pid) for pid in workers) and time.monotonic() < deadline:
            time.sleep(0.05)
        left = sorted(pid for pid in workers if _running(pid))
        assert not left, f"processes left behind by the killed parent: {left}"
    finally:
        for pid in workers:  # never leave them to the next test
            if _running(pid):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads the process tree from /proc")
def test_killing_the_parent_leaves_no_worker_and_the_rerun_leaves_nothing_but_the_dataset(tmp_path, isolated_home):
    out = tmp_path / "out"
    args = [
        "generate",
        "minigrid",
        "--suite",
        "MT3",
        "--tasks",
        "MiniGrid-LavaGapS7-v0",
        "--episodes",
        "600",
        "--workers",
        "2",
        "--out",
        str(out),
        "--quiet",
    ]
    kill_when(args, lambda: bool(list((out / "data.h5.work").glob("*.npz"))), 3)  # the resource tracker, the forkserver, 2 workers
    assert list((out / "data.h5.work").glob("*.npz"))  # what was finished stays for the next run

    rerun = subprocess.run(offbench_command(*args), capture_output=True, text=True, timeout=120)
    assert rerun.returncode == 0, rerun.stderr
    assert sorted(p.name for p in out.iterdir()) == ["card.toml", "data.h5"]  # no work folder, no temporaries


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads the process tree from /proc")
def test_killing_a_learning_history_generation_leaves_no_worker_and_no_parts_folder(tmp_path, isolated_home):
    out = tmp_path / "out"
    args = [
        "generate",
        "darkroom",
        "--tasks",
        "8",
        "--held-out",
        "2",
        "--histories-per-task",
        "4",
        "--episodes",
        "4000",
        "--workers",
        "2",
        "--seed",
        "0",
        "--out",
        str(out),
        "--quiet",
    ]
    kill_when(args, lambda: bool(list(out.glob(".*.tmp"))), 2)
    rerun = subprocess.run(offbench_command(*args), capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr
    assert sorted(p.name for p in out.iterdir() if p.name.startswith(".")) == []  # the killed run's parts folder is gone
