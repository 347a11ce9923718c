"""The native on-disk format: one columnar HDF5 file per dataset.

Layout of a file (all arrays contiguous, uncompressed by default so they open memory-mapped):

    /observations         (N, *obs_shape)   observation *before* each step
    /actions              (N, *act_shape)
    /rewards              (N,) float32
    /terminations         (N,) bool         the MDP ended (no bootstrapping past this step)
    /truncations          (N,) bool         the episode was cut (time limit); the MDP did not end
    /episode_starts       (E + 1,) int64    episode e is rows [starts[e], starts[e + 1]); starts[E] == N
    /final_observations   (E, *obs_shape)   observation after the last step of each episode
    /columns/<name>       (N, ...)          optional per-step columns: task_id, history_id,
                                            episode_in_history, optimal_action, infos/<key>, ...
    /episode_columns/<name> (E, ...)        optional per-episode values: seed, reset_infos/<key>, ...
    attrs: format="offbench", format_version, card (JSON), observation_space / action_space (JSON),
           content_sha256

Episodes are stored in order, so the episodes of one learning history are contiguous and a sampler
can cut windows that cross episode boundaries. The next observation of step t is observations[t + 1]
inside an episode and final_observations[e] at its last step: nothing is lost at episode ends.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import mmap
import operator
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeGuard, TypeVar, runtime_checkable

import gymnasium as gym
import h5py
import numpy as np

from offbench.data.spaces import space_from_json, space_to_json
from offbench.errors import OffbenchError
from offbench.utils import atomic_path, reserve_space

if TYPE_CHECKING:
    import pandas as pd

    from offbench.data.spec import DatasetSpec

FORMAT_NAME = "offbench"
FORMAT_VERSION = 1
CORE_ARRAYS = (
    "observations",
    "actions",
    "rewards",
    "terminations",
    "truncations",
    "episode_starts",
    "final_observations",
)


@runtime_checkable
class Store(Protocol):
    """What every caller may ask of a dataset offbench opens, whatever its format: an `EpisodeStore` (episodes as
    arrays) or a published file opened where it lies (`offbench.data.xland.XLandHistories`)."""

    read_in_place: ClassVar[bool]
    """True: the published file is the dataset, opened where it lies and too large to convert or to pass over
    whole, so callers describe, check, specify and plot it through its own methods (an `InPlaceStore`) instead of
    from episode arrays; the format it was loaded by says the same (`offbench.data.formats.Format.read_in_place`).
    False: an `EpisodeStore`. A loader returns one or the other: `isinstance(store, EpisodeStore)` tells them
    apart for a type checker too."""
    card: dict[str, Any]

    @property
    def path(self) -> Path | None:
        """The file the dataset was opened from (None: built in memory and not saved)."""

    @property
    def id(self) -> str | None:
        """The card's id, else the file's stem (as `offbench.data.resolve.open_dataset` names a path)."""

    @property
    def observation_space(self) -> gym.Space | None: ...

    @property
    def action_space(self) -> gym.Space | None: ...

    @property
    def num_transitions(self) -> int: ...

    def __len__(self) -> int:
        """The units the dataset is made of: episodes (learning histories for an XLand file)."""
        ...

    def validate(self) -> None:
        """Check the structure against the format (a one-line OffbenchError naming the file and the problem)."""

    def content_sha256(self) -> str:
        """The data's identity, what a run records and a replay compares."""
        ...


