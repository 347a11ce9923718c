"""The in-context RL benchmarks: their environments (Gymnasium ids `offbench/<Name>-v0`), batched forms,
task spaces and seeded train / held-out splits, plus the "offbench" suite that rebuilds any of them from
a dataset card.

A task is a dict of environment keyword arguments (`{"goal": [x, y]}`, `{"key": [x, y], "door": [x, y]}`,
`{"means": [...]}`), so `gymnasium.make(env_id, **task)` and `make_env(card.env, task=task)` build it.

Splits: `split_tasks(benchmark, tasks, held_out, split_seed)` is the definition. Grid worlds take a
seeded permutation of every admissible task; bandits sample arm means (see each module). Held-out tasks
come first in the draw, so the held-out set for a given (held_out, split_seed) does not change with the
number of training tasks. A dataset's `task_id` column is the position in its card's `split.train`
list; held-out task k has id `len(train) + k`.

Validation tasks (`card_split(card, "validation")`) are where variants are chosen, so that the held-out tasks a
board reports stay unseen by every choice. The card's `[split]` says how many and from where: `fresh` draws of a
sampled task space from a seed stream of their own (`validation_rng`), `unused` enumerated tasks that neither the
data nor the held-out set uses, or `train`, a seeded choice of the training tasks (in distribution). They never
change the training or held-out tasks. Fresh and unused validation task k has id `len(train) + len(held_out) + k`;
a training task keeps its id.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Protocol

import gymnasium as gym
import numpy as np

from offbench.envs import bandits, contextual_bandits, darkroom, gridworld, keydoor
from offbench.envs.factory import register_suite
from offbench.errors import OffbenchError


class BatchEnv(Protocol):
    """The batched form every in-context environment has (tabular worlds, bandits, contextual bandits, XLand):
    N tasks, one row each, stepped together; what evaluation in context and the generators' writers use."""

    num_envs: int
    num_actions: int
    horizon: int
    score_name: str  # what expected_rewards() adds up to per episode

    @property  # read-only (each batch has its own kind of space), so a Box or Discrete attribute meets it
    def single_observation_space(self) -> gym.spaces.Space: ...

    @property
    def single_action_space(self) -> gym.spaces.Space: ...

    @property
    def optimal_returns(self) -> np.ndarray: ...  # (N,) exact best return of each row's task; NaN where unknown (XLand)

    def reset(self, mask: np.ndarray | None = None) -> np.ndarray: ...  # reset rows in mask (all if None); all observations

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]: ...  # obs, rewards, terminated, truncated

    def expected_rewards(self, rows: np.ndarray, actions: np.ndarray, rewards: np.ndarray) -> np.ndarray: ...


class TabularBatchEnv(BatchEnv, Protocol):
    """A BatchEnv of a small tabular world (DarkRoomBatch, KeyDoorBatch, BanditBatch): `state_index()` numbers each
    row's state in [0, num_states), and `tables()` gives its exact dynamics, which the history generators step."""

    num_states: int

    def state_index(self) -> np.ndarray: ...

    def optimal_actions(self, states: np.ndarray | None = None, rows: np.ndarray | None = None) -> np.ndarray: ...

    def optimal_action_table(self) -> np.ndarray: ...  # (N * num_states,) optimal action of each (row, state), flat

    def observations_of(self, states: np.ndarray) -> np.ndarray: ...

    def tables(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]: ...  # next state, reward, terminated: each (N, states, actions)


@dataclass(frozen=True)
class Benchmark:
    name: str  # generator and `offbench generate` sub-command name
    env_id: str  # Gymnasium id that dataset cards name in [env]
    env_class: type[gym.Env]
    batch_class: type
    family: ModuleType  # module with sample_split() and task_space_size()
    algos: tuple[str, ...]  # source algorithms that can generate its learning histories; first is the default
    default_episodes: int
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    split_kwargs: dict[str, Any] = field(default_factory=dict)
    variants: tuple[str, ...] = ()  # task distributions (first is the default)
    summary: str = ""

    def task_space_size(self) -> int | None:
        return self.family.task_space_size(**self.env_kwargs)

    def make_batch(
        self, tasks: list[dict], seed: int | np.random.SeedSequence | np.random.Generator | None = None, **overrides: Any
    ) -> BatchEnv:
        """The batched form for `tasks`; `overrides` replace environment keyword arguments (a generator's
        one-step episodes: horizon=1). Its tasks have one arm count (`arm_runs`)."""
        if len(arm_runs(tasks)) > 2:
            counts = sorted({len(task["means"]) for task in tasks})
            raise OffbenchError(
                f"{self.name}: tasks of {', '.join(map(str, counts))} arms cannot share one batch (a batch steps one arm count)"
            )
        return self.batch_class.from_tasks(tasks, seed=seed, **{**self.env_kwargs, **overrides})


