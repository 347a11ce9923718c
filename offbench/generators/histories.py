"""Learning-history datasets for in-context RL: a source algorithm run on many tasks at once, every step kept.

One row of a batched environment is one learning history: a fresh learner on one training task for
`episodes` episodes. All rows step together (vectorised); rows whose episodes end early (terminations)
simply start their next episode, and rows that have finished their history keep stepping unrecorded
until the last row is done. The result is stored history by history, episodes in order, so a sampler
can cut windows that cross episode boundaries (what Algorithm Distillation trains on).

Per-step columns besides the core arrays: task_id (position in the card's split.train), history_id,
episode_in_history, optimal_action (the exact optimal action in the state, DPT's label).

The generator checks that learning happened: per history, the mean score of the first and the last
tenth of its episodes (score = return; for bandits the mean of the pulled arm, which removes reward
noise) against the task's optimal return. A history improved if it closed at least 10% of the gap
between its first-window score and the optimum. Histories that did not improve are reported; if fewer
than half improved, generation fails unless `allow_unlearned` is set. The summary goes into the card.
"""

from __future__ import annotations

import hashlib
import json
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console

from offbench.data.store import EpisodeStore
from offbench.envs.benchmarks import BENCHMARKS, Benchmark, get_benchmark, split_tasks
from offbench.errors import OffbenchError
from offbench.generators import register_generator
from offbench.generators.sources import ALGORITHMS, make_config

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
        try:
            make_config(self.algo, self.hyperparameters)
        except (TypeError, ValueError) as exc:
            raise OffbenchError(f"{bench.name}: {exc}") from None

    def to_params(self) -> dict[str, Any]:
        """TOML-ready recipe parameters (defaults that change nothing are left out)."""
        params = {k: v for k, v in asdict(self).items() if k != "benchmark"}
        for key, unset in (("variant", None), ("allow_unlearned", False), ("hyperparameters", {})):
            if params[key] == unset:
                del params[key]
        return params

    def dataset_id(self, seed: int) -> str:
        """A readable id that changes whenever the data would."""
        parts = [self.benchmark, self.algo] + ([self.variant] if self.variant else [])
        parts += [f"t{self.tasks}", f"ho{self.held_out}", f"h{self.histories_per_task}", f"e{self.episodes}"]
        if self.split_seed:
            parts.append(f"split{self.split_seed}")
        if self.hyperparameters:
            parts.append(hashlib.sha256(json.dumps(self.hyperparameters, sort_keys=True).encode()).hexdigest()[:8])
        return "generated/" + "-".join(parts) + f"-s{seed}"


def _integer(params: dict[str, Any], name: str, default: int | None = None) -> int:
    value = params.get(name, default)
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise OffbenchError(f"{name.replace('_', '-')} must be an integer (got {value!r})")
    return int(value)


# ---------------------------------------------------------------------------------------------- rollout
CHUNK_ROWS = 256  # at most this many histories run together, each chunk from its own seed