class InPlaceStore(Store, Protocol):
    """A published file opened where it lies (`read_in_place` True, e.g. `offbench.data.xland.XLandHistories`): what
    callers ask of it in place of the episode arrays an `EpisodeStore` has."""

    def summary_rows(self) -> list[tuple[str, str]]:
        """(name, value) rows `offbench info` shows, from shapes and attributes (nothing decompressed)."""
        ...

    def verify(self, expected_sha256: str | None, source: str, full: bool = False) -> str:
        """`offbench verify`: check the file against its layout and `expected_sha256` (named by `source`); the
        one-line report, or a one-line OffbenchError."""
        ...

    def dataset_spec(self) -> DatasetSpec:
        """What a baseline builds its networks from, without a pass over the data."""
        ...

    def history_episode_returns(self, tasks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(episode index within its history, return) of every finished episode of every history of `tasks`."""
        ...


def dataset_id(card: dict[str, Any] | None, path: Path | None) -> str | None:
    """`Store.id`: the card's id, else the file's stem."""
    return (card or {}).get("id") or (Path(path).stem if path else None)


@dataclass
class EpisodeStore:
    """A dataset of whole episodes held as contiguous arrays (in memory or memory-mapped).

    `len(store)` is the number of episodes; `store[i]` (negative i counts from the end) and `for episode in store`
    give one episode at a time (see `episode`); `to_pandas()` gives one row per transition.
    """

    observations: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    terminations: np.ndarray
    truncations: np.ndarray
    episode_starts: np.ndarray
    final_observations: np.ndarray
    columns: dict[str, np.ndarray] = field(default_factory=dict)
    episode_columns: dict[str, np.ndarray] = field(default_factory=dict)
    observation_space: gym.Space | None = None
    action_space: gym.Space | None = None
    card: dict[str, Any] = field(default_factory=dict)
    path: Path | None = None
    read_in_place: ClassVar[bool] = False

    def __post_init__(self) -> None:
        self.episode_starts = np.asarray(self.episode_starts, dtype=np.int64)
        self.validate()

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_episodes(cls, episodes: list[dict[str, np.ndarray]], **kwargs: Any) -> EpisodeStore:
        """Build from per-episode dicts with keys observations (T + 1 rows, final included), actions,
        rewards, terminations, truncations, and optional per-step columns (T rows)."""
        if not episodes:
            raise OffbenchError("cannot build a dataset from zero episodes")
        core = {"observations", "actions", "rewards", "terminations", "truncations"}
        lengths = np.array([len(ep["actions"]) for ep in episodes], dtype=np.int64)
        starts = np.concatenate([[0], np.cumsum(lengths)])
        extra_keys = sorted(set(episodes[0]) - core)
        return cls(
            observations=np.concatenate([np.asarray(ep["observations"])[:-1] for ep in episodes]),
            final_observations=np.stack([np.asarray(ep["observations"])[-1] for ep in episodes]),
            actions=np.concatenate([np.asarray(ep["actions"]) for ep in episodes]),
            rewards=np.concatenate([np.asarray(ep["rewards"], dtype=np.float32) for ep in episodes]),
            terminations=np.concatenate([np.asarray(ep["terminations"], dtype=bool) for ep in episodes]),
            truncations=np.concatenate([np.asarray(ep["truncations"], dtype=bool) for ep in episodes]),
            episode_starts=starts,
            columns={k: np.concatenate([np.asarray(ep[k]) for ep in episodes]) for k in extra_keys},
            **kwargs,
        )

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray], episode_lengths: np.ndarray, **kwargs: Any) -> EpisodeStore:
        """Build from flat arrays of concatenated episodes: the core ones by name (`final_observations` one
        row per episode, the others one row per step) and the episode lengths; every other entry becomes a
        per-step column."""
        steps = dict(arrays)
        core_names = [name for name in CORE_ARRAYS if name != "episode_starts"]
        missing = [name for name in core_names if name not in steps]
        if missing:
            raise OffbenchError(f"cannot build a dataset without {', '.join(missing)}")
        core = {name: steps.pop(name) for name in core_names}
        starts = np.concatenate([[0], np.cumsum(episode_lengths)])
        return cls(**core, episode_starts=starts, columns=steps, **kwargs)

    # ------------------------------------------------------------------ sizes and indices
    @property
    def id(self) -> str | None:
        return dataset_id(self.card, self.path)

    @property
    def num_transitions(self) -> int:
        return int(self.episode_starts[-1])

    @property
    def num_episodes(self) -> int:
        return len(self.episode_starts) - 1

    @cached_property
    def episode_lengths(self) -> np.ndarray:
        return np.diff(self.episode_starts)

    @cached_property
    def step_episode(self) -> np.ndarray:
        """Episode index of every step (N,)."""
        return np.repeat(np.arange(self.num_episodes, dtype=np.int64), self.episode_lengths)

    @cached_property
    def is_last_step(self) -> np.ndarray:
        """True at the last step of every episode (N,)."""
        last = np.zeros(self.num_transitions, dtype=bool)
        last[self.episode_starts[1:] - 1] = True
        return last

    def next_observations(self, index: np.ndarray | None = None) -> np.ndarray:
        """s' for the given step indices (all steps if None), using final_observations at episode ends."""
        index = np.arange(self.num_transitions) if index is None else np.asarray(index)
        last = self.is_last_step[index]
        inner = np.minimum(index + 1, self.num_transitions - 1)
        nxt = np.asarray(self.observations[inner])
        if last.any():
            nxt[last] = self.final_observations[self.step_episode[index[last]]]
        return nxt

    @property
    def nbytes(self) -> int:
        """Bytes of all arrays (about the size of an uncompressed native file)."""
        arrays = [getattr(self, name) for name in CORE_ARRAYS] + [*self.columns.values(), *self.episode_columns.values()]
        return sum(int(arr.nbytes) for arr in arrays)

    def observation_mean_std(self) -> tuple[np.ndarray, np.ndarray]:
        """Per-feature mean and std (float32, no epsilon) of the step observations, the statistics
        baselines normalise states with (CORL's `compute_mean_std`; each baseline adds its own epsilon).

        Two passes in float64 over ~32 MB blocks, so a memory-mapped dataset is never held whole and the
        variance does not suffer the cancellation of a one-pass sum of squares.
        """
        obs = np.asarray(self.observations)
        block = max(1, (32 << 20) // max(1, obs[:1].nbytes))
        total = np.zeros(obs.shape[1:], np.float64)
        for lo in range(0, len(obs), block):
            total += obs[lo : lo + block].sum(axis=0, dtype=np.float64)
        mean = total / len(obs)
        squares = np.zeros_like(mean)
        for lo in range(0, len(obs), block):
            squares += np.square(obs[lo : lo + block] - mean).sum(axis=0)
        return mean.astype(np.float32), np.sqrt(squares / len(obs)).astype(np.float32)

    def episode_returns(self) -> np.ndarray:
        return np.add.reduceat(np.asarray(self.rewards, dtype=np.float64), self.episode_starts[:-1])

    # ------------------------------------------------------------------ episodes one at a time
    def __len__(self) -> int:
        """The number of episodes (not of transitions: that is `num_transitions`)."""
        return self.num_episodes

    def episode(self, i: int) -> dict[str, np.ndarray]:
        """Episode `i` (negative: from the end) as a dict of arrays, for an episode of T steps:
        observations (T + 1, *obs_shape), the final observation included as the last row; actions (T, *act_shape);
        rewards (T,) float32; terminations, truncations (T,) bool; and every per-step column under its name
        (task_id, history_id, infos/<key>, ...: T rows each). Per-episode values stay in `episode_columns[name][i]`.
        The dict is what `from_episodes` takes, so `EpisodeStore.from_episodes(list(store))` rebuilds the arrays."""
        n = self.num_episodes
        position = operator.index(i)
        if position < 0:
            position += n
        if not 0 <= position < n:
            raise IndexError(f"episode {i} out of range (the dataset has {n} episodes: 0..{n - 1}, or -{n}..-1 from the end)")
        lo, hi = int(self.episode_starts[position]), int(self.episode_starts[position + 1])
        out = {
            "observations": np.concatenate([self.observations[lo:hi], self.final_observations[position : position + 1]]),
            "actions": np.asarray(self.actions[lo:hi]),
            "rewards": np.asarray(self.rewards[lo:hi]),
            "terminations": np.asarray(self.terminations[lo:hi]),
            "truncations": np.asarray(self.truncations[lo:hi]),
        }
        out.update({k: np.asarray(v[lo:hi]) for k, v in self.columns.items()})
        return out

    __getitem__ = episode

    def iter_episodes(self) -> Iterator[dict[str, np.ndarray]]:
        """Every episode in order, one at a time (as `episode(i)` gives it): a memory-mapped store reads only the
        episode being handed out, so this walks a dataset larger than memory."""
        for i in range(self.num_episodes):
            yield self.episode(i)

    __iter__ = iter_episodes

    def to_pandas(self, episodes: int | slice | Sequence[int] | None = None) -> pd.DataFrame:
        """One row per transition: `episode`, `step` (from 0 in each episode), the observation, the action,
        `reward`, `terminated`, `truncated`, then every per-step column under its name (task_id, history_id,
        infos/<key>, ...). An array with one value per step is one column (`observation`, `action`: discrete data);
        a vector is one column per dimension, flattened in C order (`observation_0`, `observation_1`, ...,
        `action_0`, ...). The next observation of a step is the next row of its episode, or
        `final_observations[episode]` after the episode's last step.

        The frame is built in memory (a memory-mapped dataset is read): `episodes` (an index, a slice such as
        slice(0, 100), or a list of indices) takes those episodes only."""
        import pandas as pd

        chosen = np.atleast_1d(np.arange(self.num_episodes)[slice(None) if episodes is None else episodes])
        lengths = self.episode_lengths[chosen]
        step = np.arange(int(lengths.sum())) - np.repeat(np.cumsum(lengths) - lengths, lengths)
        rows = np.repeat(self.episode_starts[chosen], lengths) + step
        frame: dict[str, np.ndarray] = {"episode": np.repeat(chosen, lengths), "step": step}
        frame.update(_one_column_per_dimension("observation", np.take(self.observations, rows, axis=0)))
        frame.update(_one_column_per_dimension("action", np.take(self.actions, rows, axis=0)))
        frame["reward"] = np.take(self.rewards, rows)
        frame["terminated"] = np.take(self.terminations, rows)
        frame["truncated"] = np.take(self.truncations, rows)
        for name, values in self.columns.items():
            frame.update(_one_column_per_dimension(name, np.take(values, rows, axis=0)))
        return pd.DataFrame(frame, copy=False)

    def __repr__(self) -> str:
        return dataset_repr(self, episodes=self.num_episodes, transitions=self.num_transitions)

    # ------------------------------------------------------------------ checks
    def validate(self) -> None:
        """Structure and values a baseline can train on (shapes, dtypes, finite numbers, actions inside a
        discrete space, episode bounds); raises OffbenchError naming the file (if any), the array and the
        first bad index. Run on every construction, so whatever loads has passed it."""
        where = f"{self.path}: " if self.path else ""
        self._check_kinds(where)
        n, starts = len(self.actions), self.episode_starts
        if starts.ndim != 1 or len(starts) < 2 or starts[0] != 0 or starts[-1] != n:
            raise OffbenchError(f"{where}episode_starts must run from 0 to the number of steps ({n})")
        if np.any(np.diff(starts) <= 0):
            raise OffbenchError(f"{where}episode_starts has an empty or negative-length episode")
        for name in ("observations", "rewards", "terminations", "truncations", *self.columns):
            arr = getattr(self, name) if name in CORE_ARRAYS else self.columns[name]
            if len(arr) != n:
                raise OffbenchError(f"{where}{name} has {len(arr)} rows, expected {n}")
        if len(self.final_observations) != self.num_episodes:
            raise OffbenchError(
                f"{where}final_observations has {len(self.final_observations)} rows, expected one per episode ({self.num_episodes})"
            )
        for name, arr in self.episode_columns.items():
            if len(arr) != self.num_episodes:
                raise OffbenchError(f"{where}episode column {name} has {len(arr)} rows, expected {self.num_episodes}")
        if self.final_observations.shape[1:] != self.observations.shape[1:]:
            raise OffbenchError(
                f"{where}final_observations rows have shape {self.final_observations.shape[1:]}, observations {self.observations.shape[1:]}"
            )
        ended = np.asarray(self.terminations) | np.asarray(self.truncations)
        if np.any(ended & ~self.is_last_step):
            step = int(np.flatnonzero(ended & ~self.is_last_step)[0])
            raise OffbenchError(f"{where}step {step} ends an episode but is not an episode's last step")
        self._check_values(where)

    def _check_kinds(self, where: str) -> None:
        """Dtypes and dimensions of the core arrays."""
        kinds = {
            "observations": "biuf",
            "final_observations": "biuf",
            "actions": "biuf",
            "rewards": "iuf",
            "terminations": "b",
            "truncations": "b",
        }
        for name, allowed in kinds.items():
            arr = getattr(self, name)
            if not hasattr(arr, "dtype") or arr.dtype.kind not in allowed or arr.ndim == 0:
                wanted = "booleans" if allowed == "b" else "numbers"
                raise OffbenchError(f"{where}{name} must be an array of {wanted}, got dtype {getattr(arr, 'dtype', type(arr).__name__)}")
        for name in ("rewards", "terminations", "truncations"):
            if getattr(self, name).ndim != 1:
                raise OffbenchError(f"{where}{name} must have one value per step, got shape {getattr(self, name).shape}")
        for name, space in (("observations", self.observation_space), ("actions", self.action_space)):
            if space is not None and space.shape is not None and getattr(self, name).shape[1:] != space.shape:
                raise OffbenchError(f"{where}{name} rows have shape {getattr(self, name).shape[1:]}, but the {name[:-1]} space is {space}")

    def _check_values(self, where: str) -> None:
        """Finite floats everywhere and actions inside a discrete action space, naming the first bad index."""
        for name in ("observations", "final_observations", "actions", "rewards"):
            arr = getattr(self, name)
            if arr.dtype.kind == "f":
                bad = _first_row(arr, lambda block: ~np.isfinite(block))
                if bad is not None:
                    raise OffbenchError(f"{where}{name}[{bad}] is not finite ({_show(arr[bad])})")
        space = self.action_space
        if isinstance(space, (gym.spaces.Discrete, gym.spaces.MultiDiscrete)):
            low, high = (space.start, space.start + space.n) if isinstance(space, gym.spaces.Discrete) else (0, space.nvec)
            bad = _first_row(self.actions, lambda block: (block != np.round(block)) | (block < low) | (block >= high))
            if bad is not None:
                raise OffbenchError(f"{where}actions[{bad}] = {_show(self.actions[bad])} is outside the action space {space}")
        bounds = _integer_bounds(self.observation_space)
        if bounds is not None:
            for name in ("observations", "final_observations"):
                arr = getattr(self, name)
                bad = _first_row(arr, _outside(arr.dtype, *bounds))
                if bad is not None:
                    raise OffbenchError(
                        f"{where}{name}[{bad}] = {_show(arr[bad])} is outside the observation space {_short_space(self.observation_space)}"
                    )
        self._check_labels(where)

    def _check_labels(self, where: str) -> None:
        """The id and label columns against what they index: `task_id` integers in [0, tasks) (tasks from the card,
        `task_count`; present on a multi-task card) and `optimal_action` inside a discrete action space (integers
        of its shape), finite in a continuous one."""
        card = self.card if isinstance(self.card, dict) else {}
        tasks, counted_by = task_count(card)
        task_ids = self.columns.get("task_id")
        if task_ids is None:
            if card.get("kind") == "multi-task":
                raise OffbenchError(f"{where}the card is multi-task but there is no column task_id (the task of every step)")
        else:
            if task_ids.dtype.kind not in "biu" or task_ids.ndim != 1:
                raise OffbenchError(
                    f"{where}columns/task_id must hold one integer per step, got dtype {task_ids.dtype}, shape {task_ids.shape}"
                )
            bad = _first_row(task_ids, _outside(task_ids.dtype, 0, np.iinfo(np.int64).max if tasks is None else tasks - 1))
            if bad is not None:
                known = (
                    "a task id is never negative" if tasks is None else f"the card's {counted_by} names {tasks} task(s): ids 0..{tasks - 1}"
                )
                raise OffbenchError(f"{where}columns/task_id[{bad}] = {task_ids[bad]} is out of range ({known})")
        labels, space = self.columns.get("optimal_action"), self.action_space
        if labels is None or space is None:
            return
        bounds = _integer_bounds(space)
        if bounds is None:  # a continuous space: labels are numbers, finite (their shape and range are the baseline's affair)
            if labels.dtype.kind not in "biuf":
                raise OffbenchError(f"{where}columns/optimal_action must hold numbers, got dtype {labels.dtype}")
            bad = _first_row(labels, (lambda block: ~np.isfinite(block)) if labels.dtype.kind == "f" else None)
            if bad is not None:
                raise OffbenchError(f"{where}columns/optimal_action[{bad}] = {_show(labels[bad])} is not finite")
            return
        if labels.shape[1:] != space.shape:
            raise OffbenchError(
                f"{where}columns/optimal_action rows have shape {labels.shape[1:]}, but the action space is {_short_space(space)}"
            )
        if labels.dtype.kind not in "biu":
            raise OffbenchError(
                f"{where}columns/optimal_action must hold integers in the discrete action space {_short_space(space)}, got dtype {labels.dtype}"
            )
        bad = _first_row(labels, _outside(labels.dtype, *bounds))
        if bad is not None:
            raise OffbenchError(
                f"{where}columns/optimal_action[{bad}] = {_show(labels[bad])} is outside the action space {_short_space(space)}"
            )

    def content_sha256(self) -> str:
        """Checksum of the arrays (names, dtypes, shapes, bytes), independent of HDF5 layout and attrs."""
        digest = hashlib.sha256()
        arrays = self._named_arrays()
        for name in sorted(arrays):
            _digest_parts(digest, name, [arrays[name]])
        return digest.hexdigest()

    def _named_arrays(self) -> dict[str, np.ndarray]:
        arrays = {name: getattr(self, name) for name in CORE_ARRAYS}
        arrays.update({f"columns/{k}": v for k, v in self.columns.items()})
        arrays.update({f"episode_columns/{k}": v for k, v in self.episode_columns.items()})
        return arrays

    # ------------------------------------------------------------------ disk
    def save(self, path: str | Path, compression: str | None = None) -> Path:
        """Write atomically (temp file in the same folder, then rename). Uncompressed files open memory-mapped."""
        arrays = {name: [np.asarray(arr)] for name, arr in self._named_arrays().items()}
        self.path = write_native(path, arrays, self.card, self.observation_space, self.action_space, compression)
        return self.path


def _one_column_per_dimension(name: str, values: np.ndarray) -> dict[str, np.ndarray]:
    """{name: values} for one value per row, else {name_0: .., name_1: ..} over the flattened dimensions."""
    if values.ndim == 1:
        return {name: values}
    flat = values.reshape(len(values), -1)
    return {f"{name}_{k}": flat[:, k] for k in range(flat.shape[1])}


def dataset_repr(dataset: Store, **counts: int) -> str:
    """`Type(id=.., format=.., <counts>, observation_space=.., action_space=..)`: what a dataset is in one line,
    never its arrays or its card. The format is the card's, the layout the data was published in (a registered
    dataset converted on download reads from its native copy)."""
    fields = [f"id={dataset.id!r}", f"format={(dataset.card or {}).get('format')!r}", *(f"{key}={value}" for key, value in counts.items())]
    fields += [f"observation_space={_short_space(dataset.observation_space)}", f"action_space={_short_space(dataset.action_space)}"]
    return f"{type(dataset).__name__}({', '.join(fields)})"


def _short_space(space: gym.Space | None) -> str:
    """The space as gymnasium prints it, or its type, shape and dtype where that would spell out bound arrays."""
    text = str(space)
    if space is None or len(text) <= 60:
        return text
    return f"{type(space).__name__}(shape={space.shape}, dtype={space.dtype})"


def write_native(
    path: str | Path,
    arrays: dict[str, list[np.ndarray]],
    card: dict[str, Any],
    observation_space: gym.Space | None,
    action_space: gym.Space | None,
    compression: str | None = None,
) -> Path:
    """Write a native file atomically from arrays given in parts (each array is its parts joined in order), so
    data larger than memory streams from memory-mapped parts to disk; the content checksum is computed in the
    same pass and equals `EpisodeStore.content_sha256` of the joined arrays. Names are those of the layout
    ("observations", "columns/task_id", ...). Uncompressed arrays are stored contiguous (memory-mappable)."""
    path = Path(path)
    digest = hashlib.sha256()
    need = None if compression else sum(part.nbytes for parts in arrays.values() for part in parts)
    with atomic_path(path, need=need) as tmp:
        with h5py.File(tmp, "w", track_order=True) as f:
            _write_header(f, card, observation_space, action_space)
            for name in sorted(arrays):
                parts = arrays[name]
                _digest_parts(digest, name, parts)
                if len(parts) == 1 and (compression is not None or parts[0].dtype.kind in "US"):
                    _write_array(f, name, parts[0], compression)
                    continue
                dataset = f.create_dataset(name, (sum(len(p) for p in parts), *parts[0].shape[1:]), parts[0].dtype)
                lo = 0
                for part in parts:
                    if len(part):
                        dataset[lo : lo + len(part)] = part
                    lo += len(part)
            f.attrs["content_sha256"] = digest.hexdigest()
    return path


def _write_header(f: h5py.File, card: dict[str, Any] | None, observation_space: gym.Space | None, action_space: gym.Space | None) -> None:
    f.attrs["format"] = FORMAT_NAME
    f.attrs["format_version"] = FORMAT_VERSION
    if card is not None:
        f.attrs["card"] = json.dumps(card, sort_keys=True)
    f.attrs["observation_space"] = space_to_json(observation_space)
    f.attrs["action_space"] = space_to_json(action_space)


@dataclass(frozen=True)
class Region:
    """Where one array of a native file lies (contiguous, uncompressed): any process can memory-map it to
    write its part in place, or to read it."""

    path: Path
    offset: int
    dtype: np.dtype
    shape: tuple[int, ...]

    def open(self, mode: str = "r+", rows: slice = slice(None), populate: bool = False) -> np.ndarray:
        """Rows `rows` of the array, memory-mapped ("r+": writable). `populate` faults their pages in now,
        in one call: cheaper than a fault per page as they are first written (it saved a third of the
        writing time of the generators' workers here)."""
        lo, hi, _ = rows.indices(self.shape[0])
        shape = (max(0, hi - lo), *self.shape[1:])
        count = int(np.prod(shape, dtype=np.int64))
        if not count:
            return np.empty(shape, self.dtype)
        offset = self.offset + lo * (count // shape[0]) * self.dtype.itemsize
        start = offset - offset % mmap.ALLOCATIONGRANULARITY
        with open(self.path, "r+b" if mode == "r+" else "rb") as file:
            mapped = mmap.mmap(
                file.fileno(),
                offset - start + count * self.dtype.itemsize,
                offset=start,
                access=mmap.ACCESS_WRITE if mode == "r+" else mmap.ACCESS_READ,
            )
        if populate and sys.platform == "linux":
            with contextlib.suppress(OSError):  # a kernel without MADV_POPULATE_WRITE (before 5.14): pages fault in as written
                mapped.madvise(getattr(mmap, "MADV_POPULATE_WRITE", 23))
        return np.frombuffer(mapped, self.dtype, count, offset - start).reshape(shape)


def allocate_native(
    tmp: Path, arrays: dict[str, tuple[tuple[int, ...], np.dtype]], observation_space: gym.Space | None, action_space: gym.Space | None
) -> dict[str, Region]:
    """Create native file `tmp` (an `atomic_path` temp file) with its arrays, named as in the layout and
    given as (shape, dtype), allocated but not written: writers fill their `Region`s in place (no copy
    through this process), then `finish_native` adds the card and the checksum. Disk space is reserved
    here, so a full disk is an error now and not a crash of a process writing through a memory map."""
    regions = {}
    with h5py.File(tmp, "w", track_order=True) as f:
        _write_header(f, None, observation_space, action_space)
        for name in sorted(arrays):
            shape, dtype = arrays[name]
            plist = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
            plist.set_alloc_time(h5py.h5d.ALLOC_TIME_EARLY)  # the place of the data is fixed now
            plist.set_fill_time(h5py.h5d.FILL_TIME_NEVER)  # and nothing is written there until the writers do
            dataset = f.create_dataset(name, shape, dtype, dcpl=plist)
            regions[name] = Region(Path(tmp), dataset.id.get_offset() or 0, np.dtype(dtype), tuple(shape))
    reserve_space(Path(tmp))
    return regions


def finish_native(tmp: Path, regions: dict[str, Region], card: dict[str, Any]) -> str:
    """Checksum the arrays written into `regions` (equal to `EpisodeStore.content_sha256` of the file) and
    store it with the card; returns the checksum."""
    digest = hashlib.sha256()
    for name in sorted(regions):
        _digest_parts(digest, name, [regions[name].open("r")])
    with h5py.File(tmp, "r+") as f:
        f.attrs["card"] = json.dumps(card, sort_keys=True)
        f.attrs["content_sha256"] = digest.hexdigest()
    return digest.hexdigest()


def _digest_parts(digest, name: str, parts: list[np.ndarray]) -> None:
    """Add one array, given as parts joined in order, to a content checksum: name, dtype, shape, bytes."""
    shape = (sum(len(p) for p in parts), *parts[0].shape[1:])
    digest.update(f"{name}|{parts[0].dtype.str}|{shape}|".encode())
    for part in parts:
        step = max(1, (64 << 20) // max(1, part[:1].nbytes))  # hash in ~64 MB blocks
        for lo in range(0, len(part), step):
            digest.update(np.ascontiguousarray(part[lo : lo + step]).data)


def _first_row(arr: np.ndarray, is_bad, block_rows: int = 1 << 16) -> int | None:
    """Index of the first row of `arr` where `is_bad` (elementwise) holds anywhere; read in blocks, so a
    memory-mapped file is never loaded whole. `is_bad` None: nothing can be bad, nothing is read; `is_bad(block)`
    None: nothing in that block is."""
    if is_bad is None:
        return None
    for lo in range(0, len(arr), block_rows):
        block = np.asarray(arr[lo : lo + block_rows])
        mask = is_bad(block)
        if mask is None:  # the block was cleared as a whole
            continue
        rows = mask.reshape(len(block), -1).any(axis=1)
        if rows.any():
            return lo + int(np.argmax(rows))
    return None


def task_count(card: dict[str, Any]) -> tuple[int | None, str]:
    """How many tasks a card's `task_id` column may index, and where the card says so: the multi-task task list
    (env.kwargs.tasks), else a learning-history split (split.train, or the recipe's tasks - held_out); (None, "")
    when the card does not say."""
    listed = _table(_table(card, "env"), "kwargs").get("tasks")
    if isinstance(listed, list) and listed:
        return len(listed), "env.kwargs.tasks"
    train = _table(card, "split").get("train")
    if isinstance(train, list) and train:
        return len(train), "split.train"
    params = _table(_table(_table(card, "source"), "recipe"), "params")
    tasks, held_out = params.get("tasks"), params.get("held_out", 0)
    if _is_integer(tasks) and _is_integer(held_out) and tasks > held_out >= 0:
        return tasks - held_out, "recipe's tasks - held_out"
    return None, ""


def _table(table: dict[str, Any], key: str) -> dict[str, Any]:
    """`table[key]` when it is a table, else an empty one: a card read unchecked may hold anything there."""
    value = table.get(key)
    return value if isinstance(value, dict) else {}


def _is_integer(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _integer_bounds(space: gym.Space | None) -> tuple[np.ndarray, np.ndarray] | None:
    """(low, high), both inclusive, of a space of integers (Discrete, MultiDiscrete, MultiBinary, a Box of an
    integer dtype); None for any other space (a float Box may be exceeded by data, e.g. Meta-World's)."""
    if isinstance(space, gym.spaces.Discrete):
        return np.asarray(space.start), np.asarray(space.start + space.n - 1)
    if isinstance(space, gym.spaces.MultiDiscrete):
        start = np.asarray(getattr(space, "start", 0))
        return np.broadcast_to(start, space.nvec.shape), start + space.nvec - 1
    if isinstance(space, gym.spaces.MultiBinary):
        return np.asarray(0), np.asarray(1)
    if isinstance(space, gym.spaces.Box) and np.dtype(space.dtype).kind in "iu":
        return np.asarray(space.low), np.asarray(space.high)
    return None


def _outside(dtype: np.dtype, low: Any, high: Any):
    """`is_bad(block)` for `_first_row`: a value outside [low, high] or, in a float array, not an integer. None when
    no value of an integer `dtype` can be outside (a uint8 array under Box(0, 255, uint8)). An integer block whose
    minimum and maximum (two fast reductions) lie inside every bound is passed whole; the elementwise mask is built
    only for the others (a block with a bad value, or bounds that differ by dimension and are not all met at once)."""
    low, high = np.asarray(low), np.asarray(high)
    if dtype.kind in "biu":
        lowest, highest = (0, 1) if dtype.kind == "b" else (np.iinfo(dtype).min, np.iinfo(dtype).max)
        if np.all(low <= lowest) and np.all(high >= highest):
            return None
        tightest_low, tightest_high = low.max(), high.min()
        uniform = low.min() == tightest_low and high.max() == tightest_high

        def is_bad(block: np.ndarray) -> np.ndarray | None:
            if not block.size or (block.min() >= tightest_low and block.max() <= tightest_high):
                return None
            if not uniform and block.ndim > 1 and 1 < block[0].size <= 16:  # a few dimensions, each its own bounds:
                flat = block.reshape(len(block), -1)  # column by column (a strided min / max beats the elementwise mask)
                lows, highs = (np.broadcast_to(b, block.shape[1:]).reshape(-1) for b in (low, high))
                if all(flat[:, j].min() >= lows[j] and flat[:, j].max() <= highs[j] for j in range(flat.shape[1])):
                    return None
            return (block < low) | (block > high)

        return is_bad
    if dtype.kind == "f":
        return lambda block: (block != np.round(block)) | (block < low) | (block > high)
    return lambda block: np.ones(block.shape, bool)  # not numbers: _check_kinds refuses those first


def _show(value: np.ndarray) -> str:
    return np.array2string(np.asarray(value), threshold=8, precision=4)


def _write_array(f: h5py.File, name: str, arr: np.ndarray, compression: str | None) -> None:
    if arr.dtype.kind in "US":
        arr = arr.astype(h5py.string_dtype()) if arr.dtype.kind == "U" else arr
    chunked = compression is not None and arr.size > 0
    f.create_dataset(name, data=arr, compression=compression if chunked else None, chunks=True if chunked else None)


def replace_card(path: str | Path, card: dict[str, Any]) -> None:
    """Rewrite a native file's card attribute in place (the arrays and their checksum stay as they are)."""
    with h5py.File(path, "r+") as f:
        f.attrs["card"] = json.dumps(card, sort_keys=True)


def is_native(path: Path) -> bool:
    """True if `path` is an HDF5 file written by offbench."""
    if not path.is_file() or not h5py.is_hdf5(path):
        return False
    try:
        with h5py.File(path, "r") as f:
            return f.attrs.get("format") == FORMAT_NAME
    except OSError:
        return False


def open_hdf5(path: Path) -> h5py.File:
    """An HDF5 file opened for reading, or a one-line error naming it (truncated or corrupt files)."""
    try:
        return h5py.File(path, "r")
    except OSError as exc:
        raise OffbenchError(f"{path}: not a readable HDF5 file ({exc.__class__.__name__}: truncated or corrupt?)") from None


Node = TypeVar("Node", h5py.Group, h5py.Dataset)


def hdf5_node(node: h5py.Group | h5py.Dataset | h5py.Datatype, kind: type[Node]) -> Node:
    """`node` as the kind the layout puts there (an array: `h5py.Dataset`, a folder: `h5py.Group`), or a one-line
    error naming the file and the node: a malformed file can hold anything under a name."""
    if not isinstance(node, kind):
        wanted = "an array (dataset)" if kind is h5py.Dataset else "a group"
        raise OffbenchError(f"{node.file.filename}: {node.name} is an HDF5 {type(node).__name__.lower()}, expected {wanted}")
    return node


def load_native(path: str | Path, mmap: bool = True) -> EpisodeStore:
    """Open a native file. Contiguous uncompressed arrays are memory-mapped (nothing read until used)."""
    path = Path(path)
    if not path.is_file():
        raise OffbenchError(f"{path}: no such file")
    with open_hdf5(path) as f:
        if f.attrs.get("format") != FORMAT_NAME:
            raise OffbenchError(f"{path}: not an offbench dataset (HDF5 file without format='offbench')")
        version = f.attrs.get("format_version", 0)
        if not isinstance(version, (int, np.integer)) or isinstance(version, (bool, np.bool_)):
            raise OffbenchError(f"{path}: attribute format_version must be an integer, got {version!r}")
        if version > FORMAT_VERSION:
            raise OffbenchError(f"{path}: format version {version} is newer than this offbench supports ({FORMAT_VERSION})")
        missing = [name for name in CORE_ARRAYS if name not in f]
        if missing:
            raise OffbenchError(f"{path}: missing array(s) {', '.join(missing)}")
        try:
            core = {name: _read_array(path, hdf5_node(f[name], h5py.Dataset), mmap) for name in CORE_ARRAYS}
            columns = _read_group(path, f, "columns", mmap)
            episode_columns = _read_group(path, f, "episode_columns", mmap)
            card = json.loads(_text_attr(path, f, "card", "{}"))
            if not isinstance(card, dict):
                raise ValueError(f"attribute card must hold a JSON object, got {type(card).__name__}")
            obs_space = space_from_json(_text_attr(path, f, "observation_space", "null"))
            act_space = space_from_json(_text_attr(path, f, "action_space", "null"))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise OffbenchError(f"{path}: unreadable dataset ({str(exc).splitlines()[0][:200]})") from None
    return EpisodeStore(
        **core, columns=columns, episode_columns=episode_columns, observation_space=obs_space, action_space=act_space, card=card, path=path
    )


def _text_attr(path: Path, f: h5py.File, name: str, default: str) -> str:
    value = f.attrs.get(name, default)
    if isinstance(value, bytes):
        value = value.decode("utf-8", errors="replace")
    if not isinstance(value, str):
        raise OffbenchError(f"{path}: attribute {name} must be a string, got {type(value).__name__}")
    return value


def native_header(path: str | Path) -> tuple[dict[str, Any], int, int]:
    """The card, number of episodes and number of steps of a native file, from its header alone (for the
    writer of a file just written: nothing is validated or read)."""
    path = Path(path)
    with open_hdf5(path) as f:
        card = json.loads(_text_attr(path, f, "card", "{}"))
        return card, len(hdf5_node(f["episode_starts"], h5py.Dataset)) - 1, len(hdf5_node(f["actions"], h5py.Dataset))


def stored_checksum(path: str | Path) -> str | None:
    """The content checksum recorded when the file was written (cheap: reads one attribute)."""
    with h5py.File(path, "r") as f:
        value = f.attrs.get("content_sha256")
    return None if value is None else str(value)


def _read_group(path: Path, f: h5py.File, group: str, mmap: bool) -> dict[str, np.ndarray]:
    """Every dataset under `group`, keyed by its path inside the group (e.g. "infos/success")."""
    arrays: dict[str, np.ndarray] = {}
    if group in f:
        hdf5_node(f[group], h5py.Group).visititems(
            lambda name, obj: arrays.__setitem__(name, _read_array(path, obj, mmap)) if isinstance(obj, h5py.Dataset) else None
        )
    return arrays


def _read_array(path: Path, ds: h5py.Dataset, mmap: bool) -> np.ndarray:
    size = ds.size
    if size is None or ds.ndim == 0:
        raise ValueError(f"array {ds.name} has no rows (a scalar or empty dataspace)")
    if ds.dtype.kind == "O" or h5py.check_string_dtype(ds.dtype) is not None:
        return np.asarray(ds.asstr()[()]) if size else np.array([], dtype=str)  # an array: ds has rows
    offset = ds.id.get_offset()
    if mmap and ds.chunks is None and ds.compression is None and offset is not None and size > 0:
        expected = offset + size * ds.dtype.itemsize
        if expected > path.stat().st_size:
            raise OSError(f"array {ds.name} runs past the end of the file (truncated)")
        return np.memmap(path, dtype=ds.dtype, mode="r", offset=offset, shape=ds.shape)
    return ds[()]
