"""Small helpers shared across layers: atomic writes, JSON that never holds pickles, a progress bar."""

from __future__ import annotations

import json
import os
import re
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

from offbench.errors import OffbenchError

_SAFE_COMPONENT = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,127}")


def safe_component(name: str, what: str) -> str:
    """`name` if it is one safe path component (letters, digits, `._+-`, not starting with a dot or dash,
    at most 128 characters); else an OffbenchError naming `what` and the value. Every file or folder name
    taken from a URL, a card, a run or a label goes through here, so none can climb out of its folder."""
    if not isinstance(name, str) or not _SAFE_COMPONENT.fullmatch(name) or name in (".", ".."):
        raise OffbenchError(
            f"{what} {name!r} is not a safe file name (1-128 of A-Z a-z 0-9 . _ + -, starting with a letter or digit)"
        )
    return name


def die_with_parent() -> None:
    """Have the kernel SIGKILL this process when its parent dies (Linux PR_SET_PDEATHSIG; elsewhere a
    no-op), so a killed sweep or launcher leaves no orphan writing to a run directory. Use as a
    Popen preexec_fn, or call it first thing in a child."""
    import ctypes
    import signal
    import sys

    if sys.platform.startswith("linux"):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG = 1


def give_default_permissions(path: str | Path) -> None:
    """The mode a plain open()/mkdir() would have given (mkstemp and mkdtemp make files private, 0600/0700,
    which would leave a shared dataset folder unreadable to everyone else)."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(path, (0o777 if Path(path).is_dir() else 0o666) & ~umask)


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """A temp file next to `path` to write into; on success it replaces `path` in one rename, on any
    failure it is removed, so readers never see half a file and an existing file survives a failed write."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        give_default_permissions(tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def atomic_write_bytes(path: str | Path, data: bytes) -> Path:
    """Write via a temp file in the same folder and rename, so readers never see half a file."""
    with atomic_path(path) as tmp, open(tmp, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    return Path(path)


def atomic_write_text(path: str | Path, text: str) -> Path:
    return atomic_write_bytes(path, text.encode())


def atomic_write_json(path: str | Path, data: Any) -> Path:
    return atomic_write_text(path, json.dumps(data, indent=2, sort_keys=True, allow_nan=False) + "\n")


@contextmanager
def progress_bar(
    quiet: bool, label: str, total: int, unit: str = "episodes", completed: int = 0, fields: tuple[str, ...] = ()
) -> Iterator[Callable[..., None]]:
    """A rich progress bar on stderr (nothing when quiet); yields `advance(n, **values)`: n more done, and new
    values for the extra text columns named in `fields` (the trainer's rate and losses)."""
    if quiet:
        yield lambda n, **values: None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    columns = (
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn(unit), TimeElapsedColumn(), TimeRemainingColumn(),
        *(TextColumn(f"{{task.fields[{name}]}}") for name in fields),
    )
    with Progress(*columns, console=Console(stderr=True)) as bar:
        task = bar.add_task(label, total=total, completed=completed, **{name: "" for name in fields})
        yield lambda n, **values: bar.update(task, advance=n, **values)
