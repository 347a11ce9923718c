"""`XLandHistories`, an XLand file opened in place (the dataset `offbench.load` returns for one), and its entry
in the format registry."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import gymnasium as gym
import h5py
import numpy as np

from offbench.data.store import dataset_id, dataset_repr, hdf5_node
from offbench.data.xland import file_facts
from offbench.data.xland.codec import NUM_ACTIONS, NUM_COLORS, NUM_TILES, VIEW, max_episode_steps
from offbench.data.xland.layout import ATTRS, LAYOUT, checked_layout, detect_xland, plain_attr
from offbench.data.xland.reader import DEFAULT_CACHE_MB, ChunkReader
from offbench.errors import OffbenchError
from offbench.utils import progress_bar

if TYPE_CHECKING:
    from offbench.data.spec import DatasetSpec


class XLandHistories:
    """An XLand-100B / Trivial-20B file, opened in place. Holds the shape; steps are read on demand.

    `len()` is the number of learning histories (tasks x histories per task): episodes are not counted, which
    would decompress every `dones` array."""

    read_in_place: ClassVar[bool] = True

    def __init__(self, path: str | Path, card: dict[str, Any] | None = None):
        self.path = Path(path)
        self.card = dict(card or {})
        layout = checked_layout(self.path)
        if layout.attrs is not None:  # read by the check: the cached property needs no second pass
            self.__dict__["task_attrs"] = layout.attrs
        self.num_tasks, self.histories, self.steps = layout.tasks, layout.histories, layout.steps
        self.chunk_steps = int((layout.chunks["states"] or (self.histories, self.steps))[1])
        self.compression = layout.compression["states"]

    @property
    def id(self) -> str | None:
        return dataset_id(self.card, self.path)

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
                out.append({key: plain_attr(attrs[key]) for key in ATTRS if key in attrs})
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
                rewards = np.asarray(hdf5_node(f[f"{task}/rewards"], h5py.Dataset)[:], np.float64)
                dones = np.asarray(hdf5_node(f[f"{task}/dones"], h5py.Dataset)[:])
                for history_rewards, history_dones in zip(rewards, dones):
                    ends = np.flatnonzero(history_dones)
                    totals = np.cumsum(history_rewards)[ends]
                    returns.append(np.diff(totals, prepend=0.0))
                    index.append(np.arange(len(ends)))
        return np.concatenate(index), np.concatenate(returns)

    def reader(self, cache_bytes: int = DEFAULT_CACHE_MB << 20) -> ChunkReader:
        return ChunkReader(self.path, cache_bytes)

    # -- checks
    def validate(self) -> None:
        """Every group against the published layout, afresh (metadata only: nothing decompressed; see `scan_layout`)."""
        checked_layout(self.path, remembered=False)

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
        from offbench.data.download import file_sha256

        return file_sha256(self.path)

    def content_sha256(self) -> str:
        """What a run records as its data's identity: the file's sha256 (the file is the data, never converted),
        remembered per file (`file_facts`: hashing 326 GB takes minutes). `verify` always hashes afresh."""
        digest = file_facts.recall(file_facts.SHA256, self.path)
        if digest is None:
            digest = self.file_sha256()
            file_facts.remember(file_facts.SHA256, self.path, digest)
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
            (
                "observation space",
                f"Box(0, (tile <= {NUM_TILES - 1}, colour <= {NUM_COLORS - 1}), {(*VIEW, 2)}, uint8), stored packed as tile * {NUM_COLORS} + colour",
            ),
            ("action space", str(self.action_space)),
            ("episodes", "not counted (whole learning histories; `dones` marks episode ends)"),
        ]

    def dataset_spec(self) -> DatasetSpec:
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
        raise OffbenchError("offbench does not write the XLand layout (it reads XLand-100B / Trivial-20B files in place)")
