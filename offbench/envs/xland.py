"""XLand-MiniGrid rulesets as a batched in-context benchmark (suite "xland"), backed by `xminigrid` (JAX, on CPU).

A task is one ruleset of an xminigrid benchmark (`{"ruleset": 123}`); `XLandBatch` steps N of them together,
one row each, under the `BatchEnv` protocol of offbench.envs.benchmarks:

    reset(mask) -> observations (N, 5, 5, 2) uint8      rows in mask get a fresh episode (all if None)
    step(actions) -> observations, rewards, terminated, truncated
    optimal_returns: (N,) NaN                            the best return of a ruleset is not known
    expected_rewards(rows, actions, rewards) -> rewards  the environment is deterministic given its state

Not a `TabularBatchEnv` (no num_states, state_index, optimal_actions, observations_of: a world too large for tables).
The optimum is unknown because it needs planning over the ruleset's rules; an upper bound is 1 per episode
(reward 1 - 0.9 * steps / max_steps on reaching the goal, 0 otherwise), `reward_ceiling` says so.

Terminated: the goal was reached (xminigrid's discount 0). Truncated: the time limit, `max_steps` =
3 * height * width unless the card says otherwise. Rows do not reset by themselves: the caller resets the
rows that ended (the in-context protocol does), so a row's next episode starts from a new layout drawn from
that row's own key sequence (seeded per row: the same seed gives the same layouts).

Rulesets: the XLand datasets index xminigrid's benchmarks as xminigrid <= 0.9.1 ships them (`trivial-1m`
-> trivial_1m_v2, `medium-1m` -> medium_1m_v2; the authors' requirements pin xminigrid~=0.8.0). xminigrid
0.9.2 renamed them and regenerated the files (v3), so a ruleset id would pick another ruleset there: this
module fetches the v2 file itself, into $OFFBENCH_HOME/xland/ (sha256 recorded on first download), and reads
it with an unpickler that admits only NumPy and JAX array reconstruction (the files are bz2 pickles).

Held-out split (the authors' evaluate_in_context.py): rulesets of the benchmark that no task of the training
file uses; `held_out_rulesets` draws a seeded subset of them.
"""

from __future__ import annotations

import bz2
import functools
import pickle
from pathlib import Path
from typing import Any, Callable

import gymnasium as gym
import numpy as np

from offbench.envs.factory import register_suite
from offbench.errors import OffbenchError, require

