"""The published layout of an XLand file and the metadata check every open runs (`scan_layout`: nothing
decompressed; a pass is remembered per file, see `file_facts`)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import h5py
import h5py.h5o  # a submodule h5py's __init__ does not import
import numpy as np

from offbench.data.store import hdf5_node
from offbench.data.xland.codec import VIEW
from offbench.data.xland.file_facts import LAYOUT_CHECKED, recall, remember
from offbench.errors import OffbenchError

ATTRS = ("env-id", "benchmark-id", "ruleset-id")
# name -> (dtype, shape after (H, T))
LAYOUT: dict[str, tuple[np.dtype, tuple[int, ...]]] = {
    "states": (np.dtype(np.uint8), VIEW),
    "actions": (np.dtype(np.uint8), ()),
    "rewards": (np.dtype(np.float16), ()),
    "dones": (np.dtype(np.bool_), ()),
    "expert_actions": (np.dtype(np.uint8), ()),
}
MAX_DEFLATE_RATIO = 1032  # deflate never stores more than 1,032 bytes of data in one byte (zlib's limit)
ENV_ID = re.compile(r"XLand-MiniGrid-R\d+-\d+x\d+")


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


@dataclass(frozen=True)
class Problem:
    where: str
    what: str


@dataclass
class Layout:
    """What `scan_layout` found: the shape every task group shares, chunk shape and compression per dataset
    (None: contiguous / uncompressed), and every group's attributes in group order (None: not read)."""

    tasks: int
    histories: int
    steps: int
    chunks: dict[str, tuple[int, ...] | None]
    compression: dict[str, str | None]
    attrs: list[dict[str, Any]] | None


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
    shape = _group0_shape(f, names)
    if isinstance(shape, Problem):
        return Layout(0, 0, 0, {}, {}, []), [shape]
    histories, steps = shape
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
        attrs.append(_group_attrs(group, where, found))
        for name, (dtype, item) in LAYOUT.items():
            ds = _child(group, name)
            if not isinstance(ds, h5py.h5d.DatasetID):
                found.append(Problem(where, f"missing dataset '{name}'"))
                continue
            checked = _scan_dataset(ds, f"{where}/{name}", name, dtype, item, (histories, steps), task == 0, chunks, compression)
            if isinstance(checked, Problem):
                found.append(checked)
            else:
                needed_bytes += checked
    size = path.stat().st_size
    if needed_bytes > size:
        found.append(
            Problem(
                "datasets",
                f"declare {len(names):,} tasks x {histories:,} histories x {steps:,} steps, at least "
                f"{needed_bytes:,.0f} bytes even at deflate's best ratio; the file has {size:,} (a declared shape, not data)",
            )
        )
    return Layout(len(names), histories, steps, chunks, compression, attrs), found


def _group0_shape(f: h5py.File, names: list[str]) -> tuple[int, int] | Problem:
    """(histories, steps) of group 0's rewards, which every dataset must share; or why there is none to scan."""
    expected = {str(i) for i in range(len(names))}
    if "0" not in names:
        return Problem("group 0", "missing (an XLand file has one group per task, '0'..'N-1')")
    if set(names) != expected:
        odd = sorted(set(names) - expected)[:3]
        return Problem("task groups", f"must be named 0..{len(names) - 1}; found {', '.join(odd)}")
    reference = _child(f.id, "0/rewards")
    if not isinstance(reference, h5py.h5d.DatasetID):
        return Problem("group 0", "missing dataset 'rewards'")
    if reference.rank != 2 or 0 in reference.shape:
        what = (
            "no histories"
            if reference.rank and reference.shape[0] == 0
            else "no steps"
            if reference.rank == 2
            else f"{reference.rank} dimensions"
        )
        return Problem("group 0/rewards", f"shape {reference.shape}: {what} (expected (histories, steps), both > 0)")
    histories, steps = (int(n) for n in reference.shape)
    return histories, steps


