"""D4RL's flat HDF5 layout, read and written with h5py (the `d4rl` package cannot be installed today).

A D4RL file holds one row per step: `observations`, `actions`, `rewards`, `terminals`, `timeouts`,
optionally `next_observations`, `infos/*` (per step) and `metadata/*` (per file). Episodes are implicit.

How offbench cuts it into episodes (the definition; datasets/README.md repeats it):

1. An episode ends at row t when terminals[t] or timeouts[t] (D4RL's own `sequence_dataset` rule).
   A row with both flags (hopper/walker2d episodes that fall exactly at the time limit) ends the episode
   once, and keeps both flags: terminations[t] = truncations[t] = True. Samplers bootstrap on
   `terminations` only, so termination wins.
2. With `next_observations`: an episode also ends at row t when next_observations[t] differs from
   observations[t + 1] with no flag set (e.g. where a concatenated file such as medium-expert joins
   two sources and the first stops mid-episode); that row is marked truncated. Each episode's final
   observation is next_observations of its last row, so every step keeps its true s'.
3. The rows after the last flag (D4RL files stop mid-episode) form a final episode, truncated at its
   last row; they are not dropped.
4. Without `next_observations`, the s' of an episode's last row is not in the file:
   - episode ended by termination: the row is kept (its s' is never bootstrapped from) and the final
     observation is zeros (d3rlpy's convention), noted in card["d4rl"];
   - episode ended by timeout, or the trailing one: that last row cannot give a TD target, so it is
     removed and its observation becomes the episode's final observation; the row before is marked
     truncated (a one-row episode disappears). The count of removed rows is in card["d4rl"].

Peers' known slips this avoids (each has a test in tests/test_d4rl_format.py): D4RL's
`qlearning_dataset` takes s' = observations[t + 1] across episode boundaries and drops every timeout
transition even when next_observations has its s'; it also never emits the last row. Loaders that build
episodes only at flags drop the trailing episode or lose the final transition of each episode.

Export writes the same layout with `next_observations` (so nothing is lost), terminals = terminations,
timeouts = truncations (an episode that ends with neither flag gets timeouts = 1: D4RL has no other way
to mark an end), per-step columns as `infos/<key>` or top-level datasets, and offbench's card, spaces and
per-episode columns under `metadata/offbench_*`, from which a round trip restores them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from offbench.data.spaces import space_from_json, space_to_json, widest_space
from offbench.data.store import EpisodeStore, hdf5_node, open_hdf5
from offbench.errors import OffbenchError
from offbench.utils import atomic_path, safe_component

REQUIRED_KEYS = ("observations", "actions", "rewards", "terminals")
STEP_KEYS = ("observations", "actions", "rewards", "terminals", "timeouts", "next_observations")
GROUPS = ("infos", "metadata")


def detect_d4rl(path: Path) -> bool:
    """An HDF5 file (not offbench's) with top-level `observations` and `terminals` or `timeouts`."""
    path = Path(path)
    if not path.is_file() or not h5py.is_hdf5(path):
        return False
    try:
        with h5py.File(path, "r") as f:
            has_flags = "terminals" in f or "timeouts" in f
            return "format" not in f.attrs and isinstance(f.get("observations"), h5py.Dataset) and has_flags
    except OSError:
        return False


def _read_datasets(group: h5py.Group, prefix: str = "") -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}
    for key, node in group.items():
        if isinstance(node, h5py.Group):
            out.update(_read_datasets(node, f"{prefix}{key}/"))
        else:
            out[f"{prefix}{key}"] = node.asstr()[()] if h5py.check_string_dtype(node.dtype) else node[()]
    return out


def load_d4rl(path: Path) -> EpisodeStore:
    path = Path(path)
    with open_hdf5(path) as f:
        missing = [key for key in REQUIRED_KEYS if not isinstance(f.get(key), h5py.Dataset)]
        if missing:
            raise OffbenchError(f"{path}: not a complete D4RL file, missing {', '.join(missing)}")
        try:
            arrays = {key: np.asarray(hdf5_node(f[key], h5py.Dataset)[()]) for key in STEP_KEYS if key in f}
            groups = {name: _read_datasets(node) if isinstance(node := f.get(name), h5py.Group) else {} for name in GROUPS}
            extra = {
                key: node[()] for key, node in f.items() if key not in STEP_KEYS and key not in GROUPS and isinstance(node, h5py.Dataset)
            }
        except (OSError, ValueError, TypeError) as exc:
            raise OffbenchError(f"{path}: unreadable D4RL file ({exc.__class__.__name__}: {exc})") from None
    store = from_d4rl_arrays(arrays, infos=groups["infos"], metadata=groups["metadata"], extra=extra, where=str(path), name=path.stem)
    store.path = path
    return store


