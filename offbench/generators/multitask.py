"""Collect a multi-task offline dataset in parallel processes, resumably, then merge it into one native file.

The work is cut into jobs of (task, a chunk of episodes). Each job plays its episodes through the same
lock-step loop the evaluator uses (`offbench.evaluation.lanes.run_lanes`) and writes a shard (`.npz`, plain arrays,
loaded with `allow_pickle=False`) into a work folder next to the output, atomically. A rerun of the same recipe
skips every job whose shard exists, so an interrupted collection resumes where it stopped; a different recipe
finding the folder is refused. The merge concatenates shards in (task, episode) order, so the content does not
depend on the number of workers, and writes the native file atomically; only then is the work folder removed.

Bounded: before any work, the dataset's size is put at its least (every episode `min_episode_steps` long,
bytes per step from the spaces and the columns), and a collection whose shards and merged file cannot fit on
the disk (`offbench.utils.check_space`, as the learning-history generators do), or whose merge (which holds
the dataset in memory) cannot fit in the memory available, is refused in one line. Workers end with the
collecting process: each watches a pipe only that process holds open, so a parent that is killed (even with
SIGKILL) leaves no worker (nor the forkserver they keep alive) behind; the next run resumes from the shards.

Per step the dataset holds `task_id` (index into the card's `env.kwargs.tasks`), `episode_seed` (the reset
seed that rebuilds the episode's goal or layout), `behaviour` (index into `behaviour_profiles` of the card: which
noise profile acted) and `infos/success`; suite-specific columns come from the reset info (e.g. `goal_id`).
"""

from __future__ import annotations

import io
import json
import math
import multiprocessing
import os
import shutil
import threading
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Protocol, Sequence

import gymnasium as gym
import numpy as np

from offbench.envs.multitask import EnvPool, Lane, episode_seed, task_names
from offbench.errors import OffbenchError
from offbench.evaluation.lanes import run_lanes
from offbench.utils import atomic_write_bytes, check_space, disk_full_error, progress_bar

MIXED = "mixed"  # the quality that draws one of a recipe's two noise profiles per episode, by a fair coin


@dataclass(frozen=True)
class Recipe:
    """Everything that determines the data (and nothing that does not, like the number of workers)."""

    generator: str
    env: dict[str, Any]
    quality: str
    episodes_per_task: int
    seed: int
    behaviour: dict[str, Any]  # the noise profiles by name (the qualities besides `mixed`), recorded in the card
    reset_columns: tuple[str, ...] = ()  # reset-info keys stored as per-step int64 columns (e.g. goal_id)

    def __post_init__(self) -> None:
        if self.quality not in (*self.profiles, MIXED):
            raise OffbenchError(f"unknown quality '{self.quality}' (known: {', '.join((*self.profiles, MIXED))})")
        if self.episodes_per_task < 1:
            raise OffbenchError(f"episodes per task must be at least 1, got {self.episodes_per_task}")

    @property
    def profiles(self) -> tuple[str, ...]:
        """The noise profiles' names in order: the data's `behaviour` column holds positions in it."""
        return tuple(self.behaviour)

    def fingerprint(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)


@dataclass(frozen=True)
class Job:
    task_id: int
    task: str
    start: int  # first episode index
    stop: int

    @property
    def shard_name(self) -> str:
        return f"task{self.task_id:03d}-ep{self.start:06d}-{self.stop:06d}.npz"


# A behaviour: (lanes, their envs, recipe) -> a Policy for that round of lanes. Module-level, so worker
# processes can unpickle it by name. It draws each lane's profile and noise from `lane_behaviour`.
BehaviourFactory = Callable[[Sequence[Lane], Sequence[gym.Env], "Recipe"], Any]


COMMON_RECIPE_PARAMS = frozenset({"suite", "tasks", "quality", "episodes_per_task", "workers"})


def check_recipe_params(generator: str, params: dict[str, Any], extra: Sequence[str] = ()) -> None:
    """Refuse unknown keys in a card's recipe params before any work starts."""
    known = COMMON_RECIPE_PARAMS | set(extra)
    unknown = sorted(set(params) - known)
    if unknown:
        raise OffbenchError(f"unknown {generator} recipe parameter(s): {', '.join(unknown)} (known: {', '.join(sorted(known))})")


