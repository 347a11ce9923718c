"""Small helpers shared across layers: atomic writes, JSON that never holds pickles."""

from __future__ import annotations

import json
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator


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


def progress_bar(*extra_fields: str):
    """The rich progress bar of long commands, on stderr: description, bar, n/total, elapsed and remaining time,
    then one text column per name in `extra_fields` (each task sets them as fields: `add_task(..., rate="")`)."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    return Progress(
        TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), TimeRemainingColumn(),
        *(TextColumn(f"{{task.fields[{name}]}}") for name in extra_fields),
        console=Console(stderr=True),
    )
