"""Steps of an XLand file, read as whole HDF5 chunks (`read_direct_chunk` + zlib, no h5py selection machinery),
the decompressed ones kept in an LRU cache bounded in bytes and checked once each (`check_chunk`), so no sampler
hands over an action outside Discrete(6), a non-finite reward or a state that decodes to no tile."""

from __future__ import annotations

import os
import zlib
from collections import OrderedDict
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from offbench.data.store import hdf5_node
from offbench.data.xland.codec import NUM_ACTIONS, NUM_COLORS, NUM_TILES
from offbench.errors import OffbenchError

DEFAULT_CACHE_MB = 512


def check_chunk(path: Path, task: int, name: str, data: np.ndarray, offset: tuple[int, ...], shape: tuple[int, ...]) -> None:
    """A one-line error if a decompressed chunk holds what no sampler may hand over: a state that decodes to no
    tile, an action or expert action outside Discrete(6), a non-finite reward, a done that is not 0 or 1. Only
    the rows and steps inside the dataset are looked at (an edge chunk's padding is not data). ChunkReader runs it
    on every chunk it decompresses (a cache miss), never on a cached one."""
    valid = data[: shape[0] - offset[0], : shape[1] - offset[1]]
    if not valid.size:
        return
    if name in ("states", "actions", "expert_actions"):  # uint8: one max() says whether to look closer
        limit = NUM_TILES * NUM_COLORS if name == "states" else NUM_ACTIONS
        if valid.max() < limit:
            return
        bad = valid >= limit
        if name == "states":
            what = lambda v: f"state byte {int(v)} decodes to tile {int(v) // NUM_COLORS} (XLand-MiniGrid has {NUM_TILES} tiles)"  # noqa: E731
        else:
            what = lambda v: f"{name.replace('_', ' ')[:-1]} {int(v)} is outside Discrete({NUM_ACTIONS})"  # noqa: E731
    elif name == "rewards":  # float16: all exponent bits set is inf or NaN (cheaper than np.isfinite on halves)
        bad = (valid.view(np.uint16) & 0x7C00) == 0x7C00 if valid.dtype == np.float16 else ~np.isfinite(valid)
        what = lambda v: f"reward {float(v)} is not finite"  # noqa: E731
    elif name == "dones":
        if valid.dtype.itemsize == 1 and valid.view(np.uint8).max() <= 1:
            return
        bad = valid.view(np.uint8) > 1 if valid.dtype.itemsize == 1 else (valid != 0) & (valid != 1)
        what = lambda v: f"done byte {int(np.asarray(v).view(np.uint8))} is neither 0 nor 1"  # noqa: E731
    else:
        return
    if bad.any():
        where = tuple(int(i) for i in np.argwhere(bad)[0])
        raise OffbenchError(
            f"{path}: group {task}/{name}, history {offset[0] + where[0]}, step {offset[1] + where[1]:,}: {what(valid[where])}"
        )