def arm_runs(tasks: list[dict]) -> np.ndarray:
    """First task of every run of consecutive tasks with one arm count, then len(tasks): the tasks one batch can
    hold (a mixed-arms bandit split puts each count's tasks in one run, `bandits.sample_split`; tasks without arm
    means, other benchmarks', are one run)."""
    counts = np.array([len(task.get("means", ())) for task in tasks])
    return np.append(np.flatnonzero(np.diff(counts, prepend=-1)), len(tasks))


GRID_ALGOS = ("q-learning", "ad-epsilon", "uniform-states")
BANDIT_ALGOS = ("ucb", "thompson", "ad-epsilon", "dirichlet")

BENCHMARKS: dict[str, Benchmark] = {
    b.name: b
    for b in (
        Benchmark(
            "darkroom",
            "offbench/DarkRoom-v0",
            darkroom.DarkRoomEnv,
            darkroom.DarkRoomBatch,
            darkroom,
            GRID_ALGOS,
            1000,
            summary="Dark Room: 9x9, reward on every step on the hidden goal, 20 steps (AD)",
        ),
        Benchmark(
            "darkroom-permuted",
            "offbench/DarkRoomPermuted-v0",
            darkroom.DarkRoomEnv,
            darkroom.DarkRoomBatch,
            darkroom,
            GRID_ALGOS,
            1000,
            split_kwargs={"permute_actions": "held-out"},
            summary="Dark Room with each held-out task's actions in its own order (Headless-AD); training tasks as darkroom's",
        ),
        Benchmark(
            "darkroom-hard",
            "offbench/DarkRoomHard-v0",
            darkroom.DarkRoomEnv,
            darkroom.DarkRoomBatch,
            darkroom,
            GRID_ALGOS,
            2000,
            env_kwargs={"size": 17, "hard": True},
            summary="Dark Room Hard: 17x17, reward once on reaching the goal, 20 steps (AD)",
        ),
        Benchmark(
            "keydoor",
            "offbench/KeyDoor-v0",
            keydoor.KeyDoorEnv,
            keydoor.KeyDoorBatch,
            keydoor,
            GRID_ALGOS,
            1000,
            summary="Dark Key-to-Door: 9x9, +1 key, +1 door, 50 steps (AD)",
        ),
        Benchmark(
            "bandit",
            "offbench/BernoulliBandit-v0",
            bandits.BanditEnv,
            bandits.BanditBatch,
            bandits,
            BANDIT_ALGOS,
            100,
            env_kwargs={"noise": "bernoulli"},
            split_kwargs={"num_arms": 10},
            variants=bandits.VARIANTS["bernoulli"],
            summary="Bernoulli bandit: 10 arms, 100 pulls, adversarial or uniform split (AD)",
        ),
        Benchmark(
            "bandit-gaussian",
            "offbench/GaussianBandit-v0",
            bandits.BanditEnv,
            bandits.BanditBatch,
            bandits,
            BANDIT_ALGOS,
            500,
            env_kwargs={"noise": "gaussian", "sigma": 0.3},
            split_kwargs={"num_arms": 5},
            variants=bandits.VARIANTS["gaussian"],
            summary="Gaussian bandit: 5 arms, means U(0,1), sigma 0.3, 500 pulls (DPT)",
        ),
    )
}
CONTEXTUAL_ALGOS = ("linucb", "linear-thompson")

# Not tabular, so not in BENCHMARKS (whose every entry offbench.generators.histories generates as a tabular world):
# their histories come from offbench.generators.contextual, registered under the same names.
CONTEXTUAL_BENCHMARKS: dict[str, Benchmark] = {
    b.name: b
    for b in (
        Benchmark(
            "contextual-bandit",
            "offbench/ContextualBandit-v0",
            contextual_bandits.ContextualBanditEnv,
            contextual_bandits.ContextualBanditBatch,
            contextual_bandits,
            CONTEXTUAL_ALGOS,
            500,
            env_kwargs={"sigma": 0.3},
            split_kwargs={"num_arms": 5, "context_dim": 5},
            summary="Linear-Gaussian contextual bandit: 5 arms, contexts in R^5, sigma 0.3, 500 pulls",
        ),
        Benchmark(
            "contextual-bandit-headless",
            "offbench/HeadlessContextualBandit-v0",
            contextual_bandits.ContextualBanditEnv,
            contextual_bandits.ContextualBanditBatch,
            contextual_bandits,
            CONTEXTUAL_ALGOS,
            300,
            env_kwargs={"sigma": 1.0},
            split_kwargs={"num_arms": 20, "context_dim": 2},
            summary="Headless-AD's contextual bandit: 20 arms, contexts in R^2, sigma 1, 300 pulls",
        ),
    )
}
_ALL_BENCHMARKS = {**BENCHMARKS, **CONTEXTUAL_BENCHMARKS}
_BY_ENV_ID = {b.env_id: b for b in _ALL_BENCHMARKS.values()}


