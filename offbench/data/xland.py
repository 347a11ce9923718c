"""XLand-100B and XLand-Trivial-20B (Nikulin et al. 2024), read in place: no conversion, lazy, chunk-aware.

The published layout, checked against dunnolab/xland-minigrid-datasets (README "What's inside";
collection/training/train.py, which writes one task's file; collection/combine.py, which merges them):

    /<k>                   one group per task, k = "0" .. "N-1" (consecutive after combine.py's filtering)
        attrs: env-id (e.g. "XLand-MiniGrid-R1-9x9"), benchmark-id ("trivial-1m" | "medium-1m"), ruleset-id
        states          uint8   (H, T, 5, 5)  agent's 5x5 view before the step, tile * NUM_COLORS + colour
        actions         uint8   (H, T)        0..5
        rewards         float16 (H, T)
        dones           bool    (H, T)        timestep.last() after the step (goal reached or time limit)
        expert_actions  uint8   (H, T)        the final policy's mode on states[t] (DPT labels)
    every dataset gzip level 6, chunks (1, 4096, ...) along the steps of one history

H = 32 histories per task; T = 60,928 (Trivial: 119 PPO updates x 512 steps) or 121,856 (100B: 476 x 256).
Histories are whole, unsplit PPO learning histories with auto-reset: states[t + 1] after a done is the next
episode's first observation (the terminal observation is not stored), and `dones` does not say whether
the goal or the time limit ended the episode. A window of steps may cross episode boundaries (that is
what Algorithm Distillation trains on).

Reading: an `XLandHistories` holds only the file's shape; steps come through `ChunkReader`, which reads
whole HDF5 chunks (`read_direct_chunk` + zlib, no h5py selection machinery), keeps the decompressed ones
in an LRU cache bounded in bytes, and opens the file once per process (a forked DataLoader worker or a
sampler unpickled in another process opens its own handle: HDF5 handles must not cross a fork).
Observations are decoded to (5, 5, 2) = (tile, colour), as `np.divmod(states, NUM_COLORS)` in the
authors' loaders.

Checks: opening a file runs `scan_layout` (metadata only; a pass is remembered per file path, size and
modification time); `ChunkReader` runs `check_chunk` on every chunk it decompresses, so no sampler hands over an
action outside Discrete(6), a non-finite reward or a state that decodes to no tile; `check_all_chunks` reads
every chunk (`verify` with full=True).
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import sys
import zlib
from collections import OrderedDict
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import gymnasium as gym
import h5py
import numpy as np
import torch

from offbench.data.samplers import _StoreSampler, register_store_sampler
from offbench.data.store import dataset_repr
from offbench.errors import OffbenchError

NUM_TILES = 13  # xminigrid.core.constants
NUM_COLORS = 12
NUM_ACTIONS = 6
VIEW = (5, 5)  # the agent's view in every XLand-MiniGrid environment the datasets use
ATTRS = ("env-id", "benchmark-id", "ruleset-id")
# name -> (dtype, shape after (H, T))
LAYOUT: dict[str, tuple[np.dtype, tuple[int, ...]]] = {
    "states": (np.dtype(np.uint8), VIEW),
    "actions": (np.dtype(np.uint8), ()),
    "rewards": (np.dtype(np.float16), ()),
    "dones": (np.dtype(np.bool_), ()),
    "expert_actions": (np.dtype(np.uint8), ()),
}
DEFAULT_CACHE_MB = 512


def decode_states(packed: np.ndarray) -> np.ndarray:
    """(..., 5, 5) packed bytes -> (..., 5, 5, 2) (tile, colour), the observation XLand-MiniGrid returns."""
    return np.stack(np.divmod(packed, NUM_COLORS), axis=-1)


def decode_states_as(packed: np.ndarray, dtype: str) -> np.ndarray:
    """`decode_states(packed).astype(dtype)` for float32 or uint8, without int64 temporaries (the fast path)."""
    tiles = packed // NUM_COLORS
    colours = packed - tiles * NUM_COLORS
    if dtype == "uint8":
        return np.stack([tiles, colours], axis=-1)
    out = np.empty(packed.shape + (2,), np.float32)
    out[..., 0], out[..., 1] = tiles, colours
    return out


def encode_states(observations: np.ndarray) -> np.ndarray:
    """Inverse of `decode_states` (the collection code's `compress_obs`)."""
    observations = np.asarray(observations)
    return (observations[..., 0] * NUM_COLORS + observations[..., 1]).astype(np.uint8)


def detect_xland(path: Path) -> bool:
    """True for an HDF5 file whose group "0" has the five datasets and the three attributes."""
    if not path.is_file() or not h5py.is_hdf5(path):
        return False
    try:
        with h5py.File(path, "r") as f:
            group = f.get("0")
            return isinstance(group, h5py.Group) and all(name in group for name in LAYOUT) and all(a in group.attrs for a in ATTRS)
    except OSError:
        return False


# ----------------------------------------------------------------------------------------- layout check

MAX_DEFLATE_RATIO = 1032  # deflate never stores more than 1,032 bytes of data in one byte (zlib's limit)
ENV_ID = re.compile(r"XLand-MiniGrid-R\d+-\d+x\d+")


@dataclass
class Layout:
    """What `scan_layout` found: the shape every task group shares, chunk shape and compression per dataset
    (None: contiguous / uncompressed), and every group's attributes in group order."""

    tasks: int
    histories: int
    steps: int
    chunks: dict[str, tuple[int, ...] | None]
    compression: dict[str, str | None]
    attrs: list[dict[str, Any]]


def _child(parent: Any, name: str) -> Any:
    """The object `name` under a low-level group id, or None (missing, dangling link)."""
    try:
        return h5py.h5o.open(parent, name.encode())
    except (KeyError, ValueError, RuntimeError):
        return None


def _attr_problem(key: str, value: Any) -> str | None:
    """Why an attribute value is not what the published files hold (env-id, benchmark-id: text; ruleset-id:
    an integer >= 0), or None."""
    if key == "ruleset-id":
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
            return f"attribute ruleset-id must be an integer, got {value!r:.60}"
        if value < 0:
            return f"attribute ruleset-id must be >= 0, got {value}"
        return None
    if not isinstance(value, str):
        return f"attribute {key} must be text, got {value!r:.60}"
    if key == "env-id" and not ENV_ID.fullmatch(value):
        return f"attribute env-id {value!r:.60} is not an XLand-MiniGrid id (XLand-MiniGrid-R<k>-<H>x<W>)"
    return None


def scan_layout(path: Path, f: h5py.File) -> tuple[Layout, list[Problem]]:
    """The metadata check every open runs (nothing decompressed): groups named 0..N-1, each with the three
    attributes of the right types and the five datasets of the published dtypes, all of group 0's shape
    (histories > 0, steps > 0), chunks that hold whole 5x5 views and are the same in every group, and data
    stored (no dataset never written; no more declared bytes than the file could hold, deflate's ratio at
    most). Low-level h5py calls: the high-level objects cost twice as much on a file of 28,876 groups."""
    names = list(f.keys())
    expected = {str(i) for i in range(len(names))}
    if "0" not in names:
        return Layout(0, 0, 0, {}, {}, []), [Problem("group 0", "missing (an XLand file has one group per task, '0'..'N-1')")]
    if set(names) != expected:
        odd = sorted(set(names) - expected)[:3]
        return Layout(0, 0, 0, {}, {}, []), [Problem("task groups", f"must be named 0..{len(names) - 1}; found {', '.join(odd)}")]
    reference = _child(f.id, "0/rewards")
    if not isinstance(reference, h5py.h5d.DatasetID):
        return Layout(0, 0, 0, {}, {}, []), [Problem("group 0", "missing dataset 'rewards'")]
    if reference.rank != 2 or 0 in reference.shape:
        what = "no histories" if reference.rank and reference.shape[0] == 0 else "no steps" if reference.rank == 2 else f"{reference.rank} dimensions"
        return Layout(0, 0, 0, {}, {}, []), [Problem("group 0/rewards", f"shape {reference.shape}: {what} (expected (histories, steps), both > 0)")]
    histories, steps = (int(n) for n in reference.shape)
    found: list[Problem] = []
    chunks: dict[str, tuple[int, ...] | None] = {}
    compression: dict[str, str | None] = {}
    attrs: list[dict[str, Any]] = []
    needed_bytes = 0.0  # the fewest bytes the file must have to hold what the datasets declare
    for task in range(len(names)):
        where = f"group {task}"
        group = _child(f.id, str(task))
        if not isinstance(group, h5py.h5g.GroupID):
            found.append(Problem(where, "is not a group"))
            attrs.append({})
            continue
        values = {}
        for key in ATTRS:
            if not h5py.h5a.exists(group, key.encode()):
                found.append(Problem(where, f"missing attribute '{key}'"))
                continue
            try:
                values[key] = _plain(h5py.AttributeManager(h5py.Group(group))[key])
            except (OSError, TypeError, ValueError, UnicodeDecodeError) as exc:
                found.append(Problem(where, f"attribute {key} is unreadable ({exc})"))
                continue
            problem = _attr_problem(key, values[key])
            if problem:
                found.append(Problem(where, problem))
        attrs.append(values)
        for name, (dtype, item) in LAYOUT.items():
            ds = _child(group, name)
            if not isinstance(ds, h5py.h5d.DatasetID):
                found.append(Problem(where, f"missing dataset '{name}'"))
                continue
            here = f"{where}/{name}"
            if ds.dtype != dtype:
                found.append(Problem(here, f"dtype {ds.dtype}, expected {dtype}"))
                continue
            if ds.shape != (histories, steps, *item):
                found.append(Problem(here, f"shape {ds.shape}, expected {(histories, steps, *item)}"))
                continue
            plist = ds.get_create_plist()
            chunked = plist.get_layout() == h5py.h5d.CHUNKED
            chunk = tuple(plist.get_chunk()) if chunked else None
            filters = {plist.get_filter(i)[0] for i in range(plist.get_nfilters())}
            if task == 0:
                chunks[name] = chunk
                compression[name] = "gzip" if h5py.h5z.FILTER_DEFLATE in filters else "lzf" if 32000 in filters else "other" if filters else None
            elif chunk != chunks.get(name, chunk):
                found.append(Problem(here, f"chunks {chunk}, group 0 has {chunks[name]} (every group must be chunked alike)"))
                continue
            if chunk is not None and chunk[2:] != item:
                found.append(Problem(here, f"chunks {chunk} split the {item} items (a chunk must hold whole ones)"))
                continue
            if chunk is not None:
                written = ds.get_chunk_info_by_coord((0,) * len(chunk)).byte_offset is not None
            else:
                written = plist.get_layout() == h5py.h5d.COMPACT or ds.get_offset() is not None
            if not written:
                found.append(Problem(here, "never written (no data stored for it)"))
                continue
            declared = histories * steps * int(np.prod(item, dtype=np.int64)) * dtype.itemsize
            if not filters - {h5py.h5z.FILTER_SHUFFLE, h5py.h5z.FILTER_FLETCHER32}:
                needed_bytes += declared
            elif not filters - {h5py.h5z.FILTER_DEFLATE, h5py.h5z.FILTER_SHUFFLE, h5py.h5z.FILTER_FLETCHER32}:
                needed_bytes += declared / MAX_DEFLATE_RATIO
    size = path.stat().st_size
    if needed_bytes > size:
        found.append(Problem(
            "datasets", f"declare {len(names):,} tasks x {histories:,} histories x {steps:,} steps, at least "
            f"{needed_bytes:,.0f} bytes even at deflate's best ratio; the file has {size:,} (a declared shape, not data)"))
    return Layout(len(names), histories, steps, chunks, compression, attrs), found


def group0_layout(f: h5py.File) -> Layout:
    """The shape of a file that passed `scan_layout` before, from group 0 alone (attributes left out)."""
    first = f["0"]
    histories, steps = (int(n) for n in first["rewards"].shape)
    return Layout(len(f), histories, steps, {"states": first["states"].chunks}, {"states": first["states"].compression}, [])


LAYOUT_CHECKS = "layout-checked.json"  # under $OFFBENCH_HOME/xland, as sha256.json


def _stat_key(path: Path) -> str:
    stat = path.stat()
    return f"{path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}"


def _remembered_layout(path: Path) -> bool | None:
    """True if this file (path, size, modification time: git's stat-cache rule) passed `scan_layout` before,
    else None. On XLand-100B's 28,876 groups the check reads some 150,000 HDF5 object headers (tens of
    seconds): it is paid once per file, and `verify` always runs it afresh."""
    import json

    from offbench.paths import offbench_home

    try:
        known = json.loads((offbench_home() / "xland" / LAYOUT_CHECKS).read_text())
        return True if isinstance(known, dict) and known.get(_stat_key(path)) == "ok" else None
    except (OSError, ValueError):
        return None


def _remember_layout(path: Path) -> None:
    import json

    from offbench.paths import offbench_home
    from offbench.utils import atomic_write_json

    cache = offbench_home() / "xland" / LAYOUT_CHECKS
    try:
        known = json.loads(cache.read_text())
    except (OSError, ValueError):
        known = {}
    key = _stat_key(path)
    same_file = key.rsplit("|", 2)[0] + "|"
    known = {k: v for k, v in known.items() if not k.startswith(same_file)} if isinstance(known, dict) else {}  # older versions of it
    try:
        atomic_write_json(cache, {**known, key: "ok"})
    except (OSError, OffbenchError):
        pass  # a read-only home only costs the check again next time


# ----------------------------------------------------------------------------------------- chunk reading


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
        raise OffbenchError(f"{path}: group {task}/{name}, history {offset[0] + where[0]}, step {offset[1] + where[1]:,}: {what(valid[where])}")


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
        self._datasets: dict[tuple[int, str], tuple[h5py.Dataset, bool]] = {}
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
            ds = self.file()[f"{task}/{name}"]
            plain_gzip = ds.chunks is not None and ds.compression == "gzip" and not ds.shuffle and not ds.fletcher32 and ds.scaleoffset is None
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
                raise OffbenchError(f"{self.path}: group {task}/{name}: the chunk of history {offset[0]} from step {offset[1]:,} was never "
                                    "written (HDF5 would hand over zeros; the file is incomplete)")
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


# ----------------------------------------------------------------------------------------- the dataset


@dataclass(frozen=True)
class Problem:
    where: str
    what: str


class XLandHistories:
    """An XLand-100B / Trivial-20B file, opened in place. Holds the shape; steps are read on demand.

    `len()` is the number of learning histories (tasks x histories per task): episodes are not counted, which
    would decompress every `dones` array."""

    read_in_place = True

    def __init__(self, path: str | Path, card: dict[str, Any] | None = None):
        self.path = Path(path)
        self.card = dict(card or {})
        checked = _remembered_layout(self.path)
        try:
            with h5py.File(self.path, "r") as f:
                if checked is None:
                    layout, problems = scan_layout(self.path, f)
                else:  # this very file (path, size, mtime) passed before: group 0 gives the shape
                    layout, problems = group0_layout(f), []
        except OSError as exc:
            raise OffbenchError(f"{self.path}: not a readable HDF5 file ({exc.__class__.__name__}: truncated or corrupt?)") from None
        if problems:
            more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
            raise OffbenchError(f"{self.path}: {problems[0].where}: {problems[0].what}{more}")
        if checked is None:
            _remember_layout(self.path)
            self.__dict__["task_attrs"] = layout.attrs  # read by the check: the cached property needs no second pass
        self.num_tasks, self.histories, self.steps = layout.tasks, layout.histories, layout.steps
        self.chunk_steps = int((layout.chunks["states"] or (self.histories, self.steps))[1])
        self.compression = layout.compression["states"]

    # -- sizes (cheap: from the shapes)
    @property
    def num_histories(self) -> int:
        return self.num_tasks * self.histories

    def __len__(self) -> int:
        return self.num_histories

    def __repr__(self) -> str:
        return dataset_repr(self, tasks=self.num_tasks, histories=self.num_histories, transitions=self.num_transitions)

    @property
    def num_transitions(self) -> int:
        return self.num_tasks * self.histories * self.steps

    @property
    def observation_space(self) -> gym.Space:
        high = np.broadcast_to(np.array([NUM_TILES - 1, NUM_COLORS - 1], np.uint8), (*VIEW, 2)).copy()
        return gym.spaces.Box(low=0, high=high, shape=(*VIEW, 2), dtype=np.uint8)

    @property
    def action_space(self) -> gym.Space:
        return gym.spaces.Discrete(NUM_ACTIONS)

    @cached_property
    def task_attrs(self) -> list[dict[str, Any]]:
        """(env-id, benchmark-id, ruleset-id) of every task group, in group order."""
        out = []
        with h5py.File(self.path, "r") as f:
            for task in range(self.num_tasks):
                attrs = f[str(task)].attrs
                out.append({key: _plain(attrs[key]) for key in ATTRS if key in attrs})
        return out

    @cached_property
    def ruleset_ids(self) -> np.ndarray:
        return np.array([attrs["ruleset-id"] for attrs in self.task_attrs], dtype=np.int64)

    def history_episode_returns(self, tasks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(episode index within its history, return) of every finished episode of every history of `tasks`.
        An episode ends at a done; the steps after a history's last done are an unfinished episode, left out."""
        index, returns = [], []
        with h5py.File(self.path, "r") as f:
            for task in np.asarray(tasks):
                rewards, dones = f[f"{task}/rewards"][:].astype(np.float64), f[f"{task}/dones"][:]
                for history_rewards, history_dones in zip(rewards, dones):
                    ends = np.flatnonzero(history_dones)
                    totals = np.cumsum(history_rewards)[ends]
                    returns.append(np.diff(totals, prepend=0.0))
                    index.append(np.arange(len(ends)))
        return np.concatenate(index), np.concatenate(returns)

    def reader(self, cache_bytes: int = DEFAULT_CACHE_MB << 20) -> ChunkReader:
        return ChunkReader(self.path, cache_bytes)

    # -- checks
    def problems(self) -> list[Problem]:
        """Every departure from the published layout, group by group (metadata only: nothing decompressed;
        the check every open runs, see `scan_layout`)."""
        try:
            with h5py.File(self.path, "r") as f:
                return scan_layout(self.path, f)[1]
        except OSError as exc:
            raise OffbenchError(f"{self.path}: not a readable HDF5 file ({exc.__class__.__name__}: truncated or corrupt?)") from None

    def validate(self) -> None:
        problems = self.problems()
        if problems:
            more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
            raise OffbenchError(f"{self.path}: {problems[0].where}: {problems[0].what}{more}")

    def check_content(self, tasks: int = 8, seed: int = 0) -> None:
        """Decode a few histories' first and last chunks of every dataset (a sampled content check: the chunk
        reader checks what it decompresses, `check_chunk`)."""
        rng = np.random.default_rng(seed)
        reader = self.reader(cache_bytes=64 << 20)
        picks = rng.choice(self.num_tasks, size=min(tasks, self.num_tasks), replace=False)
        try:
            for task in picks:
                history = int(rng.integers(self.histories))
                for name in LAYOUT:
                    chunk_steps = int(reader.dataset(int(task), name)[1][1])
                    for index in sorted({0, (self.steps - 1) // chunk_steps}):
                        reader.chunk(int(task), name, history, index)
        finally:
            reader.close()

    def check_all_chunks(self, progress: bool = False) -> int:
        """Decompress and check every chunk of every dataset (`verify --full`: reads the whole file, about as
        long as one epoch over it); returns the number of chunks read."""
        from offbench.utils import progress_bar

        reader = self.reader(cache_bytes=1)  # nothing kept: each chunk is read once
        count = 0
        try:
            with progress_bar(not progress, f"checking {self.path.name}", self.num_tasks, unit="tasks") as advance:
                for task in range(self.num_tasks):
                    for name in LAYOUT:
                        _, chunks, *_ = reader.dataset(task, name)
                        for history in range(0, self.histories, chunks[0]):
                            for index in range(-(-self.steps // chunks[1])):
                                reader.chunk(task, name, history, index)
                                count += 1
                    advance(1)
        finally:
            reader.close()
        return count

    def file_sha256(self) -> str:
        digest = hashlib.sha256()
        with open(self.path, "rb") as handle:
            while block := handle.read(1 << 22):
                digest.update(block)
        return digest.hexdigest()

    def content_sha256(self) -> str:
        """What a run records as its data's identity: the file's sha256 (the file is the data, never converted).
        Hashing 326 GB takes minutes, so the digest is remembered in $OFFBENCH_HOME/xland/sha256.json under the
        file's path, size and modification time (git's stat-cache rule): a changed file is hashed again.
        `verify` always hashes afresh."""
        import json

        from offbench.paths import offbench_home
        from offbench.utils import atomic_write_json

        stat = self.path.stat()
        key = f"{self.path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}"
        cache = offbench_home() / "xland" / "sha256.json"
        try:
            known = json.loads(cache.read_text())
        except (OSError, ValueError):
            known = {}
        if not isinstance(known, dict):
            known = {}
        if isinstance(known.get(key), str):
            return known[key]
        digest = self.file_sha256()
        try:
            atomic_write_json(cache, {**known, key: digest})
        except (OSError, OffbenchError):
            pass  # a read-only home only costs hashing again next time
        return digest

    def verify(self, expected_sha256: str | None, source: str, full: bool = False) -> str:
        """`offbench verify`: the layout of every group, a sampled content check (`full`: every chunk), and the
        file's sha256 against `expected_sha256` (the card's, or the one recorded at the first download: `source` says)."""
        self.validate()
        if full:
            chunks = self.check_all_chunks(progress=True)
        else:
            self.check_content()
        digest = self.file_sha256()
        if expected_sha256 is not None and digest != expected_sha256:
            raise OffbenchError(f"{self.path}: sha256 {digest[:16]}... differs from {expected_sha256[:16]}... {source}")
        checked = f"matches {source}" if expected_sha256 else "nothing recorded to compare with"
        content = f"all {chunks:,} chunks decoded and checked" if full else "sampled chunks decoded"
        return (
            f"ok: {self.path} (xland, {self.num_tasks:,} tasks, {self.num_transitions:,} transitions, "
            f"layout of every group checked, {content}, sha256 {digest}: {checked})"
        )

    def summary_rows(self) -> list[tuple[str, str]]:
        """What `offbench info` shows (cheap: shapes and attributes, nothing decompressed)."""
        attrs = self.task_attrs
        envs = sorted({str(a.get("env-id")) for a in attrs})
        benchmarks = sorted({str(a.get("benchmark-id")) for a in attrs})
        rulesets = self.ruleset_ids
        return [
            ("file", f"{self.path} ({self.path.stat().st_size:,} bytes, read in place)"),
            ("tasks", f"{self.num_tasks:,} (rulesets {rulesets.min()}..{rulesets.max()}, {len(np.unique(rulesets)):,} distinct)"),
            ("histories", f"{self.histories} per task, {self.steps:,} steps each ({self.num_histories:,} in all)"),
            ("transitions", f"{self.num_transitions:,}"),
            ("environment", ", ".join(envs)),
            ("benchmark", ", ".join(benchmarks)),
            ("chunks", f"{self.chunk_steps:,} steps, {self.compression or 'uncompressed'}"),
            ("observation space", f"Box(0, (tile <= {NUM_TILES - 1}, colour <= {NUM_COLORS - 1}), {(*VIEW, 2)}, uint8), stored packed as tile * {NUM_COLORS} + colour"),
            ("action space", str(self.action_space)),
            ("episodes", "not counted (whole learning histories; `dones` marks episode ends)"),
        ]

    def dataset_spec(self):
        """What a baseline builds its networks from (no pass over the data: episode length is the env's limit)."""
        from offbench.data.spec import DatasetSpec

        return DatasetSpec(
            observation_space=self.observation_space,
            action_space=self.action_space,
            observation_shape=(*VIEW, 2),
            action_dim=NUM_ACTIONS,
            discrete=True,
            max_episode_length=max_episode_steps(str(self.task_attrs[0].get("env-id", ""))),
            num_tasks=self.num_tasks,
        )


def max_episode_steps(env_id: str) -> int:
    """XLand-MiniGrid's default time limit, 3 * height * width (`EnvParams.max_steps` unset)."""
    try:
        height, width = (int(n) for n in env_id.rsplit("-", 1)[1].split("x"))
    except (IndexError, ValueError):
        raise OffbenchError(f"'{env_id}' is not an XLand-MiniGrid id of the form XLand-MiniGrid-R<k>-<H>x<W>") from None
    return 3 * height * width


def _plain(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, np.generic):
        return value.item()
    return value


def export_xland(store: Any, out: Path) -> Path:
    raise OffbenchError("offbench does not write the XLand layout (it reads XLand-100B / Trivial-20B files in place)")


@dataclass(frozen=True)
class XLandFormat:
    """The format registry entry: detected by content, loaded lazily, never converted on download."""

    name: str = "xland"
    read_in_place: bool = True
    writes: bool = False

    def detect(self, path: Path) -> bool:
        return detect_xland(Path(path))

    def load(self, path: Path) -> XLandHistories:
        return XLandHistories(Path(path))

    def export(self, store: Any, out: Path) -> Path:
        return export_xland(store, out)


# ----------------------------------------------------------------------------------------- samplers


class _XLandSampler(_StoreSampler):
    """The chunk reader and observation decoding shared by the XLand samplers (same keys as the native ones).

    Resume (`state_dict`) and tensor conversion come from the native samplers' base; its constructor,
    which takes the store's arrays, is replaced: nothing of an XLand file is read up front.

    Observations are float32 (the batch contract of every sampler) unless `observation_dtype="uint8"`, which
    gives the (tile, colour) codes as bytes, a quarter of the memory, for models that embed them (the XLand
    AD and DPT baselines do)."""

    kind: str

    def __init__(
        self, store: XLandHistories, batch_size: int, seed: int, device: str | torch.device,
        cache_mb: int, observation_dtype: str,
    ):  # the base constructor is not called (see the class docstring)
        if observation_dtype not in ("float32", "uint8"):
            raise OffbenchError(f"observation_dtype must be 'float32' or 'uint8', got '{observation_dtype}'")
        self.observation_dtype = observation_dtype
        if int(batch_size) < 1:
            raise OffbenchError(f"batch_size must be at least 1, got {batch_size}")
        if int(cache_mb) < 1:
            raise OffbenchError(f"cache_mb must be at least 1, got {cache_mb}")
        self.store = store
        self.batch_size = int(batch_size)
        self.device = torch.device(device)
        self.rng = np.random.default_rng(seed)
        self.where = f"{store.path}: "
        self.reader = store.reader(int(cache_mb) << 20)

    def observations(self, tasks: np.ndarray, histories: np.ndarray, steps: np.ndarray) -> torch.Tensor:
        return self.observation_tensor(self.reader.take("states", tasks, histories, steps))

    def observation_tensor(self, packed: np.ndarray) -> torch.Tensor:
        """(..., 5, 5) packed bytes -> (..., 5, 5, 2) (tile, colour) tensor of `observation_dtype`."""
        return self.tensor(decode_states_as(packed, self.observation_dtype))


@register_store_sampler("ad_windows", XLandHistories)
class XLandADWindowSampler(_XLandSampler):
    """T consecutive steps of one learning history (crossing episode boundaries), from an XLand file.

    Uniform over every full window of every (task, history), as the native `ad_windows`; the authors' AD
    loader instead cuts windows on a fixed grid (start 1 + k * T / 2). `task_ids` is the task group.
    A window of the published 4,096 steps touches at most two chunks per dataset.
    """

    kind = "ad_windows"

    def __init__(
        self,
        store: XLandHistories,
        batch_size: int,
        seed: int,
        device: str | torch.device = "cpu",
        *,
        window_length: int,
        cache_mb: int = DEFAULT_CACHE_MB,
        observation_dtype: str = "float32",
    ):
        super().__init__(store, batch_size, seed, device, cache_mb, observation_dtype)
        if not 1 <= int(window_length) <= store.steps:
            raise OffbenchError(f"{store.path}: window_length must be between 1 and the history length {store.steps}, got {window_length}")
        self.window_length = int(window_length)

    def sample(self) -> dict[str, torch.Tensor]:
        per_history = self.store.steps - self.window_length + 1
        draw = np.sort(self.rng.integers(0, self.store.num_histories * per_history, self.batch_size))
        history_index, first = np.divmod(draw, per_history)
        tasks, histories = np.divmod(history_index, self.store.histories)
        read = functools.partial(self.reader.windows, tasks=tasks, histories=histories, first=first, length=self.window_length)
        batch = {
            "observations": self.observation_tensor(read("states")),
            "actions": self.tensor(read("actions"), np.int64),
            "rewards": self.tensor(read("rewards"), np.float32),
        }
        batch["task_ids"] = self.tensor(tasks, np.int64)
        return batch


@register_store_sampler("dpt", XLandHistories)
class XLandDPTSampler(_XLandSampler):
    """(query state, in-context transitions, expert action) triples for DPT, from an XLand file.

    The label is `expert_actions[query]` (the final PPO policy's mode, relabelled by the authors). The
    context is C transitions of one history with s' = states[t + 1] of the same history (so t < T - 1;
    after a done that is the next episode's first observation: XLand does not store terminal ones).
    `context="window"`: C consecutive steps; `"random"`: C steps uniform with replacement, in time order.
    `group_by="task_id"` (default, as the authors' DPT loader): the query comes from an independently
    drawn history of the same task; `"history_id"`: from the context's own history.
    `label` is "optimal" only: the posterior label needs tabular tasks whose dynamics the card describes.
    """

    kind = "dpt"

    def __init__(
        self,
        store: XLandHistories,
        batch_size: int,
        seed: int,
        device: str | torch.device = "cpu",
        *,
        context_size: int,
        context: str = "window",
        group_by: str | None = None,
        label: str = "optimal",
        cache_mb: int = DEFAULT_CACHE_MB,
        observation_dtype: str = "float32",
    ):
        super().__init__(store, batch_size, seed, device, cache_mb, observation_dtype)
        if label != "optimal":
            raise OffbenchError(f"{store.path}: an XLand file has only the expert's labels (label = \"optimal\"), got '{label}'; the posterior label needs a tabular roll-in card")
        if context not in ("window", "random"):
            raise OffbenchError(f"context must be 'window' or 'random', got '{context}'")
        group_by = group_by or "task_id"
        if group_by not in ("task_id", "history_id"):
            raise OffbenchError(f"group_by must be 'task_id' or 'history_id' for an XLand file, got '{group_by}'")
        if not 1 <= int(context_size) <= store.steps - 1:
            raise OffbenchError(f"{store.path}: context_size must be between 1 and {store.steps - 1} (steps with a next state), got {context_size}")
        self.context_size, self.context, self.group_by = int(context_size), context, group_by

    def sample(self) -> dict[str, torch.Tensor]:
        b, c, steps = self.batch_size, self.context_size, self.store.steps
        tasks = self.rng.integers(0, self.store.num_tasks, b)
        histories = self.rng.integers(0, self.store.histories, b)
        query_histories = self.rng.integers(0, self.store.histories, b) if self.group_by == "task_id" else histories
        query = self.rng.integers(0, steps, b)[:, None]
        if self.context == "window":  # C consecutive steps; one read of C + 1 states gives s and s'
            first = self.rng.integers(0, steps - c, b)  # the last context step is at most T - 2
            read = functools.partial(self.reader.windows, tasks=tasks, histories=histories, first=first)
            states, actions, rewards = read("states", length=c + 1), read("actions", length=c), read("rewards", length=c)
            context_states, next_states = states[:, :-1], states[:, 1:]
        else:
            context = np.sort(self.rng.integers(0, steps - 1, (b, c)), axis=1)
            read = functools.partial(self.reader.take, tasks=tasks, histories=histories)
            context_states, next_states = read("states", steps=context), read("states", steps=context + 1)
            actions, rewards = read("actions", steps=context), read("rewards", steps=context)
        batch = {
            "query_observations": self.observations(tasks, query_histories, query)[:, 0],
            "context_observations": self.observation_tensor(context_states),
            "context_actions": self.tensor(actions, np.int64),
            "context_rewards": self.tensor(rewards, np.float32),
            "context_next_observations": self.observation_tensor(next_states),
            "optimal_actions": self.tensor(self.reader.take("expert_actions", tasks, query_histories, query)[:, 0], np.int64),
            "task_ids": self.tensor(tasks, np.int64),
        }
        return batch


def write_xland_file(
    path: str | Path,
    tasks: int,
    histories: int,
    steps: int,
    seed: int = 0,
    env_id: str = "XLand-MiniGrid-R1-9x9",
    benchmark_id: str = "trivial-1m",
    chunk_steps: int = 4096,
    palette: int | None = 64,
) -> Path:
    """Write a synthetic file in the published layout (combine.py's create_dataset arguments: gzip 6,
    chunks (1, chunk_steps, ...)), for tests and benchmarks. With a `palette`, views come from that many
    per task and repeat in runs, and episodes end every `max_episode_steps(env_id)` steps or earlier, so
    the bytes compress roughly like real histories; `palette=None` draws every view afresh."""
    from offbench.utils import atomic_path

    rng = np.random.default_rng(seed)
    limit = max_episode_steps(env_id)
    with atomic_path(Path(path)) as tmp, h5py.File(tmp, "w") as f:
        for task in range(tasks):
            if palette is None:
                states = rng.integers(0, NUM_TILES * NUM_COLORS, (histories, steps, *VIEW), dtype=np.uint8)
            else:
                views = rng.integers(0, NUM_TILES * NUM_COLORS, (palette, *VIEW), dtype=np.uint8)
                keep = rng.random((histories, steps)) < 0.7  # the view often stays the same for a step
                states = views[np.cumsum(np.where(keep, 0, rng.integers(1, palette, (histories, steps))), axis=1) % palette]
            dones = np.zeros((histories, steps), bool)
            for h in range(histories):
                ends = np.cumsum(rng.integers(limit // 4, limit + 1, steps // (limit // 4) + 1)) - 1
                dones[h, ends[ends < steps]] = True
            rewards = np.where(dones & (rng.random((histories, steps)) < 0.5), rng.uniform(0.1, 1.0, (histories, steps)), 0.0)
            data = {
                "states": states,
                "actions": rng.integers(0, NUM_ACTIONS, (histories, steps), dtype=np.uint8),
                "rewards": rewards.astype(np.float16),
                "dones": dones,
                "expert_actions": rng.integers(0, NUM_ACTIONS, (histories, steps), dtype=np.uint8),
            }
            group = f.create_group(str(task))
            group.attrs["env-id"] = env_id
            group.attrs["benchmark-id"] = benchmark_id
            group.attrs["ruleset-id"] = np.int64(task)
            for name, array in data.items():
                group.create_dataset(name, data=array, compression="gzip", compression_opts=6, chunks=(1, chunk_steps, *array.shape[2:]))
    return Path(path)
