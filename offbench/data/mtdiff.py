"""MTDiff's Meta-World data (what HarmoDT and the papers after it train on), imported into the native format.

The layout, checked against the two repositories that read it:

* charleshsc/HarmoDT `prompt_dt/prompt_utils.py::load_meta_data_prompt`: `<root>/<task>/{i}.npz`, i = 0, 1, ...,
  one file per episode, 2,000 episodes per task for the near-optimal data, 1,000 for the sub-optimal
  (`length = 2000 if optimal else 1000`); keys read: `observations`, `rewards`, `actions` and `terminals`,
  or `dones` when `terminals` is absent (`get_batch`); task folders are Meta-World v2 names
  (`config/MetaWorld/task.json`: "basketball-v2", ...). The episodes' length is `len(observations)`:
  the observation after the last step is not in the file.
* tinnerhrhe/MTDiff `diffuser/datasets/d4rl.py::load_metaworld_dataset`: the same `{i}.npz` files
  (there under `<task>/<run>/dataset/`), cut into episodes where `terminals` is set.

How offbench reads it (the definition):

1. Every `{i}.npz` of a task, in numeric order, is one or more episodes: a row with `terminals` (or
   `dones`) set ends an episode, and so does the file's last row.
2. Meta-World never terminates an episode (success does not end it; `max_path_length` = 500 truncates it),
   so every episode end is a truncation: terminations are all False, and a flag in the file is taken as
   the time limit. The card counts the episodes that end before 500 steps.
3. With `next_observations` in the files, each step keeps its s'. Without it, the s' of an episode's
   last row is unknown, so that row is dropped and its observation becomes the episode's final
   observation (the D4RL rule for timeouts: offbench.data.d4rl_format). The card records how many rows.
4. Observations and actions are stored as float32 (what offbench's Meta-World generator writes); other
   per-step arrays of the right length are kept as `infos/<key>` columns (e.g. `success`). Text or complex
   observations, actions, rewards or flags, rewards or flags of more than one value per step, and rows whose
   shape differs between episodes or tasks are refused, naming the file and the array.
5. `task_id` is the task's position in the card's `env.kwargs.tasks` (folders in sorted name order),
   `source_episode` the `{i}` of the file a step came from. Task names map v2 -> v3 (Meta-World 3.x has
   only v3 environments), which is what evaluation builds; the v2 names stay in the card.

Sources: a local folder, or a .zip / .tar / .tar.gz / .tgz archive of one (`offbench import mtdiff URL`
downloads an archive first; MTDiff publishes a Google Drive folder: download it, then import the folder).
"""

from __future__ import annotations

import re
import tarfile
import tempfile
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from offbench.data.d4rl_format import from_d4rl_arrays
from offbench.data.store import EpisodeStore
from offbench.errors import OffbenchError

EPISODE_FILE = re.compile(r"(\d+)\.npz")
MAX_PATH_LENGTH = 500
ARCHIVES = (".zip", ".tar", ".tar.gz", ".tgz")


def task_folders(root: Path) -> dict[str, Path]:
    """task name -> folder holding its {i}.npz files; MTDiff's nesting <task>/<run>/dataset/ is followed."""
    if not root.is_dir():
        raise OffbenchError(f"{root}: not a folder (MTDiff data is one folder per task holding {{i}}.npz episodes)")
    found = {}
    for folder in sorted(p for p in root.iterdir() if p.is_dir()):
        episodes = folder
        if not any(EPISODE_FILE.fullmatch(p.name) for p in folder.iterdir()):
            nested = sorted(folder.glob("*/dataset"))
            if len(nested) == 1:
                episodes = nested[0]
            else:
                continue
        found[folder.name] = episodes
    if not found:
        raise OffbenchError(f"{root}: no task folder with {{i}}.npz episode files")
    return found


