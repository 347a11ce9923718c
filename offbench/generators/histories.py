"""Learning-history datasets for in-context RL: a source algorithm run on many tasks at once, every step kept.

One row of a batched environment is one learning history: a fresh learner on one training task for
`episodes` episodes. Histories are cut into random streams (the data depends on them alone) and streams
into groups, each run by a worker process as one batch (`rollout.run_group`) and saved to a staging
folder; the dataset is then written from those parts without joining them in memory. The result is
stored history by history, episodes in order, so a sampler can cut windows that cross episode
boundaries (what Algorithm Distillation trains on).

Per-step columns besides the core arrays: task_id (position in the card's split.train), history_id,
episode_in_history, optimal_action (the exact optimal action in the state, DPT's label), and on bandit data of
several arm counts (a recipe's `num_arms` a list) num_actions, the arms of the step's task: the dataset's action
space has the most arms, a task of fewer uses the first ones. Each batch of histories has one arm count.

The generator checks that learning happened: per history, the mean score of the first and the last
tenth of its episodes (score = return; for bandits the mean of the pulled arm, which removes reward
noise) against the task's optimal return. A history improved if it closed at least 10% of the gap
between its first-window score and the optimum. Histories that did not improve are reported; if fewer
than half improved, generation fails unless `allow_unlearned` is set (a source that declares `learns = False`,
a roll-in rather than a learner, is not checked). The summary goes into the card; its optimal return is that of
the card's environment's episodes (the horizon evaluation runs), also for a roll-in whose own episodes are one step.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import multiprocessing
import os
import tempfile
from concurrent.futures import FIRST_EXCEPTION, ProcessPoolExecutor, wait
from dataclasses import asdict, dataclass, field
from functools import partial
from multiprocessing.sharedctypes import Synchronized
from pathlib import Path
from typing import Any, Callable

import numpy as np
from rich.console import Console

from offbench.data.store import EpisodeStore, Region, allocate_native, finish_native, load_native
from offbench.envs.benchmarks import BENCHMARKS, Benchmark, arm_runs, get_benchmark, split_tasks
from offbench.errors import OffbenchError
from offbench.generators import register_generator
from offbench.generators.compiled import compile_loop, selected_loop
from offbench.generators.rollout import (
    STEP_ARRAYS,
    LaidOut,
    Staged,
    StepTables,
    as_words,
    lay_out_staged,
    lockstep,
    run_group,
    staging_arrays,
)
from offbench.generators.sources import ALGORITHMS, RowStreams, make_config
from offbench.utils import atomic_path, die_with_parent, progress_bar, reserve_space, temp_prefix, user_fixable_write_errors

LEARNING_WINDOW_FRACTION = 0.1  # first / last tenth of each history
MIN_GAP_CLOSED = 0.1  # a history improved if it closed 10% of the gap to the optimum
MIN_IMPROVED_FRACTION = 0.5  # below this share of improved histories, the dataset is refused


@dataclass(frozen=True)
class HistoryRecipe:
    """What a learning-history dataset is made from (a card's `source.recipe.params`, or CLI options)."""

    benchmark: str
    algo: str
    tasks: int
    held_out: int
    histories_per_task: int
    episodes: int
    split_seed: int = 0
    variant: str | None = None
    allow_unlearned: bool = False
    hyperparameters: dict[str, float] = field(default_factory=dict)
    num_arms: int | tuple[int, ...] | None = None  # bandits: the training tasks' arm count, or counts (a mixed dataset)
    held_out_arms: int | None = None  # bandits: the held-out tasks' arm count

    @classmethod
    def from_params(cls, benchmark: str, params: dict[str, Any]) -> HistoryRecipe:
        """Validate everything before any work; errors are one line naming the parameter."""
        bench = get_benchmark(benchmark)
        known = {f for f in cls.__dataclass_fields__ if f != "benchmark"}
        unknown = sorted(set(params) - known)
        if unknown:
            raise OffbenchError(f"{benchmark}: unknown recipe parameter(s) {', '.join(unknown)} (known: {', '.join(sorted(known))})")
        algo = str(params.get("algo", bench.algos[0]))
        if algo not in bench.algos:
            raise OffbenchError(f"unknown algorithm '{algo}' for {benchmark} (choose from: {', '.join(bench.algos)})")
        if "tasks" not in params or "held_out" not in params:
            raise OffbenchError(f"{benchmark}: a recipe needs 'tasks' and 'held_out'")
        if not isinstance(params.get("hyperparameters", {}), dict):
            raise OffbenchError(f"{benchmark}: 'hyperparameters' must be a table of name = value")
        variant = params.get("variant", bench.variants[0] if bench.variants else None)
        recipe = cls(
            benchmark=benchmark,
            algo=algo,
            tasks=_integer(params, "tasks"),
            held_out=_integer(params, "held_out"),
            histories_per_task=_integer(params, "histories_per_task", 1),
            episodes=_integer(params, "episodes", bench.default_episodes),
            split_seed=_integer(params, "split_seed", 0),
            variant=None if variant is None else str(variant),
            allow_unlearned=bool(params.get("allow_unlearned", False)),
            hyperparameters=dict(params.get("hyperparameters", {})),
            num_arms=_arm_counts(params.get("num_arms")),
            held_out_arms=None if params.get("held_out_arms") is None else _integer(params, "held_out_arms"),
        )
        recipe._check(bench)
        return recipe

    def _check(self, bench: Benchmark) -> None:
        if self.tasks < 1:
            raise OffbenchError(f"tasks must be at least 1 (got {self.tasks})")
        if not 0 <= self.held_out < self.tasks:
            raise OffbenchError(
                f"held-out ({self.held_out}) must be between 0 and tasks - 1 ({self.tasks - 1}): at least one training task is needed"
            )
        space = bench.task_space_size()
        if space is not None and self.tasks > space:
            raise OffbenchError(f"{bench.name} has {space} distinct tasks; asked for {self.tasks}")
        if self.histories_per_task < 1:
            raise OffbenchError(f"histories-per-task must be at least 1 (got {self.histories_per_task})")
        if self.episodes < 1:
            raise OffbenchError(f"episodes must be at least 1 (got {self.episodes})")
        if self.split_seed < 0:
            raise OffbenchError(f"split-seed must be non-negative (got {self.split_seed})")
        if self.variant is not None and self.variant not in bench.variants:
            choices = ", ".join(bench.variants) or "none"
            raise OffbenchError(f"unknown variant '{self.variant}' for {bench.name} (choose from: {choices})")
        arms = {"num-arms": self.num_arms, "held-out-arms": self.held_out_arms}
        if any(value is not None for value in arms.values()) and "num_arms" not in bench.split_kwargs:
            raise OffbenchError(f"{bench.name} has no arms: num-arms and held-out-arms apply to the bandits only")
        for name, value in arms.items():
            if any(count < 2 for count in np.atleast_1d(value if value is not None else 2)):
                raise OffbenchError(f"{name} must be at least 2 (a bandit needs two arms to choose from), got {value}")
        try:
            make_config(self.algo, self.hyperparameters)
        except (TypeError, ValueError) as exc:
            raise OffbenchError(f"{bench.name}: {exc}") from None

    def to_params(self) -> dict[str, Any]:
        """TOML-ready recipe parameters (defaults that change nothing are left out)."""
        params = {k: v for k, v in asdict(self).items() if k != "benchmark"}
        for key, unset in (
            ("variant", None),
            ("allow_unlearned", False),
            ("hyperparameters", {}),
            ("num_arms", None),
            ("held_out_arms", None),
        ):
            if params[key] == unset:
                del params[key]
        if isinstance(self.num_arms, tuple):
            params["num_arms"] = list(self.num_arms)
        return params

    @property
    def mixed_arms(self) -> bool:
        """Training tasks of several arm counts (`num_arms` a list): the dataset gets a per-step num_actions column."""
        return isinstance(self.num_arms, tuple)

    def split(self) -> tuple[list[dict], list[dict]]:
        """The (train, held_out) tasks of the recipe (`split_tasks`)."""
        return split_tasks(
            get_benchmark(self.benchmark),
            self.tasks,
            self.held_out,
            self.split_seed,
            self.variant,
            list(self.num_arms) if isinstance(self.num_arms, tuple) else self.num_arms,
            self.held_out_arms,
        )

    @property
    def source_learns(self) -> bool:
        """False for a roll-in (a source that declares `learns = False`): no learning check, no learning to report."""
        return getattr(ALGORITHMS[self.algo], "learns", True)

    def source_batch(self, tasks: list[dict]):
        """The batch the source runs on: the benchmark's, with one-step episodes for a roll-in that declares
        `episode_horizon` (every transition from a state it draws; evaluation keeps the benchmark's horizon)."""
        horizon = getattr(ALGORITHMS[self.algo], "episode_horizon", None)
        return get_benchmark(self.benchmark).make_batch(tasks, **({} if horizon is None else {"horizon": horizon}))

    def optimal_returns(self, tasks: list[dict]) -> np.ndarray:
        """The optimal return of each task's episodes as the card's environment runs them (its own horizon, the one
        evaluation uses), also for a roll-in whose own episodes are one step long (their optimum would say 0)."""
        runs, bench = arm_runs(tasks), get_benchmark(self.benchmark)
        return np.concatenate(
            [np.asarray(bench.make_batch(tasks[lo:hi]).optimal_returns, np.float64) for lo, hi in zip(runs[:-1], runs[1:])]
        )

    def dataset_id(self, seed: int) -> str:
        """A readable id that changes whenever the data would."""
        parts = [self.benchmark, self.algo] + ([self.variant] if self.variant else [])
        parts += [f"t{self.tasks}", f"ho{self.held_out}", f"h{self.histories_per_task}", f"e{self.episodes}"]
        if self.split_seed:
            parts.append(f"split{self.split_seed}")
        if self.num_arms is not None:
            parts.append("a" + "_".join(map(str, np.atleast_1d(self.num_arms))))
        if self.held_out_arms is not None:
            parts.append(f"hoa{self.held_out_arms}")
        if self.hyperparameters:
            parts.append(hashlib.sha256(json.dumps(self.hyperparameters, sort_keys=True).encode()).hexdigest()[:8])
        return "generated/" + "-".join(parts) + f"-s{seed}"


def _integer(params: dict[str, Any], name: str, default: int | None = None) -> int:
    value = params.get(name, default)
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise OffbenchError(f"{name.replace('_', '-')} must be an integer (got {value!r})")
    return int(value)


def _arm_counts(value: Any) -> int | tuple[int, ...] | None:
    """A recipe's num_arms: one integer, or a non-empty list of distinct integers."""
    if value is None or not isinstance(value, (list, tuple)):
        return None if value is None else _integer({"num_arms": value}, "num_arms")
    counts = tuple(_integer({"num_arms": count}, "num_arms") for count in value)
    if not counts or len(set(counts)) < len(counts):
        raise OffbenchError(f"num-arms must be one integer or a list of distinct ones, got {list(value)}")
    return counts


# ---------------------------------------------------------------------------------------------- rollout
STREAM_HISTORIES = 16  # histories per random stream (the data's unit of randomness, fixed by the recipe)


def default_workers() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


@dataclass(frozen=True)
class _Plan:
    """How the histories of a recipe are cut: streams of STREAM_HISTORIES histories (stream k draws from
    `SeedSequence(seed).spawn(streams)[k]`), and groups of consecutive streams, one per worker, each run
    as one batch. The data depends on the streams only, so any grouping (any number of workers) gives the
    same bytes. In lockstep (no episode ends early) every history takes `capacity` steps. Training tasks of
    several arm counts (`arm_runs`) start a new stream and a new group at each run, so a batch has one count."""

    recipe: HistoryRecipe
    seed: int
    row_task: np.ndarray  # training task of every history
    stream_bounds: np.ndarray  # first history of every stream, then the number of histories
    group_bounds: np.ndarray  # first stream of every group, then the number of streams
    in_lockstep: bool
    capacity: int  # the most steps a history can take
    loop: str  # the inner loop the groups run ("numba" or "numpy", `compiled.selected_loop`)

    @classmethod
    def make(cls, recipe: HistoryRecipe, seed: int, train: list, workers: int) -> _Plan:
        row_task = np.repeat(np.arange(len(train), dtype=np.int32), recipe.histories_per_task)
        runs = arm_runs(train)
        run_bounds = runs * recipe.histories_per_task
        run_streams = [np.arange(lo, hi, STREAM_HISTORIES) for lo, hi in zip(run_bounds[:-1], run_bounds[1:])]
        stream_bounds = np.append(np.concatenate(run_streams), len(row_task))
        group_bounds, first_stream = [0], 0
        for streams in map(len, run_streams):  # the workers shared out by streams, at least one group per run
            groups = min(streams, -(-workers * streams // (len(stream_bounds) - 1)))
            group_bounds += (first_stream + np.linspace(0, streams, groups + 1).round().astype(int)[1:]).tolist()
            first_stream += streams
        batches = [recipe.source_batch(train[lo:hi]) for lo, hi in zip(runs[:-1], runs[1:])]
        capacity = recipe.episodes * batches[0].horizon
        loop = selected_loop(capacity, len(row_task) * capacity // (len(group_bounds) - 1))
        return cls(recipe, seed, row_task, stream_bounds, np.asarray(group_bounds), all(map(lockstep, batches)), capacity, loop)

    @property
    def num_groups(self) -> int:
        return len(self.group_bounds) - 1

    def histories(self, group: int) -> tuple[int, int]:
        return int(self.stream_bounds[self.group_bounds[group]]), int(self.stream_bounds[self.group_bounds[group + 1]])

    def env(self, group: int):
        """The batch of the group's histories (one row each)."""
        train, _ = self.recipe.split()
        lo, hi = self.histories(group)
        return self.recipe.source_batch([train[i] for i in self.row_task[lo:hi]])

    def ids(self, group: int) -> tuple[np.ndarray, np.ndarray]:
        """History and task ids of the group's rows."""
        lo, hi = self.histories(group)
        return np.arange(lo, hi, dtype=np.int32), self.row_task[lo:hi]


def _dataset_arrays(
    one, histories: int, episodes: int, steps: int, mixed_arms: bool = False
) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """(shape, dtype) of every array of the dataset (`one`: a batch of one task of the benchmark, with the most
    actions); `mixed_arms` adds the num_actions column."""
    observation = one.compact_observations()
    action_dtype = np.min_scalar_type(one.num_actions - 1)
    per_step = {
        "observations": observation.dtype,
        "actions": action_dtype,
        "rewards": np.float32,
        "terminations": bool,
        "truncations": bool,
        "columns/history_id": np.int32,
        "columns/task_id": np.int32,
        "columns/episode_in_history": np.int32,
        "columns/optimal_action": action_dtype,
    }
    if mixed_arms:
        per_step["columns/num_actions"] = np.min_scalar_type(one.num_actions)
    arrays = {
        name: ((steps, *observation.shape[1:]) if name == "observations" else (steps,), np.dtype(dtype)) for name, dtype in per_step.items()
    }
    arrays["final_observations"] = ((histories * episodes, *observation.shape[1:]), observation.dtype)
    arrays["episode_starts"] = ((histories * episodes + 1,), np.dtype(np.int64))
    return arrays


def _group_part(regions: dict[str, Region], steps: slice, episodes: slice, populate: bool = False) -> dict[str, np.ndarray]:
    """A group's part of the dataset's arrays (flat; observations as words; episode_ends for episode_starts[1:])."""
    part = {name: regions[name].open(rows=steps, populate=populate) for name in STEP_ARRAYS}
    part["observations"] = as_words(part["observations"])
    part["final_observations"] = as_words(regions["final_observations"].open(rows=episodes, populate=populate))
    part["episode_ends"] = regions["episode_starts"].open(rows=slice(episodes.start + 1, episodes.stop + 1), populate=populate)
    return part


def _write_num_actions(regions: dict[str, Region], steps: slice, env) -> None:
    """A mixed-arms dataset's num_actions column over a group's steps (its rows share one arm count)."""
    if "columns/num_actions" in regions:
        regions["columns/num_actions"].open(rows=steps)[:] = env.num_actions


def _fits_in_memory(num_bytes: int) -> bool:
    """Whether num_bytes of file pages can be faulted in at once: at most half the dirty memory at which the
    kernel starts writing pages back in the background (vm.dirty_background_bytes, or dirty_background_ratio
    percent of available memory). Faulted in beyond that, the zeroed pages are written to disk while the
    workers are still filling them, and written again once filled: a 2.3 GB dataset (104M Dark Room steps)
    took 8.4-10.3 s faulted in at once, 6.4-6.7 s faulted in as written, on the 24 GB machine measured."""
    try:
        proc = Path("/proc/sys/vm")
        limit = int((proc / "dirty_background_bytes").read_text())
        if not limit:
            meminfo = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
            available = int(meminfo["MemAvailable"].split()[0]) * 1024
            limit = available * int((proc / "dirty_background_ratio").read_text()) // 100
    except (OSError, KeyError, ValueError):  # not Linux: fault pages in as they are written
        return False
    return num_bytes <= limit // 2


_shared_count: Synchronized[int] | None = None  # in a worker process: episodes done by all workers (the parent shows it)
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc mallopt parameters


def _start_worker(count: Synchronized[int]) -> None:
    """In each worker process: death with the parent, the shared count of episodes done, and a malloc that keeps the memory it
    frees. Each block of steps allocates and frees a few MB of arrays, thousands of times; by default glibc
    returns that memory to the system after every block and faults it in again for the next, which
    doubled the lay-out time on the machine this was measured on (a VM where first touching memory is
    slow). The worker ends with its group, so the memory it keeps is given back then."""
    global _shared_count
    _shared_count = count
    die_with_parent()  # a killed `offbench generate` leaves no worker blocked on the task pipe
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:  # not glibc: keep its defaults
        return
    libc.mallopt(_M_TRIM_THRESHOLD, 256 << 20)
    libc.mallopt(_M_MMAP_THRESHOLD, 32 << 20)


def _add_to_shared_count(n: int) -> None:
    if _shared_count is None:
        raise RuntimeError("episodes are counted in a worker process, which _start_worker gives the shared count")
    with _shared_count.get_lock():
        _shared_count.value += n


def _run_group(plan: _Plan, group: int, regions: dict[str, Region] | None, staging: Path) -> dict[str, np.ndarray]:
    """Run one group of histories. In lockstep (`regions`: the dataset's arrays, allocated before the groups run) it
    writes its part of the dataset and returns what the learning check needs; otherwise (`regions` None) it stages its
    log in `staging` and returns the steps each history took (`_lay_out_group` writes it)."""
    recipe = plan.recipe
    first_stream, last_stream = plan.group_bounds[group], plan.group_bounds[group + 1]
    seeds = np.random.SeedSequence(plan.seed).spawn(len(plan.stream_bounds) - 1)[first_stream:last_stream]
    sizes = np.diff(plan.stream_bounds[first_stream : last_stream + 1]).tolist()
    env_streams, algo_streams = (RowStreams([np.random.default_rng(s.spawn(2)[k]) for s in seeds], sizes) for k in (0, 1))
    env = plan.env(group)
    algo = ALGORITHMS[recipe.algo](env, recipe.episodes, algo_streams, make_config(recipe.algo, recipe.hyperparameters))
    tables = StepTables(env)
    lo, hi = plan.histories(group)
    if regions is None:
        staged = {}
        for name, (shape, dtype) in staging_arrays(env, plan.capacity, hasattr(env, "noisy_rewards")).items():
            staged[name] = np.lib.format.open_memmap(staging / f"{group:06d}-{name}.npy", "w+", dtype, shape)
            reserve_space(staging / f"{group:06d}-{name}.npy")
        return {
            "length": run_group(
                env, algo, recipe.episodes, env_streams, Staged(tables, staged), plan.in_lockstep, _add_to_shared_count, plan.loop
            )
        }
    # all parts are faulted in at once where they fit well in memory together
    populate = _fits_in_memory(sum(region.dtype.itemsize * int(np.prod(region.shape)) for region in regions.values()))
    part = _group_part(regions, slice(lo * plan.capacity, hi * plan.capacity), slice(lo * recipe.episodes, hi * recipe.episodes), populate)
    sink = LaidOut(
        tables, {name: array.reshape(hi - lo, -1) for name, array in part.items()}, *plan.ids(group), lo * plan.capacity, env.horizon
    )
    run_group(env, algo, recipe.episodes, env_streams, sink, plan.in_lockstep, _add_to_shared_count, plan.loop)
    _write_num_actions(regions, slice(lo * plan.capacity, hi * plan.capacity), env)
    return {"windows": learning_windows(sink.scores, sink.optimal_rate)}


def _lay_out_group(
    plan: _Plan, group: int, regions: dict[str, Region], staging: Path, first_step: int, length: np.ndarray
) -> dict[str, np.ndarray]:
    """Write a staged group into its part of the dataset, which starts at `first_step`; returns what the learning check needs."""
    env = plan.env(group)
    lo, hi = plan.histories(group)
    staged = {
        name: np.load(staging / f"{group:06d}-{name}.npy", mmap_mode="r")
        for name in staging_arrays(env, plan.capacity, hasattr(env, "noisy_rewards"))
    }
    steps = slice(first_step, first_step + int(length.sum()))
    part = _group_part(regions, steps, slice(lo * plan.recipe.episodes, hi * plan.recipe.episodes))
    scores, optimal_rate = lay_out_staged(StepTables(env), staged, length, *plan.ids(group), plan.recipe.episodes, part, first_step)
    _write_num_actions(regions, steps, env)
    return {"windows": learning_windows(scores, optimal_rate)}


def write_histories(
    recipe: HistoryRecipe, seed: int, out: Path, quiet: bool = True, workers: int | None = None, check: bool = True
) -> dict[str, Any]:
    """Generate every learning history and write the dataset to `out` (atomically); returns the learning
    summary. Groups of histories run in `workers` processes (default: every core this process may use)
    and write their parts of the file in place, in blocks of time, so memory does not grow with the data;
    where episodes can end early, a history's place is known only at the end, so groups first stage their
    logs next to `out`. With `check`, a dataset that did not learn is refused (nothing is left at `out`)."""
    if seed < 0:
        raise OffbenchError(f"seed must be non-negative (got {seed})")
    bench = get_benchmark(recipe.benchmark)
    train, held_out = recipe.split()
    workers = max(1, workers or default_workers())
    plan = _Plan.make(recipe, seed, train, workers)
    if plan.loop == "numba":
        compile_loop()  # before the workers fork, so they inherit the compiled loop
    one = max((recipe.source_batch([train[first]]) for first in arm_runs(train)[:-1]), key=lambda batch: batch.num_actions)
    histories, episodes = len(plan.row_task), recipe.episodes
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    layout = lambda steps: _dataset_arrays(one, histories, episodes, steps, recipe.mixed_arms)  # noqa: E731
    need = (
        sum(int(np.prod(shape)) * dtype.itemsize for shape, dtype in layout(histories * plan.capacity).values())
        if plan.in_lockstep
        else None
    )
    # named as every temporary is (utils.temp_prefix), so a run after a kill -9 removes this one's leftovers
    with (
        user_fixable_write_errors(out),
        tempfile.TemporaryDirectory(prefix=temp_prefix(out), suffix=".tmp", dir=out.parent) as folder,
        atomic_path(out, need=need) as tmp,
        _Workers(min(workers, plan.num_groups), quiet, f"{recipe.benchmark} {recipe.algo}", histories * episodes) as pool,
    ):
        staging = Path(folder)
        allocate = lambda steps: allocate_native(tmp, layout(steps), one.single_observation_space, one.single_action_space)  # noqa: E731
        if plan.in_lockstep:
            regions = allocate(histories * plan.capacity)
            results = pool.map(_run_group, [(plan, g, regions, staging) for g in range(plan.num_groups)])
        else:
            lengths = [r["length"] for r in pool.map(_run_group, [(plan, g, None, staging) for g in range(plan.num_groups)])]
            regions = allocate(int(sum(length.sum() for length in lengths)))
            first_steps = np.cumsum([0] + [int(length.sum()) for length in lengths])
            results = pool.map(
                _lay_out_group, [(plan, g, regions, staging, int(first_steps[g]), lengths[g]) for g in range(plan.num_groups)]
            )
        regions["episode_starts"].open()[0] = 0
        windows = np.concatenate([r["windows"] for r in results])
        summary = learning_summary(windows, recipe.optimal_returns(train)[plan.row_task], episodes, score_name=one.score_name)
        if check and recipe.source_learns:
            check_learning(summary, recipe.allow_unlearned)
        finish_native(tmp, regions, _card(recipe, bench, seed, train, held_out, summary))
    return summary


class _Workers:
    """Runs tasks in `workers` forked processes, with a progress bar of the episodes they report done
    (through a shared count). Even one worker is a process of its own (see `_start_worker`)."""

    def __init__(self, workers: int, quiet: bool, label: str, total: int):
        self.workers, self.quiet, self.label, self.total = workers, quiet, label, total

    def __enter__(self) -> _Workers:
        self._bar = progress_bar(self.quiet, self.label, self.total)
        self.advance = self._bar.__enter__()
        context = multiprocessing.get_context("fork")
        self.count = context.Value("q", 0)
        self.pool = ProcessPoolExecutor(self.workers, mp_context=context, initializer=_start_worker, initargs=(self.count,))
        self.shown = 0  # episodes the bar shows: kept across map() calls (a staged run maps twice)
        return self

    def map(self, task: Callable, arguments: list[tuple]) -> list:
        """task(*args) for each args, in order."""
        futures = [self.pool.submit(task, *args) for args in arguments]
        running = futures
        while running and not any(future.exception() for future in futures if future.done()):
            running = wait(running, timeout=0.1, return_when=FIRST_EXCEPTION).not_done
            count = self.count.value
            self.advance(count - self.shown)
            self.shown = count
        return [future.result() for future in futures]

    def __exit__(self, *exc) -> None:
        self.pool.shutdown(cancel_futures=True)
        self._bar.__exit__(*exc)


def run_histories(recipe: HistoryRecipe, seed: int, quiet: bool = True, workers: int = 1) -> tuple[EpisodeStore, dict[str, Any]]:
    """Generate every learning history into memory (no learning check); returns the dataset and the learning summary."""
    with tempfile.TemporaryDirectory(prefix="offbench-histories-") as folder:
        summary = write_histories(recipe, seed, Path(folder) / "data.h5", quiet=quiet, workers=workers, check=False)
        store = load_native(Path(folder) / "data.h5", mmap=False)
    store.path = None
    return store, summary


def learning_windows(scores: np.ndarray, optimal_rate: np.ndarray) -> np.ndarray:
    """Per history (rows of scores and optimal_rate, both (histories, episodes)): the mean score and the mean
    optimal-action rate over its first and its last window of episodes, as columns (first score, last
    score, first rate, last rate). Workers send these instead of every episode's score."""
    window = _window(scores.shape[1])
    return np.stack(
        [scores[:, :window].mean(1), scores[:, -window:].mean(1), optimal_rate[:, :window].mean(1), optimal_rate[:, -window:].mean(1)],
        axis=1,
    )


def _window(num_episodes: int) -> int:
    return max(1, int(num_episodes * LEARNING_WINDOW_FRACTION))


def learning_summary(
    windows: np.ndarray, optimal_returns: np.ndarray, num_episodes: int, score_name: str = "episode return"
) -> dict[str, Any]:
    """First vs last window of every history (windows: `learning_windows`); see the module docstring."""
    first, last, first_rate, last_rate = windows.T
    gap = np.maximum(optimal_returns - first, 0.0)
    improved = (last - first) >= MIN_GAP_CLOSED * gap
    ratio = lambda x: float(np.mean(x / np.where(optimal_returns > 0, optimal_returns, 1.0)))  # noqa: E731
    return {
        "score": score_name,
        "window_episodes": _window(num_episodes),
        "histories": len(windows),
        "histories_improved": int(improved.sum()),
        "unimproved_history_ids": np.flatnonzero(~improved).tolist(),
        "first_return": float(first.mean()),
        "last_return": float(last.mean()),
        "optimal_return": float(optimal_returns.mean()),
        "first_fraction_of_optimal": ratio(first),
        "last_fraction_of_optimal": ratio(last),
        "first_optimal_action_rate": float(first_rate.mean()),
        "last_optimal_action_rate": float(last_rate.mean()),
    }


def check_learning(summary: dict[str, Any], allow_unlearned: bool, console: Console | None = None) -> None:
    """Report histories that did not improve; refuse a dataset where most never learned."""
    console = console or Console(stderr=True, soft_wrap=True)
    bad, total = summary["histories"] - summary["histories_improved"], summary["histories"]
    if bad:
        ids = summary["unimproved_history_ids"]
        shown = ", ".join(map(str, ids[:10])) + (" ..." if len(ids) > 10 else "")
        console.print(
            f"[bold red]warning:[/] {bad} of {total} learning histories did not improve "
            f"(history ids {shown}); first vs last {summary['window_episodes']} episodes: "
            f"{summary['first_return']:.3f} -> {summary['last_return']:.3f}, optimum {summary['optimal_return']:.3f}",
            highlight=False,
        )
    if summary["histories_improved"] < MIN_IMPROVED_FRACTION * total and not allow_unlearned:
        raise OffbenchError(
            f"only {summary['histories_improved']} of {total} learning histories improved "
            f"(mean return {summary['first_return']:.3f} -> {summary['last_return']:.3f}, optimum {summary['optimal_return']:.3f}): "
            "such data cannot teach in-context learning; give more episodes, or pass --allow-unlearned "
            "(allow_unlearned = true in a recipe) to keep it"
        )


def _card(recipe: HistoryRecipe, bench: Benchmark, seed: int, train: list, held_out: list, summary: dict) -> dict[str, Any]:
    split = {"seed": recipe.split_seed, "train": train, "held_out": held_out}
    if recipe.variant:
        split["variant"] = recipe.variant
    arms = ""
    if recipe.num_arms is not None or recipe.held_out_arms is not None:
        counts = lambda tasks: "/".join(str(len(tasks[first]["means"])) for first in arm_runs(tasks)[:-1]) if tasks else "no"  # noqa: E731
        arms = f" Arms (not the summary's count): {counts(train)} in training tasks, {counts(held_out)} in held-out ones."
    return {
        "id": recipe.dataset_id(seed),
        "description": (
            f"{bench.summary}. {recipe.algo} learning histories: {len(train)} training tasks x "
            f"{recipe.histories_per_task} histories x {recipe.episodes} episodes, {len(held_out)} held-out tasks.{arms}"
        ),
        "format": "offbench",
        "kind": "learning-history",
        "license": "CC0-1.0",
        "source": {"recipe": {"generator": recipe.benchmark, "seed": seed, "params": recipe.to_params()}},
        "env": {"suite": "offbench", "id": bench.env_id},
        "split": split,
        "learning": summary,
    }


# ---------------------------------------------------------------------------------------------- generators
def generate(benchmark: str, params: dict[str, Any], seed: int, out: Path, quiet: bool = False, workers: int | None = None) -> Path:
    """Registered generator: validate, generate, check learning, then write `out` atomically."""
    recipe = HistoryRecipe.from_params(benchmark, params)
    write_histories(recipe, seed, Path(out), quiet=quiet, workers=workers)
    return Path(out)


for _name in BENCHMARKS:
    register_generator(_name)(partial(generate, _name))