def _group_attrs(group: h5py.h5g.GroupID, where: str, found: list[Problem]) -> dict[str, Any]:
    """A task group's attributes that could be read; each missing, unreadable or ill-typed one is added to `found`."""
    values = {}
    for key in ATTRS:
        if not h5py.h5a.exists(group, key.encode()):
            found.append(Problem(where, f"missing attribute '{key}'"))
            continue
        try:
            values[key] = plain_attr(h5py.AttributeManager(h5py.Group(group))[key])
        except (OSError, TypeError, ValueError, UnicodeDecodeError) as exc:
            found.append(Problem(where, f"attribute {key} is unreadable ({exc})"))
            continue
        problem = _attr_problem(key, values[key])
        if problem:
            found.append(Problem(where, problem))
    return values


def _scan_dataset(
    ds: h5py.h5d.DatasetID,
    here: str,
    name: str,
    dtype: np.dtype,
    item: tuple[int, ...],
    shape: tuple[int, int],
    first: bool,
    chunks: dict[str, tuple[int, ...] | None],
    compression: dict[str, str | None],
) -> Problem | float:
    """One task's dataset `name`: its first problem, or the fewest bytes the file needs to hold it. Group 0's
    (`first`) sets the chunks and compression every other group's must match."""
    if ds.dtype != dtype:
        return Problem(here, f"dtype {ds.dtype}, expected {dtype}")
    if ds.shape != (*shape, *item):
        return Problem(here, f"shape {ds.shape}, expected {(*shape, *item)}")
    plist = ds.get_create_plist()
    chunk = tuple(plist.get_chunk()) if plist.get_layout() == h5py.h5d.CHUNKED else None
    filters = {plist.get_filter(i)[0] for i in range(plist.get_nfilters())}
    if first:
        chunks[name] = chunk
        compression[name] = "gzip" if h5py.h5z.FILTER_DEFLATE in filters else "lzf" if 32000 in filters else "other" if filters else None
    elif chunk != chunks.get(name, chunk):
        return Problem(here, f"chunks {chunk}, group 0 has {chunks[name]} (every group must be chunked alike)")
    if chunk is not None and chunk[2:] != item:
        return Problem(here, f"chunks {chunk} split the {item} items (a chunk must hold whole ones)")
    if chunk is not None:
        written = ds.get_chunk_info_by_coord((0,) * len(chunk)).byte_offset is not None
    else:
        written = plist.get_layout() == h5py.h5d.COMPACT or ds.get_offset() is not None
    if not written:
        return Problem(here, "never written (no data stored for it)")
    declared = shape[0] * shape[1] * int(np.prod(item, dtype=np.int64)) * dtype.itemsize
    if not filters - {h5py.h5z.FILTER_SHUFFLE, h5py.h5z.FILTER_FLETCHER32}:
        return float(declared)
    if not filters - {h5py.h5z.FILTER_DEFLATE, h5py.h5z.FILTER_SHUFFLE, h5py.h5z.FILTER_FLETCHER32}:
        return declared / MAX_DEFLATE_RATIO
    return 0.0


def group0_layout(f: h5py.File) -> Layout:
    """The shape of a file that passed `scan_layout` before, from group 0 alone (attributes left out)."""
    first = hdf5_node(f["0"], h5py.Group)
    rewards, states = (hdf5_node(first[name], h5py.Dataset) for name in ("rewards", "states"))
    histories, steps = (int(n) for n in rewards.shape)
    return Layout(len(f), histories, steps, {"states": states.chunks}, {"states": states.compression}, None)


def checked_layout(path: Path, remembered: bool = True) -> Layout:
    """The layout of the file at `path`, or a one-line error naming its first problem.
    With `remembered`, a file that passed before (same path, size and modification time) is read from group 0
    alone; a file that passes now is remembered."""
    known = remembered and recall(LAYOUT_CHECKED, path) == "ok"
    try:
        with h5py.File(path, "r") as f:
            if known:
                return group0_layout(f)
            layout, problems = scan_layout(path, f)
    except OSError as exc:
        raise OffbenchError(f"{path}: not a readable HDF5 file ({exc.__class__.__name__}: truncated or corrupt?)") from None
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise OffbenchError(f"{path}: {problems[0].where}: {problems[0].what}{more}")
    remember(LAYOUT_CHECKED, path, "ok")
    return layout


def plain_attr(value: Any) -> Any:
    """An attribute value as Python text or number (h5py hands over bytes and NumPy scalars)."""
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, np.generic):
        return value.item()
    return value