def _rows_equal(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise exact equality (NaN equals NaN), (N,) bool."""
    same = a == b
    if a.dtype.kind == "f":
        same |= np.isnan(a) & np.isnan(b)
    return same.reshape(len(a), -1).all(axis=1)


def _per_step(arr: np.ndarray, n: int, name: str, where: str) -> np.ndarray:
    arr = np.asarray(arr)
    if arr.ndim == 2 and arr.shape[1] == 1 and name in ("rewards", "terminals", "timeouts"):
        arr = arr[:, 0]  # some D4RL-style files store (N, 1)
    if len(arr) != n:
        raise OffbenchError(f"{where}: {name} has {len(arr)} rows, observations has {n}")
    return arr


def from_d4rl_arrays(
    arrays: dict[str, np.ndarray],
    infos: dict[str, np.ndarray] | None = None,
    metadata: dict[str, np.ndarray] | None = None,
    extra: dict[str, np.ndarray] | None = None,
    where: str = "D4RL data",
    name: str = "d4rl",
) -> EpisodeStore:
    """Cut flat D4RL arrays into episodes, following the rules in the module docstring."""
    missing = [key for key in REQUIRED_KEYS if key not in arrays]
    if missing:
        raise OffbenchError(f"{where}: not a complete D4RL file, missing {', '.join(missing)}")
    obs = np.asarray(arrays["observations"])
    n = len(obs)
    if n == 0:
        raise OffbenchError(f"{where}: observations is empty")
    step = {key: _per_step(arrays[key], n, key, where) for key in STEP_KEYS if key in arrays and key != "observations"}
    terminals = step["terminals"].astype(bool)
    timeouts = step["timeouts"].astype(bool) if "timeouts" in step else np.zeros(n, bool)
    columns = {f"infos/{key}": _per_step(value, n, f"infos/{key}", where) for key, value in (infos or {}).items()}
    ignored = sorted(key for key, value in (extra or {}).items() if np.ndim(value) == 0 or len(value) != n)
    columns.update({key: np.asarray(value) for key, value in (extra or {}).items() if key not in ignored})

    episodes = _cut_episodes(obs, terminals, timeouts, step.get("next_observations"), where)
    stored = _stored_metadata(metadata or {}, where)
    card = stored.pop("card", None) or {
        "id": name,
        "format": "d4rl",
        "d4rl": {
            **episodes.report(terminals, timeouts, has_timeouts="timeouts" in step),
            "ignored_datasets": ignored,
            "metadata": stored.pop("scalars"),
        },
    }
    keep = episodes.keep
    return EpisodeStore(
        observations=obs[keep],
        actions=step["actions"][keep],
        rewards=step["rewards"][keep],
        terminations=terminals[keep],
        truncations=episodes.truncations[keep],
        episode_starts=np.concatenate([[0], np.cumsum(episodes.lengths)]),
        final_observations=episodes.final,
        columns={key: value[keep] for key, value in columns.items()},
        episode_columns=stored["episode_columns"],
        observation_space=stored.get("observation_space") or widest_space(obs[:1]),
        action_space=stored.get("action_space") or widest_space(step["actions"][:1]),
        card=card,
    )


@dataclass
class _Episodes:
    """How the flat rows become episodes: where each one ends and what it keeps."""

    starts: np.ndarray  # first row of each episode (before any row is dropped)
    ends: np.ndarray  # last row of each episode
    truncations: np.ndarray  # per row
    cut: np.ndarray  # per row: an episode split where next_observations jumps
    trailing: bool  # the last rows end with neither flag
    keep: np.ndarray  # per row: False for a row dropped for want of its next observation
    final: np.ndarray  # final observation of each kept episode
    lengths: np.ndarray  # length of each kept episode
    vanished: np.ndarray  # per episode: dropped whole (one row, no next observation)
    has_next_observations: bool

    def report(self, terminals: np.ndarray, timeouts: np.ndarray, has_timeouts: bool) -> dict[str, Any]:
        """What the import did, for the card (so a user can see how the file was read)."""
        ends = self.ends
        return {
            "episodes": int(len(self.lengths)),
            "ended_by_terminal": int(terminals[ends].sum()),
            "ended_by_timeout": int((timeouts[ends] & ~terminals[ends]).sum()),
            "terminal_and_timeout_on_one_step": int((terminals & timeouts).sum()),
            "split_where_next_observation_jumps": int(self.cut.sum()),
            "trailing_rows_truncated": int(ends[-1] - self.starts[-1] + 1) if self.trailing else 0,
            "has_next_observations": self.has_next_observations,
            "has_timeouts": has_timeouts,
            "rows_removed_for_missing_next_observation": int((~self.keep).sum()),
            "episodes_removed_for_missing_next_observation": int(self.vanished.sum()),
            "terminal_final_observation": "next_observations" if self.has_next_observations else "zeros (not in the file)",
        }


def _cut_episodes(obs: np.ndarray, terminals: np.ndarray, timeouts: np.ndarray, next_obs: np.ndarray | None, where: str) -> _Episodes:
    """Episode ends: a terminal or timeout flag, a jump of next_observations, the last row. Without
    next_observations, an episode not ended by a terminal loses its last row (its s' is unknown)."""
    n = len(obs)
    flagged = terminals | timeouts
    cut = np.zeros(n, bool)
    if next_obs is not None:
        cut[:-1] = ~_rows_equal(next_obs[:-1], obs[1:]) & ~flagged[:-1]
    last = flagged | cut
    trailing = not last[-1]
    last[-1] = True
    truncations = timeouts | cut
    truncations[-1] |= trailing
    ends = np.flatnonzero(last)
    starts = np.concatenate([[0], ends[:-1] + 1])

    keep = np.ones(n, bool)
    if next_obs is not None:
        final, lengths, vanished = next_obs[ends], ends - starts + 1, np.zeros(len(ends), bool)
    else:
        needs_next = ~terminals[ends]  # timeout, trailing: s' needed for a TD target but not in the file
        keep[ends[needs_next]] = False
        shortened = ends[needs_next & (ends > starts)]
        truncations[shortened - 1] = True
        final = np.zeros((len(ends), *obs.shape[1:]), obs.dtype)
        final[needs_next] = obs[ends[needs_next]]
        lengths = ends - starts + 1 - needs_next
        vanished = lengths == 0
        final, lengths = final[~vanished], lengths[~vanished]
        if not len(lengths):
            raise OffbenchError(
                f"{where}: every episode has one row and no next observation (no next_observations key): no transition is left"
            )
    return _Episodes(starts, ends, truncations, cut, trailing, keep, final, lengths, vanished, next_obs is not None)


def _stored_metadata(metadata: dict[str, np.ndarray], where: str) -> dict[str, Any]:
    """metadata/* split into offbench's own entries (card, spaces, episode columns) and JSON-safe scalars."""
    out: dict[str, Any] = {"scalars": {}, "episode_columns": {}}
    try:
        for key, value in metadata.items():
            if key == "offbench_card":
                out["card"] = json.loads(str(value))
            elif key in ("offbench_observation_space", "offbench_action_space"):
                out[key.removeprefix("offbench_")] = space_from_json(str(value))
            elif key.startswith("offbench_episode_columns/"):
                out["episode_columns"][key.removeprefix("offbench_episode_columns/")] = np.asarray(value)
            elif np.ndim(value) == 0:  # policy weights and other arrays are not carried over
                item = value.item() if hasattr(value, "item") else value
                out["scalars"][key] = item.decode() if isinstance(item, bytes) else item
    except (ValueError, OffbenchError) as exc:
        raise OffbenchError(f"{where}: malformed metadata/{key} ({exc})") from None
    return out


# ---------------------------------------------------------------------------------------- export
def export_d4rl(store: EpisodeStore, out: Path) -> Path:
    """Write `store` as one D4RL-layout file: `out` itself if it ends in .hdf5/.h5, else out/<id>.hdf5 with the
    card id's namespace joined by '-' (`minigrid/tiny-near-optimal` -> minigrid-tiny-near-optimal.hdf5), so that
    datasets of two namespaces with one name do not collide."""
    out = Path(out)
    name = safe_component(str(store.card.get("id") or "dataset").replace("/", "-"), f"{store.path or 'dataset'}: the card id")
    target = out if out.suffix in (".hdf5", ".h5") else out / f"{name}.hdf5"
    if target.exists():
        raise OffbenchError(f"{target}: already exists; remove it or choose another --out")
    clash = sorted(set(store.columns) & {*STEP_KEYS, *GROUPS})
    if clash:
        raise OffbenchError(f"columns {clash} would overwrite D4RL's own keys")
    timeouts = np.asarray(store.truncations).copy()
    ends = store.episode_starts[1:] - 1
    unflagged = ends[~(np.asarray(store.terminations)[ends] | timeouts[ends])]
    timeouts[unflagged] = True  # D4RL marks an episode end only with a flag
    arrays = {
        "observations": np.asarray(store.observations),
        "actions": np.asarray(store.actions),
        "rewards": np.asarray(store.rewards),
        "terminals": np.asarray(store.terminations),
        "timeouts": timeouts,
        "next_observations": store.next_observations(),
        **{key: np.asarray(value) for key, value in store.columns.items()},
        "metadata/offbench_card": json.dumps(store.card, sort_keys=True),
        "metadata/offbench_observation_space": space_to_json(store.observation_space),
        "metadata/offbench_action_space": space_to_json(store.action_space),
        **{f"metadata/offbench_episode_columns/{k}": np.asarray(v) for k, v in store.episode_columns.items()},
    }
    need = sum(value.nbytes for value in arrays.values() if isinstance(value, np.ndarray))
    with atomic_path(target, need=need) as tmp, h5py.File(tmp, "w") as f:
        for key, value in arrays.items():
            if isinstance(value, np.ndarray) and value.dtype.kind == "U":
                value = value.astype(h5py.string_dtype())
            f.create_dataset(key, data=value)
    return target