def recipe_from_params(
    generator: str, params: dict[str, Any], seed: int, env: dict[str, Any], behaviour: dict[str, Any], **fields: Any
) -> Recipe:
    """A Recipe from checked params; quality and episodes per task default as the cards do."""
    return Recipe(
        generator=generator,
        env=env,
        quality=str(params.get("quality", "near-optimal")),
        episodes_per_task=int(params.get("episodes_per_task", 1000)),
        seed=int(seed),
        behaviour=behaviour,
        **fields,
    )


def lane_behaviour(lane: Lane, quality: str, profiles: Sequence[str]) -> tuple[int, np.random.Generator]:
    """(index into `profiles` of the noise profile acting in this episode, the behaviour's random stream).

    `mixed` flips a fair coin per episode. The stream is seeded from the lane's reset seed but kept apart from
    the environment's use of it.
    """
    rng = np.random.default_rng([lane.seed, 1])
    profile = int(rng.integers(2)) if quality == MIXED else list(profiles).index(quality)
    return profile, rng


@dataclass
class Collection:
    recipe: Recipe
    behaviour: BehaviourFactory
    observation_space: gym.Space
    action_space: gym.Space
    chunk_episodes: int = 25
    workers: int = 0  # 0: all cores; 1: in this process
    worker_init: Callable[..., None] | None = None
    worker_init_args: tuple = field(default_factory=tuple)
    min_episode_steps: int = 1  # the fewest steps an episode can take (the size check's lower bound)

    def jobs(self) -> list[Job]:
        names = task_names(self.recipe.env)
        return [
            Job(task_id, name, start, min(start + self.chunk_episodes, self.recipe.episodes_per_task))
            for task_id, name in enumerate(names)
            for start in range(0, self.recipe.episodes_per_task, self.chunk_episodes)
        ]


def collect(collection: Collection, out: Path, quiet: bool = False) -> Path:
    """Run (or resume) every job, merge the shards into a native file at `out`, and return its path."""
    from offbench.data.store import is_native, load_native

    recipe = collection.recipe
    out = Path(out)
    if is_native(out) and _matches(load_native(out).card, recipe_card(recipe)):
        return out  # already collected with this very recipe
    work = out.parent / f"{out.name}.work"
    check_size(collection, out, work)
    _claim_work_dir(work, recipe)
    todo = [job for job in collection.jobs() if not (work / job.shard_name).is_file()]
    total = recipe.episodes_per_task * len(task_names(recipe.env))
    with progress_bar(quiet, f"{recipe.generator} {recipe.env['id']} {recipe.quality}", total) as advance:
        advance(total - sum(job.stop - job.start for job in todo))
        workers = collection.workers or _usable_cores()
        if workers == 1 or len(todo) <= 1:
            if collection.worker_init is not None:
                collection.worker_init(*collection.worker_init_args)
            for job in todo:
                run_job(recipe, collection.behaviour, job, work)
                advance(job.stop - job.start)
        else:
            _run_parallel(collection, todo, work, min(workers, len(todo)), advance)
    store = merge_shards(collection, work)
    store.save(out)
    shutil.rmtree(work)
    return out


def least_bytes(collection: Collection) -> tuple[int, int]:
    """(episodes, the fewest bytes the merged dataset can take): every episode `min_episode_steps` long, the
    per-step and per-episode arrays that `run_job` writes, sized from the spaces."""

    def nbytes(space: gym.Space) -> int:
        return np.dtype(space.dtype).itemsize * math.prod(space.shape or ())

    recipe = collection.recipe
    episodes = recipe.episodes_per_task * len(task_names(recipe.env))
    # observation, action, reward (float32), terminated, truncated, task_id, episode_seed, behaviour, success, reset columns
    per_step = (
        nbytes(collection.observation_space) + nbytes(collection.action_space) + 4 + 1 + 1 + 8 + 8 + 1 + 1 + 8 * len(recipe.reset_columns)
    )
    per_episode = nbytes(collection.observation_space) + 8 + 8  # final observation, length, episode start
    return episodes, episodes * (collection.min_episode_steps * per_step + per_episode)


