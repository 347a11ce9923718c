"""String-keyed registry of on-disk formats: detect a path's format by content, load it, export to it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Protocol

from offbench.data.store import EpisodeStore, is_native, load_native
from offbench.errors import OffbenchError


class Format(Protocol):
    name: str

    def detect(self, path: Path) -> bool: ...

    def load(self, path: Path) -> EpisodeStore: ...

    def export(self, store: EpisodeStore, out: Path) -> Path: ...


@dataclass(frozen=True)
class FunctionFormat:
    """A format made of three functions (what every built-in format is)."""

    name: str
    detect: Callable[[Path], bool]
    load: Callable[[Path], EpisodeStore]
    export: Callable[[EpisodeStore, Path], Path]


def _export_native(store: EpisodeStore, out: Path) -> Path:
    target = out / "data.h5" if out.suffix not in (".h5", ".hdf5") else out
    return store.save(target)


FORMATS: dict[str, Format] = {
    "offbench": FunctionFormat("offbench", is_native, load_native, _export_native),
}


def register_format(fmt: Format) -> None:
    FORMATS[fmt.name] = fmt


def detect_format(path: Path) -> str:
    """Name of the format of `path` (file or folder), judged by content, not by name."""
    path = Path(path)
    if not path.exists():
        raise OffbenchError(f"{path}: no such file or folder")
    for name, fmt in FORMATS.items():
        if fmt.detect(path):
            return name
    raise OffbenchError(f"{path}: not a dataset in any known format ({', '.join(FORMATS)})")


def load_path(path: str | Path, format: str | None = None) -> EpisodeStore:
    path = Path(path)
    name = format or detect_format(path)
    if name not in FORMATS:
        raise OffbenchError(f"unknown format '{name}' (known: {', '.join(FORMATS)})")
    return FORMATS[name].load(path)
