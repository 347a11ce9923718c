"""One lock per unit of work that generators share between datasets (a `minigrid-learned` task run, a `mujoco-local`
workspace), so that two processes preparing datasets that need the same run never train it at once: the second
waits, then finds the run finished and reuses it. `offbench cache delete --work` takes the same locks before it
moves a work folder aside.

Each lock is a `filelock.FileLock`, on Unix an flock: the OS releases it when its holder exits, killed or not, so a
crashed run never leaves a lock behind that blocks the next one. Its file, the hidden `.<name>.lock` beside the work
it guards, stays after release (empty, and never listed as work).
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from filelock import FileLock, Timeout

from offbench.utils import acquire_announced, ensure_dir

LOCK_SUFFIX = ".lock"


def lock_file(work: Path) -> Path:
    """The lock guarding `work` (a file or a folder): `.<name>.lock` beside it."""
    return work.with_name(f".{work.name}{LOCK_SUFFIX}")


def guarded_work(lock: Path) -> Path:
    """The work a lock file guards (`lock_file`'s inverse)."""
    return lock.with_name(lock.name[1 : -len(LOCK_SUFFIX)])


def is_lock_file(name: str) -> bool:
    return name.startswith(".") and name.endswith(LOCK_SUFFIX)


def lock_files(folder: Path) -> list[Path]:
    """Every work lock under `folder`, links not followed."""
    return sorted(Path(parent, name) for parent, _, names in os.walk(folder) for name in names if is_lock_file(name))


def held_elsewhere(work: Path) -> bool:
    """Whether another process holds `work`'s lock now (a look, not a claim: it may be taken a moment later)."""
    if not lock_file(work).is_file():
        return False
    lock = FileLock(str(lock_file(work)))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        return True
    lock.release()
    return False


@contextmanager
def work_lock(work: Path) -> Iterator[None]:
    """Hold `work`'s lock for the block. A process that finds it held says once on stderr what it waits for, then
    waits; the block should look for the finished work first, as the holder may have just made it."""
    ensure_dir(work.parent)
    lock = FileLock(str(lock_file(work)))
    acquire_announced(lock, f"working on {work}")
    try:
        yield
    finally:
        lock.release()