def check_size(collection: Collection, out: Path, work: Path) -> None:
    """Refuse, before any work, a collection that cannot fit: its shards and then the merged file beside them on
    the disk (less the shards already there), the dataset in memory for the merge. One line each."""
    recipe = collection.recipe
    episodes, least = least_bytes(collection)
    what = (
        f"{recipe.generator} {recipe.env['id']}: {episodes:,} episodes ({recipe.episodes_per_task:,} per task) take at least "
        f"{least:,} bytes"
    )
    done = sum(entry.stat().st_size for entry in os.scandir(work) if entry.is_file()) if work.is_dir() else 0
    need = max(least - done, 0) + least  # the shards still to write, then the merged file while they are there
    folder = next(p for p in (out.parent, *out.parent.parents) if p.is_dir())
    try:
        check_space(folder / out.name, need)  # the free space where out will be, without making any folder yet
    except OffbenchError:
        raise OffbenchError(f"{what}, twice on disk while merging: {disk_full_error(out, need)}") from None
    available = _available_memory()
    if available is not None and least > available:
        raise OffbenchError(
            f"{what}, which the merge holds in memory, and {available:,} bytes of memory are available; collect fewer episodes per task"
        )


def _available_memory() -> int | None:
    """Bytes of memory a process can still take (MemAvailable + SwapFree), None where /proc/meminfo is not."""
    try:
        fields = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
        return sum(int(fields[key].split()[0]) * 1024 for key in ("MemAvailable", "SwapFree"))
    except (OSError, KeyError, ValueError):
        return None


def _usable_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _run_parallel(collection: Collection, todo: list[Job], work: Path, workers: int, advance) -> None:
    # forkserver/spawn: MuJoCo and OpenGL state must not be forked from a parent that may hold it.
    method = "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"
    context = multiprocessing.get_context(method)
    lifeline, keep_alive = context.Pipe(duplex=False)  # only this process holds keep_alive: its death closes it
    try:
        with ProcessPoolExecutor(
            workers,
            mp_context=context,
            initializer=_start_worker,
            initargs=(lifeline, collection.worker_init, collection.worker_init_args),
        ) as pool:
            pending = {pool.submit(run_job, collection.recipe, collection.behaviour, job, work): job for job in todo}
            try:
                while pending:
                    done, _ = wait(pending, return_when=FIRST_COMPLETED)
                    for future in done:
                        job = pending.pop(future)
                        future.result()
                        advance(job.stop - job.start)
            except BaseException:
                for future in pending:
                    future.cancel()
                raise
    finally:
        keep_alive.close()
        lifeline.close()


def _start_worker(lifeline, init: Callable[..., None] | None, init_args: tuple) -> None:
    """In each worker: end this process once the collecting process is gone, then the collection's own set-up.
    A worker whose parent was killed would otherwise wait on the task pipe for ever (it holds that pipe's write
    end itself, so it never reads EOF), and keep the forkserver alive with it."""
    threading.Thread(target=_exit_with_parent, args=(lifeline,), name="offbench-lifeline", daemon=True).start()
    if init is not None:
        init(*init_args)


def _exit_with_parent(lifeline) -> None:
    try:
        lifeline.recv_bytes()  # nothing is ever sent: this returns only at EOF, when the parent's end closes
    except (EOFError, OSError):
        pass
    os._exit(1)


class Fingerprinted(Protocol):
    """A recipe whose fingerprint names everything that determines its data: a work folder resumes only the same one."""

    def fingerprint(self) -> str: ...


def _claim_work_dir(work: Path, recipe: Fingerprinted) -> None:
    stamp = work / "recipe.json"
    if stamp.is_file():
        if stamp.read_text() != recipe.fingerprint():
            raise OffbenchError(f"{work}: holds an unfinished collection of a different recipe; delete the folder or choose another output")
        return
    work.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(stamp, recipe.fingerprint().encode())