BENCHMARK_FILES = {  # xminigrid <= 0.9.1, benchmarks.NAME2HFFILENAME
    "trivial-1m": "trivial_1m_v2",
    "small-1m": "small_1m_v2",
    "medium-1m": "medium_1m_v2",
    "medium-3m": "medium_3m_v2",
    "high-1m": "high_1m_v2",
    "high-3m": "high_3m_v2",
}
RULESETS_URL = "https://huggingface.co/datasets/Howuhh/xland_minigrid/resolve/main/{file}"
RULESET_KEYS = ("goals", "rules", "init_tiles", "num_rules")
REWARD_CEILING = 1.0
LAST_STEP = 2  # xminigrid.types.StepType.LAST
_ALLOWED_GLOBALS = {
    ("numpy", "ndarray"),
    ("numpy", "dtype"),
    ("numpy.core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "_reconstruct"),
    ("numpy.core.multiarray", "scalar"),
    ("numpy._core.multiarray", "scalar"),
    ("jax._src.array", "_reconstruct_array"),
}


class _ArraysOnly(pickle.Unpickler):
    """Unpickles dicts of NumPy / JAX arrays and nothing else (no arbitrary callables)."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in _ALLOWED_GLOBALS:
            raise pickle.UnpicklingError(f"{module}.{name} is not an array type")
        if module.startswith("jax"):
            require("jax", "xland")
        return super().find_class(module, name)


def read_rulesets(path: str | Path) -> dict[str, np.ndarray]:
    """A benchmark file (bz2 pickle of goals, rules, init_tiles, num_rules) as NumPy arrays, read once per process
    while the file stays the same (a million rulesets take seconds to inflate; every evaluation needs them)."""
    path = Path(path)
    try:
        stat = path.stat()
    except OSError as exc:
        raise OffbenchError(f"{path}: not an xminigrid benchmark file ({exc.strerror})") from None
    return _read_rulesets(str(path.resolve()), stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=2)
def _read_rulesets(resolved: str, size: int, mtime_ns: int) -> dict[str, np.ndarray]:
    path = Path(resolved)
    try:
        with bz2.open(path, "rb") as handle:
            data = _ArraysOnly(handle).load()
    except (OSError, EOFError, pickle.UnpicklingError, ValueError) as exc:
        raise OffbenchError(f"{path}: not an xminigrid benchmark file ({exc})") from None
    if not isinstance(data, dict) or any(key not in data for key in RULESET_KEYS):
        raise OffbenchError(f"{path}: an xminigrid benchmark file holds {', '.join(RULESET_KEYS)}")
    arrays = {key: np.asarray(data[key]) for key in RULESET_KEYS}
    if len({len(a) for a in arrays.values()}) != 1:
        raise OffbenchError(f"{path}: goals, rules, init_tiles and num_rules differ in length")
    return arrays


def write_rulesets(path: str | Path, rulesets: dict[str, np.ndarray]) -> Path:
    """Write a benchmark file in xminigrid's format (for tests and hand-made rulesets), atomically."""
    from offbench.utils import atomic_path

    with atomic_path(Path(path)) as tmp, bz2.open(tmp, "wb") as handle:
        pickle.dump({key: np.asarray(rulesets[key]) for key in RULESET_KEYS}, handle, protocol=4)
    return Path(path)


def rulesets_path(benchmark_id: str, mirror: str | None = None) -> Path:
    """The local benchmark file of `benchmark_id`, fetched on first use."""
    from offbench.paths import offbench_home

    if benchmark_id not in BENCHMARK_FILES:
        raise OffbenchError(f"unknown xminigrid benchmark '{benchmark_id}' (known: {', '.join(BENCHMARK_FILES)})")
    folder = offbench_home() / "xland"
    path = folder / BENCHMARK_FILES[benchmark_id]
    if path.is_file():  # a file gets its final name only once its download was verified or recorded
        return path
    import requests
    from rich.progress import Progress

    from offbench.data.download import RemoteFile, fetch_file, record_sums

    folder.mkdir(parents=True, exist_ok=True)
    remote = RemoteFile(RULESETS_URL.format(file=BENCHMARK_FILES[benchmark_id]), BENCHMARK_FILES[benchmark_id])
    with requests.Session() as session, Progress(disable=True) as progress:
        path, unrecorded = fetch_file(session, remote, folder, mirror, progress)
    if unrecorded is not None:  # a first download is trusted, and its sha256 recorded, only once it reads as rulesets
        try:
            read_rulesets(path)
        except OffbenchError:
            path.unlink()
            raise
        record_sums(folder, {remote.relpath: unrecorded})
    return path


def held_out_rulesets(num_rulesets: int, train_rulesets: np.ndarray, count: int, seed: int = 0) -> np.ndarray:
    """`count` rulesets of the benchmark that no training task uses, drawn without replacement from `seed`."""
    pool = np.setdiff1d(np.arange(num_rulesets), np.asarray(train_rulesets))
    if count > len(pool):
        raise OffbenchError(f"{count} held-out rulesets asked, but only {len(pool)} of {num_rulesets} are unused by the training data")
    return np.sort(np.random.default_rng(seed).choice(pool, size=count, replace=False))


@functools.lru_cache(maxsize=8)
def _compiled(env_id: str, max_steps: int | None):
    """(default params, reset_rows, batched step) of an environment, jit-compiled once per process and shape.

    reset_rows(params, keys, mask, old) -> (keys, timestep): every row's key splits into its next key and this
    reset's key; rows in `mask` take the fresh episode and the next key, the others keep theirs and `old`.
    Two compiled functions (the reset, and the choice of rows), not a dispatch per operation and leaf, each of
    which JAX would compile on its own."""
    import jax
    from xminigrid.registration import make

    try:
        env, params = make(env_id, **({} if max_steps is None else {"max_steps": max_steps}))
    except ValueError as exc:
        raise OffbenchError(f"cannot make XLand-MiniGrid environment '{env_id}': {str(exc).splitlines()[0]}") from None
    env_reset = jax.vmap(env.reset, in_axes=(0, 0))

    @jax.jit
    def fresh(params, keys):
        split = jax.vmap(jax.random.split)(keys)
        return split[:, 0], env_reset(params, split[:, 1])

    @jax.jit
    def choose(mask, new, old):
        pick = lambda a, b: jax.numpy.where(mask.reshape((-1,) + (1,) * (a.ndim - 1)), a, b)  # noqa: E731
        return jax.tree_util.tree_map(pick, new, old)

    def reset_rows(params, keys, mask, old):
        next_keys, timestep = fresh(params, keys)
        return (next_keys, timestep) if old is None else choose(mask, (next_keys, timestep), (keys, old))

    return params, reset_rows, jax.jit(jax.vmap(env.step, in_axes=(0, 0, 0)))


class XLandBatch:
    """N XLand-MiniGrid rulesets stepped together, one row each (jit-compiled, vmapped over rows)."""

    num_actions = 6
    score_name = "return"
    reward_ceiling = REWARD_CEILING

    def __init__(
        self, env_id: str, rulesets: dict[str, np.ndarray], ruleset_ids: list[int] | np.ndarray, seed: int = 0, max_steps: int | None = None
    ):
        jax = require("jax", "xland")
        require("xminigrid", "xland")
        from xminigrid.types import RuleSet

        self.ruleset_ids = np.asarray(ruleset_ids, dtype=np.int64)
        if self.ruleset_ids.ndim != 1 or not len(self.ruleset_ids):
            raise OffbenchError("XLandBatch needs at least one ruleset id")
        total = len(rulesets["goals"])
        if self.ruleset_ids.min() < 0 or self.ruleset_ids.max() >= total:
            raise OffbenchError(f"ruleset ids must lie in 0..{total - 1} (the benchmark has {total}), got {self.ruleset_ids.max()}")
        params, self._reset_rows, self._step = _compiled(env_id, None if max_steps is None else int(max_steps))
        # rulesets of one benchmark are padded to the same shapes, so they stack into one batched RuleSet
        self.params = params.replace(
            ruleset=RuleSet(*(jax.numpy.asarray(rulesets[key][self.ruleset_ids]) for key in ("goals", "rules", "init_tiles")))
        )
        self.env_id = env_id
        self.num_envs = len(self.ruleset_ids)
        self.single_observation_space = gym.spaces.Box(0, 255, (5, 5, 2), np.uint8)  # (tile, colour) codes
        self.single_action_space = gym.spaces.Discrete(self.num_actions)
        assert self.params.max_steps is not None  # xminigrid's default params always set it (its own step() asserts so)
        self.horizon = int(self.params.max_steps)
        self.optimal_returns = np.full(self.num_envs, np.nan)
        self._keys = jax.random.split(jax.random.PRNGKey(int(seed)), self.num_envs)
        self._timestep = None

    def reset(self, mask: np.ndarray | None = None) -> np.ndarray:
        every = mask is None or self._timestep is None
        mask = np.ones(self.num_envs, bool) if every else np.asarray(mask, bool)
        self._keys, self._timestep = self._reset_rows(self.params, self._keys, mask, None if every else self._timestep)
        return np.asarray(self._timestep.observation)

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        if self._timestep is None:
            raise OffbenchError("XLandBatch.step before reset")
        actions = np.asarray(actions)
        if actions.shape != (self.num_envs,) or actions.min() < 0 or actions.max() >= self.num_actions:
            raise OffbenchError(f"actions must be {self.num_envs} integers in 0..{self.num_actions - 1}")
        self._timestep = self._step(self.params, self._timestep, np.asarray(actions, dtype=np.int32))
        last = np.asarray(self._timestep.step_type) == LAST_STEP
        terminated = last & (np.asarray(self._timestep.discount) == 0.0)
        return np.asarray(self._timestep.observation), np.asarray(self._timestep.reward, dtype=np.float32), terminated, last & ~terminated

    def expected_rewards(self, rows: np.ndarray, actions: np.ndarray, rewards: np.ndarray) -> np.ndarray:
        return np.asarray(rewards, dtype=np.float64)


def make_xland_batch(
    env_spec: dict[str, Any], tasks: list[dict], seed: int | None = None, rulesets: dict[str, np.ndarray] | None = None
) -> XLandBatch:
    """The batched form of a card's [env] (suite "xland") for tasks `[{"ruleset": id}, ...]`."""
    kwargs = dict(env_spec.get("kwargs", {}))
    if rulesets is None:
        rulesets = read_rulesets(kwargs.get("rulesets_file") or rulesets_path(str(kwargs.get("benchmark", ""))))
    ids = [int(task["ruleset"]) for task in tasks]
    return XLandBatch(env_spec["id"], rulesets, ids, seed=seed or 0, max_steps=kwargs.get("max_steps"))


class XLandEnv(gym.Env):
    """One ruleset as a Gymnasium environment (what `make_env(card.env, task)` gives): a one-row XLandBatch from
    `batch_factory(seed)`, whose time limit (the card's max_steps) is the episode's."""

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, batch_factory: Callable[[int | None], XLandBatch]):
        self._factory = batch_factory
        self._batch: XLandBatch | None = None
        self.observation_space = gym.spaces.Box(0, 255, (5, 5, 2), np.uint8)
        self.action_space = gym.spaces.Discrete(XLandBatch.num_actions)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        if self._batch is None or seed is not None:
            self._batch = self._factory(seed)
        return self._batch.reset()[0], {}

    def step(self, action):
        if self._batch is None:
            raise OffbenchError("XLandEnv.step before reset")
        obs, reward, terminated, truncated = self._batch.step(np.array([int(action)]))
        return obs[0], float(reward[0]), bool(terminated[0]), bool(truncated[0]), {}