def get_benchmark(name: str) -> Benchmark:
    if name not in _ALL_BENCHMARKS:
        raise OffbenchError(f"unknown benchmark '{name}' (known: {', '.join(_ALL_BENCHMARKS)})")
    return _ALL_BENCHMARKS[name]


def benchmark_for_env(env_id: str) -> Benchmark:
    if env_id not in _BY_ENV_ID:
        raise OffbenchError(f"unknown offbench environment '{env_id}' (known: {', '.join(_BY_ENV_ID)})")
    return _BY_ENV_ID[env_id]


def split_tasks(
    benchmark: Benchmark,
    num_tasks: int,
    num_held_out: int,
    split_seed: int = 0,
    variant: str | None = None,
    num_arms: int | list[int] | None = None,
    held_out_arms: int | None = None,
):
    """(train, held_out) task lists: the benchmark's seeded split (see the module docstring). A tabular bandit's
    arm count may be set: `num_arms` one count, or a list of counts for the training tasks (consecutive runs of
    tasks, one per count), `held_out_arms` the held-out tasks' (`bandits.sample_split`)."""
    return _sample(benchmark, num_tasks, num_held_out, np.random.default_rng(split_seed), variant, num_arms, held_out_arms)


def _sample(
    benchmark: Benchmark,
    num_tasks: int,
    num_held_out: int,
    rng: np.random.Generator,
    variant: str | None,
    num_arms: int | list[int] | None,
    held_out_arms: int | None,
):
    options = {**benchmark.env_kwargs, **benchmark.split_kwargs}
    if benchmark.variants:
        options["variant"] = variant or benchmark.variants[0]
    arms = {name: value for name, value in (("num_arms", num_arms), ("held_out_arms", held_out_arms)) if value is not None}
    if arms and benchmark.family is not bandits:
        raise OffbenchError(f"{benchmark.name}: {' and '.join(arms)} apply to the multi-armed bandits only")
    return benchmark.family.sample_split(num_tasks, num_held_out, rng, **{**options, **arms})


def card_tasks(card) -> tuple[list[dict], list[dict]]:
    """(train, held_out) tasks of a learning-history dataset card (a DatasetCard or the dict in a file):
    the lists written at generation, or, for a recipe card not yet generated, the split its recipe implies."""
    data = card.to_dict() if hasattr(card, "to_dict") else dict(card)
    if data.get("env", {}).get("suite") == "xland":  # tasks are rulesets: the data file's, and unused ones held out
        from offbench.envs.xland import xland_card_tasks

        return xland_card_tasks(data)
    split = data.get("split", {})
    if "train" in split and "held_out" in split:
        return list(split["train"]), list(split["held_out"])
    recipe = data.get("source", {}).get("recipe", {})
    params = recipe.get("params", {})
    benchmark = get_benchmark(recipe.get("generator", ""))
    if "tasks" not in params or "held_out" not in params:
        raise OffbenchError(f"card {data.get('id', '?')}: neither split.train / split.held_out nor a recipe with tasks and held_out")
    return split_tasks(
        benchmark,
        int(params["tasks"]),
        int(params["held_out"]),
        int(params.get("split_seed", 0)),
        params.get("variant"),
        params.get("num_arms"),
        params.get("held_out_arms"),
    )


VALIDATION_STREAM = 1  # validation tasks draw from SeedSequence(split seed, spawn_key=(1,)); the split itself uses spawn_key ()


def validation_rng(split_seed: int) -> np.random.Generator:
    """The validation tasks' own seed stream: the split seed's first spawned child, which no training, held-out or
    evaluation draw uses (those seed `default_rng(split_seed)` itself)."""
    return np.random.default_rng(np.random.SeedSequence(split_seed, spawn_key=(VALIDATION_STREAM,)))


def card_split(card, which: str) -> tuple[list[dict], list[int]]:
    """(tasks, task ids) of one split of a learning-history card: `train`, `held-out` or `validation`."""
    data = card.to_dict() if hasattr(card, "to_dict") else dict(card)
    if which == "validation":
        _check_validation(data)
    train, held_out = card_tasks(data)
    if which == "train":
        return train, list(range(len(train)))
    if which == "held-out":
        return held_out, list(range(len(train), len(train) + len(held_out)))
    return _validation(data, train, held_out)