def run_job(recipe: Recipe, behaviour: BehaviourFactory, job: Job, work: Path) -> Path:
    """Play one job's episodes with the behaviour policy and write its shard (what a worker process runs)."""
    lanes = [Lane(job.task_id, e, episode_seed(recipe.seed, job.task, e)) for e in range(job.start, job.stop)]
    profiles = [lane_behaviour(lane, recipe.quality, recipe.profiles)[0] for lane in lanes]
    pool = EnvPool(recipe.env)
    try:
        results = run_lanes(pool, lanes, lambda round_lanes, envs: behaviour(round_lanes, envs, recipe), max_envs=1, record=True)
    finally:
        pool.close()
    lengths = np.array([r["length"] for r in results], dtype=np.int64)
    arrays: dict[str, np.ndarray] = {
        "observations": np.concatenate([np.stack(r["observations"][:-1]) for r in results]),
        "final_observations": np.stack([r["observations"][-1] for r in results]),
        "actions": np.concatenate([np.stack(r["actions"]) for r in results]),
        "rewards": np.concatenate([np.asarray(r["rewards"], dtype=np.float32) for r in results]),
        "terminations": np.concatenate([np.asarray(r["terminations"], dtype=bool) for r in results]),
        "truncations": np.concatenate([np.asarray(r["truncations"], dtype=bool) for r in results]),
        "lengths": lengths,
        "column:task_id": np.full(lengths.sum(), job.task_id, dtype=np.int64),
        "column:episode_seed": np.repeat([lane.seed for lane in lanes], lengths).astype(np.int64),
        "column:behaviour": np.repeat(profiles, lengths).astype(np.int8),
        "column:infos/success": np.concatenate([np.asarray(r["step_success"], dtype=bool) for r in results]),
    }
    for key in recipe.reset_columns:
        arrays[f"column:{key}"] = np.repeat([r["reset_info"][key] for r in results], lengths).astype(np.int64)
    return atomic_write_bytes(work / job.shard_name, _npz_bytes(arrays))


def merge_shards(collection: Collection, work: Path):
    """One EpisodeStore from every shard, in (task, episode) order, with per-task statistics in its card."""
    from offbench.data.store import EpisodeStore

    recipe = collection.recipe
    names = task_names(recipe.env)
    paths = [work / job.shard_name for job in collection.jobs()]
    lengths = np.concatenate([_load(path, "lengths") for path in paths])
    # Preallocate and fill shard by shard: peak memory is the dataset plus one shard (MT50 is gigabytes).
    with np.load(paths[0], allow_pickle=False) as first:
        layout = {key: (first[key].dtype, first[key].shape[1:]) for key in first.files if key != "lengths"}
    rows = {"final_observations": len(lengths)}
    cat = {key: np.empty((rows.get(key, int(lengths.sum())), *shape), dtype) for key, (dtype, shape) in layout.items()}
    offsets = dict.fromkeys(cat, 0)
    for path in paths:
        with np.load(path, allow_pickle=False) as shard:
            for key in cat:
                block = shard[key]
                cat[key][offsets[key] : offsets[key] + len(block)] = block
                offsets[key] += len(block)
    store = EpisodeStore.from_arrays(
        {key.removeprefix("column:"): value for key, value in cat.items()},
        lengths,
        observation_space=collection.observation_space,
        action_space=collection.action_space,
    )
    store.card = {**recipe_card(recipe), "task_stats": task_stats(store, names)}
    return store


def _load(path: Path, key: str) -> np.ndarray:
    with np.load(path, allow_pickle=False) as data:
        return data[key]


def recipe_card(recipe: Recipe) -> dict[str, Any]:
    """What the dataset's embedded card says about how it was made (JSON round-trip: as load_native returns it)."""
    card = {
        "kind": "multi-task",
        "source": {"recipe": {"generator": recipe.generator, "seed": recipe.seed}},
        "env": recipe.env,
        "quality": recipe.quality,
        "episodes_per_task": recipe.episodes_per_task,
        "behaviour": recipe.behaviour,
        "behaviour_profiles": list(recipe.profiles),
    }
    return json.loads(json.dumps(card))


def _matches(card: dict[str, Any], expected: dict[str, Any]) -> bool:
    return all(card.get(key) == value for key, value in expected.items())


def task_stats(store, names: list[str]) -> dict[str, dict[str, float]]:
    """Per task: episodes, success rate (success at any step, Meta-World's definition) and mean return."""
    episode_task = np.asarray(store.columns["task_id"])[store.episode_starts[:-1]]
    success = np.logical_or.reduceat(np.asarray(store.columns["infos/success"]), store.episode_starts[:-1])
    returns = store.episode_returns()
    stats = {}
    for task_id, name in enumerate(names):
        mine = episode_task == task_id
        stats[name] = {
            "episodes": int(mine.sum()),
            "success_rate": round(float(success[mine].mean()), 6),
            "mean_return": round(float(returns[mine].mean()), 6),
            "mean_length": round(float(store.episode_lengths[mine].mean()), 3),
        }
    return stats


def _npz_bytes(arrays: dict[str, np.ndarray]) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, allow_pickle=False, **arrays)  # shards are read with allow_pickle=False
    return buffer.getvalue()