def episode_files(folder: Path, limit: int | None) -> list[Path]:
    """0.npz, 1.npz, ... in numeric order; a gap before `limit` is an error naming it."""
    numbered = sorted((int(m.group(1)), p) for p in folder.iterdir() if (m := EPISODE_FILE.fullmatch(p.name)))
    numbers = [n for n, _ in numbered]
    count = len(numbers) if limit is None else limit
    if count > len(numbers) or numbers[:count] != list(range(count)):
        missing = next((i for i in range(count) if i >= len(numbers) or numbers[i] != i), count)
        raise OffbenchError(f"{folder}: episode file {missing}.npz is missing ({len(numbers)} found, {count} wanted)")
    return [p for _, p in numbered[:count]]


def _read_episode(path: Path) -> dict[str, np.ndarray]:
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {key: np.asarray(data[key]) for key in data.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        raise OffbenchError(f"{path}: not a readable .npz episode ({exc})") from None
    flag = "terminals" if "terminals" in arrays else "dones"
    missing = [k for k in ("observations", "actions", "rewards") if k not in arrays] + ([] if flag in arrays else ["terminals (or dones)"])
    if missing:
        raise OffbenchError(f"{path}: missing {', '.join(missing)}")
    for key in ("observations", "actions", "rewards", flag, "next_observations"):
        value = arrays.get(key)
        if value is not None and value.dtype.kind not in "biuf":
            kind = {"c": "complex numbers (the imaginary part would be lost)", "U": "text", "S": "bytes"}.get(
                value.dtype.kind, f"dtype {value.dtype}"
            )
            raise OffbenchError(f"{path}: {key} holds {kind}, not real numbers")
    n = len(arrays["observations"]) if arrays["observations"].ndim else 0
    if n == 0:
        raise OffbenchError(f"{path}: an empty episode")
    for key, value in arrays.items():
        if key in ("observations", "actions", "rewards", flag, "next_observations") and (value.ndim == 0 or len(value) != n):
            raise OffbenchError(f"{path}: {key} has {len(value) if value.ndim else 0} rows, observations {n}")
    for key in ("rewards", flag):  # one value per step: (n,) or (n, 1)
        if arrays[key].shape not in ((n,), (n, 1)):
            raise OffbenchError(f"{path}: {key} has shape {arrays[key].shape}, expected ({n},): one value per step")
    if "next_observations" in arrays and arrays["next_observations"].shape != arrays["observations"].shape:
        raise OffbenchError(
            f"{path}: next_observations has shape {arrays['next_observations'].shape}, observations {arrays['observations'].shape}"
        )
    arrays["rewards"] = arrays["rewards"].reshape(n)
    arrays["flags"] = arrays.pop(flag).reshape(n).astype(bool)
    return arrays


def _check_rows(path: Path, arrays: dict[str, np.ndarray], seen: dict[str, tuple[tuple[int, ...], Path]]) -> None:
    """Every per-step array of every episode of every task must have rows of one shape (what `np.concatenate`
    needs): `seen` holds the first shape met for each array and the file it came from."""
    for key, value in arrays.items():
        if key == "flags":
            continue
        first = seen.setdefault(key, (value.shape[1:], path))
        if value.shape[1:] != first[0]:
            raise OffbenchError(
                f"{path}: {key} rows have shape {value.shape[1:]}, but {first[1]} has {first[0]} (every episode of every task must agree)"
            )


def read_task(
    folder: Path, task_id: int, limit: int | None, seen: dict[str, tuple[tuple[int, ...], Path]] | None = None
) -> tuple[EpisodeStore, dict[str, Any]]:
    """One task's episodes as an EpisodeStore (rules 1-4 of the module docstring) and what the card records.
    `seen`: the row shapes of the tasks read before (see `_check_rows`), updated."""
    files = episode_files(folder, limit)
    episodes = [_read_episode(p) for p in files]
    has_next = all("next_observations" in e for e in episodes)
    lengths = np.array([len(e["observations"]) for e in episodes])
    flags = np.concatenate([e["flags"] for e in episodes])
    file_last = np.cumsum(lengths) - 1
    timeouts = flags.copy()
    timeouts[file_last] = True  # each file ends an episode
    info_keys = sorted(set.intersection(*(set(e) for e in episodes)) - {"observations", "actions", "rewards", "flags", "next_observations"})
    info_keys = [k for k in info_keys if all(e[k].ndim >= 1 and len(e[k]) == len(e["observations"]) for e in episodes)]
    seen = {} if seen is None else seen
    kept = ("observations", "actions", "rewards", *(["next_observations"] if has_next else []), *info_keys)
    for path, episode in zip(files, episodes):
        _check_rows(path, {key: episode[key] for key in kept}, seen)
    arrays = {
        "observations": np.concatenate([e["observations"] for e in episodes]).astype(np.float32),
        "actions": np.concatenate([e["actions"] for e in episodes]).astype(np.float32),
        "rewards": np.concatenate([e["rewards"] for e in episodes]).reshape(-1).astype(np.float32),
        "terminals": np.zeros(len(flags), bool),  # Meta-World never terminates (rule 2)
        "timeouts": timeouts,
    }
    if has_next:
        arrays["next_observations"] = np.concatenate([e["next_observations"] for e in episodes]).astype(np.float32)
    extra = {
        "task_id": np.full(len(flags), task_id, np.int64),
        "source_episode": np.repeat(np.arange(len(files)), lengths),  # episode_files gives 0.npz, 1.npz, ... in order
    }
    infos = {key: np.concatenate([e[key] for e in episodes]) for key in info_keys}
    store = from_d4rl_arrays(arrays, infos=infos, extra=extra, where=str(folder), name=folder.name)
    ends = np.flatnonzero(timeouts)
    episode_lengths = np.diff(np.concatenate([[-1], ends]))
    stats = {
        "files": len(files),
        "episodes": int(len(ends)),
        "flags_inside_files": int((flags & ~np.isin(np.arange(len(flags)), file_last)).sum()),
        "episodes_shorter_than_time_limit": int((episode_lengths < MAX_PATH_LENGTH).sum()),
        "rows_dropped_for_missing_next_observation": int(store.card["d4rl"]["rows_removed_for_missing_next_observation"]),
        "source_dtypes": {k: str(episodes[0][k].dtype) for k in ("observations", "actions", "rewards")},
    }
    return store, stats


def v3_name(task: str) -> str:
    """Meta-World 2.x task name -> its 3.x name (the only version offbench's environments build)."""
    return re.sub(r"-v2$", "-v3", task)


def _suite_of(tasks: list[str]) -> str:
    """MT10 / MT50 when the tasks are exactly that suite's (their goal draws), else MT1 (each task drawn alone)."""
    try:
        from metaworld import env_dict
    except ImportError:
        return "MT1"
    for suite in ("MT10", "MT50"):
        if set(tasks) == set(getattr(env_dict, f"{suite}_V3")):
            return suite
    unknown = sorted(set(tasks) - set(env_dict.ALL_V3_ENVIRONMENTS))
    if unknown:
        raise OffbenchError(f"task folder(s) {', '.join(unknown)} are not Meta-World tasks (as v3 names)")
    return "MT1"


def import_folder(root: Path, episodes: int | None = None, tasks: list[str] | None = None) -> EpisodeStore:
    """Every task folder under `root` (or the named ones) as one multi-task EpisodeStore with its card."""
    folders = task_folders(root)
    if tasks:
        unknown = [t for t in tasks if t not in folders]
        if unknown:
            raise OffbenchError(f"{root}: no task folder {', '.join(unknown)} (found: {', '.join(folders)})")
        folders = {t: folders[t] for t in sorted(tasks)}
    if episodes is not None and episodes < 1:
        raise OffbenchError(f"--episodes must be at least 1, got {episodes}")
    stores, stats, seen = [], {}, {}
    for task_id, (name, folder) in enumerate(folders.items()):
        store, stats[name] = read_task(folder, task_id, episodes, seen)
        stores.append(store)
    names = [v3_name(name) for name in folders]
    store = concatenate(stores)
    store.card = {
        "kind": "multi-task",
        "env": {"suite": "metaworld", "id": _suite_of(names), "kwargs": {"seed": 0, "tasks": names, "max_episode_steps": MAX_PATH_LENGTH}},
        "mtdiff": {"source_tasks": list(folders), "per_task": stats, "rules": "offbench.data.mtdiff module docstring"},
    }
    return store


def concatenate(stores: list[EpisodeStore]) -> EpisodeStore:
    """Stores with the same per-step columns, one after the other (episodes in order)."""
    columns = set(stores[0].columns)
    for store in stores[1:]:
        if set(store.columns) != columns:
            raise OffbenchError(f"task folders differ in their per-step arrays ({sorted(columns)} vs {sorted(store.columns)})")
    return EpisodeStore(
        observations=np.concatenate([s.observations for s in stores]),
        actions=np.concatenate([s.actions for s in stores]),
        rewards=np.concatenate([s.rewards for s in stores]),
        terminations=np.concatenate([s.terminations for s in stores]),
        truncations=np.concatenate([s.truncations for s in stores]),
        episode_starts=np.concatenate([[0], np.cumsum(np.concatenate([s.episode_lengths for s in stores]))]),
        final_observations=np.concatenate([s.final_observations for s in stores]),
        columns={k: np.concatenate([s.columns[k] for s in stores]) for k in sorted(columns)},
        observation_space=stores[0].observation_space,
        action_space=stores[0].action_space,
    )


def unpack(archive: Path, into: Path) -> Path:
    """Unpack a .zip / .tar(.gz) into `into`/unpacked, refusing members that would land outside it;
    the folder holding the task folders (the archive's single top folder, if it has one)."""
    target = into / "unpacked"
    target.mkdir()
    try:
        if archive.name.endswith(".zip"):
            with zipfile.ZipFile(archive) as zf:
                for member in zf.namelist():
                    if member.startswith("/") or ".." in Path(member).parts:
                        raise OffbenchError(f"{archive}: archive member {member!r} would land outside the folder")
                zf.extractall(target)
        else:
            with tarfile.open(archive) as tf:
                tf.extractall(target, filter="data")  # refuses absolute paths, .. and links out of the folder
    except (OSError, zipfile.BadZipFile, tarfile.TarError) as exc:
        raise OffbenchError(f"{archive}: not a readable archive ({exc})") from None
    inner = [p for p in target.iterdir() if p.is_dir()]
    return inner[0] if len(inner) == 1 and not _has_tasks(target) else target


def _has_tasks(folder: Path) -> bool:
    try:
        return bool(task_folders(folder))
    except OffbenchError:
        return False


def import_mtdiff(source: str | Path, episodes: int | None = None, tasks: list[str] | None = None) -> EpisodeStore:
    """A folder or a local .zip / .tar(.gz) archive in MTDiff's layout, as one multi-task EpisodeStore
    (`offbench import mtdiff URL` fetches an archive first)."""
    source = Path(source).expanduser()
    if source.is_file() and source.name.endswith(ARCHIVES):
        with tempfile.TemporaryDirectory(prefix="offbench-mtdiff-") as folder:
            return import_folder(unpack(source, Path(folder)), episodes, tasks)
    return import_folder(source, episodes, tasks)


def detect_mtdiff(path: Path) -> bool:
    """A folder of task folders holding {i}.npz episodes (judged by content, cheaply)."""
    return path.is_dir() and _has_tasks(path)


def export_mtdiff(store: EpisodeStore, out: Path) -> Path:
    raise OffbenchError("offbench reads MTDiff's layout but does not write it (export to offbench, minari or d4rl)")