@register_suite("xland")
def _make_xland(env_id: str, task: Any = None, **kwargs: Any) -> gym.Env:
    ruleset = int(task["ruleset"]) if isinstance(task, dict) else int(task or 0)
    spec = {"id": env_id, "kwargs": kwargs}
    return XLandEnv(lambda seed: make_xland_batch(spec, [{"ruleset": ruleset}], seed=seed))


def xland_split(
    env_spec: dict[str, Any], train_rulesets: np.ndarray, held_out: int, seed: int = 0, rulesets: dict[str, np.ndarray] | None = None
) -> tuple[list[dict], list[dict]]:
    """(train, held-out) tasks `[{"ruleset": id}, ...]`: the data's rulesets (an XLand file's `ruleset_ids`)
    and `held_out` rulesets of the card's benchmark that the data never uses (`held_out_rulesets`)."""
    kwargs = env_spec.get("kwargs", {})
    if rulesets is None:
        rulesets = read_rulesets(kwargs.get("rulesets_file") or rulesets_path(str(kwargs.get("benchmark", ""))))
    train = [{"ruleset": int(r)} for r in np.asarray(train_rulesets)]
    unused = held_out_rulesets(len(rulesets["goals"]), np.asarray(train_rulesets), held_out, seed)
    return train, [{"ruleset": int(r)} for r in unused]


def xland_card_tasks(card: dict[str, Any]) -> tuple[list[dict], list[dict]]:
    """(train, held-out) tasks of an XLand card: the rulesets of its data file (opened in place, fetched on
    first use) and `split.held_out` rulesets of the benchmark it never uses, drawn with `split.seed`."""
    from offbench.data.resolve import open_dataset
    from offbench.data.xland.histories import XLandHistories

    split = card.get("split", {})
    if "held_out" not in split:
        raise OffbenchError(f"card {card.get('id', '?')}: an XLand card's [split] needs held_out (how many unused rulesets to evaluate on)")
    data = open_dataset(str(card["id"])).store
    if not isinstance(data, XLandHistories):
        raise OffbenchError(f"card {card['id']}: an XLand card's data is an XLand histories file, got a {type(data).__name__}")
    return xland_split(card["env"], data.ruleset_ids, int(split["held_out"]), int(split.get("seed", 0)))
