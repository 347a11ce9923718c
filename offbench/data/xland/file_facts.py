"""What a pass over a large file found, remembered under $OFFBENCH_HOME/xland by the file's path, size and
modification time (git's stat-cache rule): a changed file is looked at again. Checking the layout of
XLand-100B's 28,876 groups takes tens of seconds and hashing its 326 GB minutes, so each is paid once per file;
`verify` always redoes both."""

from __future__ import annotations

import json
from pathlib import Path

from offbench.errors import OffbenchError
from offbench.paths import offbench_home
from offbench.utils import atomic_write_json

LAYOUT_CHECKED = "layout-checked.json"  # "ok" for a file that passed `scan_layout`
SHA256 = "sha256.json"  # the file's sha256


def _stat_key(path: Path) -> str:
    stat = path.stat()
    return f"{path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}"


def _read(cache: Path) -> dict[str, str]:
    try:
        known = json.loads(cache.read_text())
    except (OSError, ValueError):
        return {}
    return known if isinstance(known, dict) else {}


def _cache(name: str) -> Path:
    return offbench_home() / "xland" / name


def recall(name: str, path: Path) -> str | None:
    """What cache `name` holds for this very file (same path, size and modification time), or None."""
    value = _read(_cache(name)).get(_stat_key(path))
    return value if isinstance(value, str) else None


def remember(name: str, path: Path, value: str) -> None:
    """Record `value` for this file in cache `name`, replacing what an older version of the file left there."""
    cache = _cache(name)
    key = _stat_key(path)
    same_file = key.rsplit("|", 2)[0] + "|"
    known = {k: v for k, v in _read(cache).items() if not k.startswith(same_file)}
    try:
        atomic_write_json(cache, {**known, key: value})
    except (OSError, OffbenchError):
        pass  # a read-only home only costs the pass again next time