def run_histories(recipe: HistoryRecipe, seed: int, quiet: bool = True) -> tuple[EpisodeStore, dict[str, Any]]:
    """Generate every learning history in memory; returns the dataset (card filled in) and the learning summary.

    Histories run in chunks of at most CHUNK_ROWS rows (small enough for the learners' tables to stay in
    cache); chunk c draws from `SeedSequence(seed).spawn(...)[c]`, so the data is a function of the recipe
    and the seed alone."""
    if seed < 0:
        raise OffbenchError(f"seed must be non-negative (got {seed})")
    bench = get_benchmark(recipe.benchmark)
    train, held_out = split_tasks(bench, recipe.tasks, recipe.held_out, recipe.split_seed, recipe.variant)
    row_task = np.repeat(np.arange(len(train), dtype=np.int32), recipe.histories_per_task)
    num_chunks = -(-len(row_task) // CHUNK_ROWS)
    bounds = np.linspace(0, len(row_task), num_chunks + 1).astype(int)  # equal chunks
    config = make_config(recipe.algo, recipe.hyperparameters)
    chunks = []
    with _progress(quiet, f"{recipe.benchmark} {recipe.algo}", len(row_task) * recipe.episodes) as advance:
        for lo, hi, chunk_seed in zip(bounds[:-1], bounds[1:], np.random.SeedSequence(seed).spawn(num_chunks)):
            env_rng, algo_rng = (np.random.default_rng(s) for s in chunk_seed.spawn(2))
            env = bench.make_batch([train[i] for i in row_task[lo:hi]], seed=env_rng)
            algo = ALGORITHMS[recipe.algo](env, recipe.episodes, algo_rng, config)
            chunks.append(_rollout(env, algo, recipe.episodes, advance, first_row=lo))

    joined = {key: np.concatenate([chunk[key] for chunk in chunks]) if len(chunks) > 1 else chunks[0][key] for key in chunks[0]}
    lengths = joined.pop("episode_lengths")
    episode_starts = np.concatenate([[0], np.cumsum(lengths)])
    summary = learning_summary(
        np.add.reduceat(joined.pop("scores").astype(np.float64), episode_starts[:-1]).reshape(len(row_task), recipe.episodes),
        joined.pop("optimal_returns"),
        (np.add.reduceat(joined["actions"] == joined["optimal_action"], episode_starts[:-1]) / lengths).reshape(len(row_task), -1),
        score_name=env.score_name,
    )
    store = EpisodeStore(
        observations=joined.pop("observations"),
        actions=joined.pop("actions"),
        rewards=joined.pop("rewards"),
        terminations=joined.pop("terminations"),
        truncations=joined.pop("truncations"),
        episode_starts=episode_starts,
        final_observations=joined.pop("final_observations"),
        columns={"task_id": row_task[joined["history_id"]], **joined},
        observation_space=env.single_observation_space,
        action_space=env.single_action_space,
    )
    store.card = _card(recipe, bench, seed, train, held_out, summary)
    return store, summary


def _rollout(env, algo, num_episodes: int, advance, first_row: int = 0) -> dict[str, np.ndarray]:
    """Run `num_episodes` episodes in every row of `env`; the arrays come back history by history.

    Each step writes only the tabular state, action, reward and end flags into row-major buffers
    (rows, step), sized for the longest possible run (episodes x horizon; pages a shorter run never
    touches are never allocated). Observations, optimal actions and scores are derived from them at the end."""
    rows, capacity = env.num_envs, num_episodes * env.horizon
    buffers = {
        "states": np.empty((rows, capacity), dtype=np.int64),
        "actions": np.empty((rows, capacity), dtype=np.int64),
        "rewards": np.empty((rows, capacity), dtype=np.float32),
        "terminations": np.empty((rows, capacity), dtype=bool),
        "truncations": np.empty((rows, capacity), dtype=bool),
        "recorded": np.empty((rows, capacity), dtype=bool),
    }
    final_states = np.empty((rows, num_episodes), dtype=np.int64)
    finished = np.zeros(rows, dtype=np.int64)  # episodes completed per row
    step_in_episode = np.zeros(rows, dtype=np.int64)
    env.reset()
    states = env.state_index()
    t = 0
    while (active := finished < num_episodes).any():
        actions = algo.act(states, np.minimum(finished, num_episodes - 1) * env.horizon + step_in_episode)
        _, rewards, terminated, truncated = env.step(actions)
        next_states = env.state_index()
        algo.update(states, actions, rewards, next_states, terminated)
        for key, value in (("states", states), ("actions", actions), ("rewards", rewards),
                           ("terminations", terminated), ("truncations", truncated), ("recorded", active)):
            buffers[key][:, t] = value
        done = terminated | truncated
        step_in_episode = np.where(done, 0, step_in_episode + 1)
        if done.any():
            ended = np.flatnonzero(done & active)
            final_states[ended, finished[ended]] = next_states[ended]
            finished[ended] += 1
            env.reset(done)
            next_states = env.state_index()
            advance(len(ended))
        states = next_states
        t += 1

    recorded = buffers.pop("recorded")[:, :t]
    out = {key: buf[:, :t][recorded] for key, buf in buffers.items()}
    row = np.broadcast_to(np.arange(rows)[:, None], recorded.shape)[recorded]
    states = out.pop("states")
    episode_lengths = np.diff(np.concatenate([[0], np.flatnonzero(out["terminations"] | out["truncations"]) + 1]))
    return {
        "observations": env.observations_of(states),
        **out,
        "final_observations": env.observations_of(final_states.reshape(-1)),
        "history_id": (first_row + row).astype(np.int32),
        "episode_in_history": np.repeat(np.tile(np.arange(num_episodes, dtype=np.int32), rows), episode_lengths),
        "optimal_action": env.optimal_actions(states, row).astype(np.int64),
        "episode_lengths": episode_lengths,
        "scores": env.expected_rewards(row, out["actions"], out["rewards"]),
        "optimal_returns": np.asarray(env.optimal_returns, dtype=np.float64),
    }


def learning_summary(scores: np.ndarray, optimal_returns: np.ndarray, optimal_rate: np.ndarray, score_name: str = "episode return") -> dict[str, Any]:
    """First vs last window of every history (scores: (histories, episodes)); see the module docstring."""
    window = max(1, int(scores.shape[1] * LEARNING_WINDOW_FRACTION))
    first, last = scores[:, :window].mean(axis=1), scores[:, -window:].mean(axis=1)
    gap = np.maximum(optimal_returns - first, 0.0)
    improved = (last - first) >= MIN_GAP_CLOSED * gap
    ratio = lambda x: float(np.mean(x / np.where(optimal_returns > 0, optimal_returns, 1.0)))  # noqa: E731
    return {
        "score": score_name,
        "window_episodes": window,
        "histories": len(scores),
        "histories_improved": int(improved.sum()),
        "unimproved_history_ids": np.flatnonzero(~improved).tolist(),
        "first_return": float(first.mean()),
        "last_return": float(last.mean()),
        "optimal_return": float(optimal_returns.mean()),
        "first_fraction_of_optimal": ratio(first),
        "last_fraction_of_optimal": ratio(last),
        "first_optimal_action_rate": float(optimal_rate[:, :window].mean()),
        "last_optimal_action_rate": float(optimal_rate[:, -window:].mean()),
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
    return {
        "id": recipe.dataset_id(seed),
        "description": (
            f"{bench.summary}. {recipe.algo} learning histories: {len(train)} training tasks x "
            f"{recipe.histories_per_task} histories x {recipe.episodes} episodes, {len(held_out)} held-out tasks."
        ),
        "format": "offbench",
        "kind": "learning-history",
        "license": "CC0-1.0",
        "source": {"recipe": {"generator": recipe.benchmark, "seed": seed, "params": recipe.to_params()}},
        "env": {"suite": "offbench", "id": bench.env_id},
        "split": split,
        "learning": summary,
    }


@contextmanager
def _progress(quiet: bool, label: str, total: int):
    """A rich progress bar over episodes; yields `advance(n)` (a no-op when quiet)."""
    if quiet:
        yield lambda n: None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("episodes"), TimeElapsedColumn(), TimeRemainingColumn())
    with Progress(*columns, console=Console(stderr=True)) as bar:
        task = bar.add_task(label, total=total)
        yield lambda n: bar.advance(task, n)


# ---------------------------------------------------------------------------------------------- generators
def generate(benchmark: str, params: dict[str, Any], seed: int, out: Path, quiet: bool = False) -> Path:
    """Registered generator: validate, generate, check learning, then write `out` atomically."""
    recipe = HistoryRecipe.from_params(benchmark, params)
    store, summary = run_histories(recipe, seed, quiet=quiet)
    check_learning(summary, recipe.allow_unlearned)
    return store.save(out)


for _name in BENCHMARKS:
    register_generator(_name)(partial(generate, _name))