def _check_validation(data: dict[str, Any]) -> None:
    """A card's [split] declares validation tasks and they can be made (before its other tasks are computed)."""
    split, where = data.get("split", {}), f"card {data.get('id', '?')}"
    if split.get("validation") is None or split.get("validation_from") is None:
        raise OffbenchError(f"{where}: its [split] declares no validation tasks (validation and validation_from, docs/in-context-rl.md)")
    if data.get("env", {}).get("suite") == "xland" or not data.get("source", {}).get("recipe"):
        raise OffbenchError(f"{where}: validation tasks are made from a generator recipe, and this card has none")


def _validation(data: dict[str, Any], train: list[dict], held_out: list[dict]) -> tuple[list[dict], list[int]]:
    """The card's validation tasks, made by the rule its [split] names (see the module docstring)."""
    split, recipe = data["split"], data["source"]["recipe"]
    where = f"card {data.get('id', '?')}"
    count, source = int(split["validation"]), split["validation_from"]
    params = recipe.get("params", {})
    benchmark = get_benchmark(recipe.get("generator", ""))
    rng = validation_rng(int(params.get("split_seed", split.get("seed", 0))))
    first_new = len(train) + len(held_out)
    space = benchmark.task_space_size()
    if source == "fresh":
        if space is not None:
            raise OffbenchError(f"{where}: {benchmark.name} enumerates {space} tasks, so there are no fresh ones: use unused or train")
        # the held-out draws of a split with no training tasks: the held-out task distribution (and arm count)
        _, fresh = _sample(benchmark, count, count, rng, params.get("variant"), params.get("num_arms"), params.get("held_out_arms"))
        return fresh, list(range(first_new, first_new + count))
    if source == "unused":
        if space is None:
            raise OffbenchError(f"{where}: {benchmark.name}'s task space is sampled, not enumerated: use fresh")
        used = {_task_key(task) for task in train + held_out}
        pool = [task for task in split_tasks(benchmark, space, 0)[0] if _task_key(task) not in used]
        chosen = _choose(pool, count, rng, f"{where}: validation = {count} unused tasks asked, but {benchmark.name} has {len(pool)}")
        return [pool[i] for i in chosen], list(range(first_new, first_new + count))
    chosen = _choose(train, count, rng, f"{where}: validation = {count} training tasks asked, but the split has {len(train)}")
    return [train[i] for i in chosen], [int(i) for i in chosen]


def _choose(pool: list[dict], count: int, rng: np.random.Generator, too_few: str) -> np.ndarray:
    """`count` positions of `pool` drawn without replacement, in pool order."""
    if count > len(pool):
        raise OffbenchError(too_few)
    return np.sort(rng.choice(len(pool), size=count, replace=False))


def _task_key(task: dict) -> str:
    return json.dumps(task, sort_keys=True)


def make_batch_env(env_spec: dict[str, Any], tasks: list[dict], seed: int | None = None) -> BatchEnv:
    """The batched form of a card's [env] for a list of tasks (what evaluation steps)."""
    if env_spec.get("suite") == "xland":
        from offbench.envs.xland import make_xland_batch

        return make_xland_batch(env_spec, tasks, seed=seed)
    return benchmark_for_env(env_spec["id"]).make_batch(tasks, seed=seed)


def tabular(env: BatchEnv, needs: str) -> TabularBatchEnv:
    """`env` as the tabular world that `needs` (what asks, as the start of a sentence) requires; one line for a batch
    without tables of states (a contextual bandit, XLand)."""
    if not isinstance(env, (bandits.BanditBatch, gridworld.GridBatch)):
        raise OffbenchError(
            f"{needs} a tabular environment (Dark Room, Key-to-Door, a bandit); {type(env).__name__} has no table of states"
        )
    return env


@register_suite("offbench")
def _make_offbench(env_id: str, task: dict | None = None, **kwargs: Any) -> gym.Env:
    benchmark = benchmark_for_env(env_id)
    if not isinstance(task, dict):
        raise OffbenchError(f"{env_id} needs a task: a dict of its parameters, e.g. one entry of the card's split.train")
    try:
        return gym.make(env_id, **{**task, **kwargs})
    except (TypeError, ValueError) as exc:
        raise OffbenchError(f"cannot make {benchmark.env_id} for task {task}: {exc}") from None


def register_gymnasium_ids() -> None:
    """Register every benchmark's Gymnasium id (idempotent). No TimeLimit wrapper: each environment
    truncates at its own horizon, exactly as its batched form does."""
    for benchmark in _ALL_BENCHMARKS.values():
        if benchmark.env_id not in gym.registry:
            gym.register(
                benchmark.env_id,
                entry_point=f"{benchmark.env_class.__module__}:{benchmark.env_class.__name__}",
                kwargs=dict(benchmark.env_kwargs),
            )