class ChunkReader:
    """Whole decompressed HDF5 chunks of one file, LRU-cached, the file opened once per process.

    Picklable: the handle and the cache stay behind, so each process (DataLoader worker) opens its own.
    """

    def __init__(self, path: Path, cache_bytes: int = DEFAULT_CACHE_MB << 20):
        self.path = Path(path)
        self.cache_bytes = int(cache_bytes)
        self._reset()

    def _reset(self) -> None:
        self._file: h5py.File | None = None
        self._pid = -1
        self._datasets: dict[tuple[int, str], tuple[h5py.Dataset, tuple[int, ...], bool, np.dtype, int]] = {}
        self._cache: OrderedDict[tuple[int, str, int, int], np.ndarray] = OrderedDict()
        self._cached_bytes = 0
        self.hits = 0
        self.misses = 0

    def __getstate__(self) -> dict[str, Any]:
        return {"path": self.path, "cache_bytes": self.cache_bytes}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["path"], state["cache_bytes"])

    def file(self) -> h5py.File:
        if self._file is None or self._pid != os.getpid():  # first use, or a forked child: never reuse the parent's
            self._reset()
            try:
                self._file = h5py.File(self.path, "r")
            except OSError as exc:
                raise OffbenchError(f"{self.path}: not a readable HDF5 file ({exc})") from None
            self._pid = os.getpid()
        return self._file

    def close(self) -> None:
        if self._file is not None and self._pid == os.getpid():
            self._file.close()
        self._reset()

    def dataset(self, task: int, name: str) -> tuple[h5py.Dataset, tuple[int, ...], bool, np.dtype, int]:
        """The dataset, its chunk shape, whether its chunks can be inflated directly (gzip alone), dtype, chunk bytes."""
        key = (task, name)
        if self._pid != os.getpid():  # a forked child: drop the parent's handle, datasets and cache
            self.file()
        if key not in self._datasets:
            ds = hdf5_node(self.file()[f"{task}/{name}"], h5py.Dataset)
            plain_gzip = (
                ds.chunks is not None and ds.compression == "gzip" and not ds.shuffle and not ds.fletcher32 and ds.scaleoffset is None
            )
            chunks = ds.chunks or ds.shape
            self._datasets[key] = (ds, chunks, plain_gzip, ds.dtype, int(np.prod(chunks)) * ds.dtype.itemsize)
        return self._datasets[key]

    def chunk(self, task: int, name: str, history: int, index: int) -> np.ndarray:
        """Chunk `index` along the steps of (task, history) as (chunk steps, *item) (the edge chunk full size)."""
        ds, chunks, plain_gzip, dtype, size = self.dataset(task, name)
        row_block = history // chunks[0]
        key = (task, name, row_block, index)
        hit = self._cache.get(key)
        if hit is not None:
            self._cache.move_to_end(key)
            self.hits += 1
            return hit[history - row_block * chunks[0]]
        self.misses += 1
        offset = (row_block * chunks[0], index * chunks[1]) + (0,) * (len(chunks) - 2)
        data = None
        if plain_gzip:
            try:
                mask, raw = ds.id.read_direct_chunk(offset)  # then inflate into one buffer of the final size
                data = np.frombuffer(raw if mask & 1 else zlib.decompress(raw, bufsize=size), dtype=dtype).reshape(chunks)
            except (KeyError, OSError, RuntimeError, ValueError, zlib.error):
                data = None  # chunk never written or stored otherwise: let HDF5 read it (or say it was never written)
        if data is None:
            if ds.chunks is not None and ds.id.get_chunk_info_by_coord(offset).byte_offset is None:
                raise OffbenchError(
                    f"{self.path}: group {task}/{name}: the chunk of history {offset[0]} from step {offset[1]:,} was never "
                    "written (HDF5 would hand over zeros; the file is incomplete)"
                )
            stop = min(offset[1] + chunks[1], ds.shape[1])
            data = np.zeros(chunks, dtype)
            rows = min(chunks[0], ds.shape[0] - offset[0])
            data[:rows, : stop - offset[1]] = ds[offset[0] : offset[0] + rows, offset[1] : stop]
        check_chunk(self.path, task, name, data, offset, ds.shape)
        self._cache[key] = data
        self._cached_bytes += data.nbytes
        while self._cached_bytes > self.cache_bytes and len(self._cache) > 1:
            _, old = self._cache.popitem(last=False)
            self._cached_bytes -= old.nbytes
        return data[history - row_block * chunks[0]]

    def take(self, name: str, tasks: np.ndarray, histories: np.ndarray, steps: np.ndarray) -> np.ndarray:
        """out[b, k] = <task b>/<name>[history b, steps[b, k]]; each row of `steps` sorted ascending."""
        ds, chunks, *_ = self.dataset(int(tasks[0]), name)
        chunk_steps = chunks[1]
        out = np.empty(steps.shape + ds.shape[2:], ds.dtype)
        chunk_of = steps // chunk_steps
        for b in range(len(steps)):
            row_chunks = chunk_of[b]
            first, last = int(row_chunks[0]), int(row_chunks[-1])
            if first == last:  # the common case: one chunk holds the whole row
                out[b] = self.chunk(int(tasks[b]), name, int(histories[b]), first)[steps[b] - first * chunk_steps]
                continue
            bounds = np.searchsorted(row_chunks, np.arange(first, last + 2))
            for c, lo, hi in zip(range(first, last + 1), bounds[:-1], bounds[1:]):
                if hi > lo:
                    out[b, lo:hi] = self.chunk(int(tasks[b]), name, int(histories[b]), c)[steps[b, lo:hi] - c * chunk_steps]
        return out

    def windows(self, name: str, tasks: np.ndarray, histories: np.ndarray, first: np.ndarray, length: int) -> np.ndarray:
        """out[b] = <task b>/<name>[history b, first[b] : first[b] + length], copied slice by slice from chunks."""
        ds, chunks, *_ = self.dataset(int(tasks[0]), name)
        chunk_steps = chunks[1]
        out = np.empty((len(first), length) + ds.shape[2:], ds.dtype)
        for b in range(len(first)):
            task, history, start = int(tasks[b]), int(histories[b]), int(first[b])
            done = 0
            while done < length:
                index, within = divmod(start + done, chunk_steps)
                count = min(length - done, chunk_steps - within)
                out[b, done : done + count] = self.chunk(task, name, history, index)[within : within + count]
                done += count
        return out
