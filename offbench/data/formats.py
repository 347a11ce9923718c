"""String-keyed registry of on-disk formats: detect a path's format by content, load it, export to it."""

from __future__ import annotations

import functools
import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Protocol

import h5py

from offbench.data import d4rl_format, minari_format
from offbench.data.store import EpisodeStore, InPlaceStore, is_native, load_native, open_hdf5
from offbench.errors import OffbenchError
from offbench.registry import lookup, register


class Format(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def read_in_place(self) -> bool:
        """The loaded store's `Store.read_in_place`: never converted to the native format on download."""
        ...

    @property
    def writes(self) -> bool:
        """False: a published layout offbench reads but does not write (export says so)."""
        ...

    def detect(self, path: Path, /) -> bool: ...

    def load(self, path: Path, /) -> EpisodeStore | InPlaceStore: ...

    def export(self, store: EpisodeStore, out: Path, /) -> Path: ...


@dataclass(frozen=True)
class FunctionFormat:
    """A format made of three functions (what every built-in format is)."""

    name: str
    detect: Callable[[Path], bool]
    load: Callable[[Path], EpisodeStore]
    export: Callable[[EpisodeStore, Path], Path]
    writes: bool = True
    read_in_place: bool = False


def _export_native(store: EpisodeStore, out: Path) -> Path:
    target = out / "data.h5" if out.suffix not in (".h5", ".hdf5") else out
    if target.exists():
        raise OffbenchError(f"{target}: already exists; remove it or choose another --out")
    return store.save(target)


FORMATS: dict[str, Format] = {}  # add one with offbench.registry.register(FORMATS, fmt.name)(fmt)
for _format in (
    FunctionFormat("offbench", is_native, load_native, _export_native),
    FunctionFormat("minari", minari_format.detect_minari, minari_format.load_minari, minari_format.export_minari),
    FunctionFormat("d4rl", d4rl_format.detect_d4rl, d4rl_format.load_d4rl, d4rl_format.export_d4rl),
):
    register(FORMATS, _format.name)(_format)


def reads_in_place(name: str) -> bool:
    """Whether a format's files are opened where they lie (never converted to the native format on download)."""
    return name in FORMATS and FORMATS[name].read_in_place


class LazyFormat:
    """A format whose module loads on first use: offbench.data.xland brings its samplers and so torch (~3 s),
    which commands that never meet an XLand file (generate, list, info on native files) should not pay."""

    def __init__(self, name: str, module: str, attribute: str, read_in_place: bool, writes: bool):
        self.name, self.read_in_place, self.writes = name, read_in_place, writes
        self._where = (module, attribute)

    @functools.cached_property
    def _format(self) -> Format:
        module, attribute = self._where
        return getattr(importlib.import_module(module), attribute)()

    def detect(self, path: Path) -> bool:
        return self._format.detect(path)

    def load(self, path: Path) -> EpisodeStore | InPlaceStore:
        return self._format.load(path)

    def export(self, store: EpisodeStore, out: Path) -> Path:
        return self._format.export(store, out)


from offbench.data import mtdiff  # noqa: E402

for _format in (
    LazyFormat("xland", "offbench.data.xland", "XLandFormat", read_in_place=True, writes=False),
    FunctionFormat("mtdiff", mtdiff.detect_mtdiff, mtdiff.import_mtdiff, mtdiff.export_mtdiff, writes=False),
):
    register(FORMATS, _format.name)(_format)


def detect_format(path: Path) -> str:
    """Name of the format of `path` (file or folder), judged by content, not by name."""
    path = Path(path)
    if not path.exists():
        raise OffbenchError(f"{path}: no such file or folder")
    for name, fmt in FORMATS.items():
        if fmt.detect(path):
            return name
    if path.is_file() and h5py.is_hdf5(path):
        open_hdf5(path).close()  # a truncated or corrupt file says so
    raise OffbenchError(f"{path}: not a dataset in any known format ({', '.join(FORMATS)})")


def load_path(path: str | Path, format: str | None = None) -> EpisodeStore | InPlaceStore:
    path = Path(path)
    name = format or detect_format(path)
    return lookup(FORMATS, name, "format").load(path)
