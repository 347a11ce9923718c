"""Sweep specs: a TOML file that expands to runs with stable names.

    name = "pendulum-scripted"          # names the sweep (default: the file's stem)
    runs = "runs/leaderboards/pendulum-scripted"  # run directories, from the working directory (default runs/sweeps/<name>)
    benchmark = "pendulum-scripted"     # optional: its datasets (default) and evaluation protocol
    baselines = ["bc", "iql"]
    datasets = ["pendulum-scripted"]    # ids or paths; required without `benchmark`
    seeds = [0, 1, 2]
    config = "bc-small.toml"            # optional --config file, relative to the spec
    retries = 2                         # a failing run is tried again this many times (default 2)
    [set]                               # config values for every run
    eval_episodes = 10
    [grid]                              # crossed: every combination
    batch_size = [64, 256]
    [random]                            # drawn: `samples` value sets from `seed`, crossed with the grid
    samples = 4
    seed = 0
    lr = { log_uniform = [1e-5, 1e-3] } # also uniform = [lo, hi], int_uniform = [lo, hi], choice = [...]

A run is named `<baseline>-<dataset>-s<seed>`, with `-<16 hex digits>` before `-s<seed>` when the grid or
the random draws give it values of its own (a digest of those values), so re-running a spec, or a spec
with more seeds or grid points, finds the runs it already has. (8 digits collided: 119 times in a 1000 x 1000
grid, and already in the 2 x 2 grid hidden_dim = [81, 91], batch_size = [80, 220].)

A spec that expands to more than `MAX_RUNS` runs (or draws more than `MAX_RUNS` random samples) is refused
when it is read, before anything is drawn or planned; `load_sweep(path, max_runs=...)` (`offbench sweep
--max-runs N`) raises the limit.
"""

from __future__ import annotations

import hashlib
import itertools
from collections import Counter
import json
import math
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import tomli_w

from offbench.errors import OffbenchError
from offbench.utils import read_text
from offbench.training.config import dataset_slug

# Protocol keys of a benchmark.toml [evaluation] table -> the trainer's config fields (TrainConfig); an
# in-context evaluation runs `eval_episodes` consecutive episodes (run.json's in_context_episodes).
PROTOCOL_TO_CONFIG = {"episodes": "eval_episodes", "in_context_episodes": "eval_episodes", "every_steps": "eval_every", "steps": "steps"}
DISTRIBUTIONS = ("choice", "uniform", "log_uniform", "int_uniform")
TOP_KEYS = {"name", "runs", "benchmark", "baselines", "datasets", "seeds", "config", "retries", "set", "grid", "random"}
MAX_RUNS = 5000  # runs a spec may expand to (and random samples it may draw) unless raised: `offbench sweep --max-runs`
DIGEST_HEX = 16  # hex digits of a variant's digest in run names: 64 bits, ~3e-8 odds of any collision in 10^6 variants


@dataclass(frozen=True)
class PlannedRun:
    """One run of a sweep: what `offbench run baseline` is given, and the name it gets."""

    name: str
    baseline: str
    dataset: str
    seed: int
    values: dict[str, Any]  # config values from [set], the benchmark's protocol, the grid and the draws
    variant: str  # digest of the grid / random values ("" when the sweep varies none)
    config_file: Path | None = None

    def overrides(self) -> list[str]:
        """The values as `--set key=value` arguments (values written as TOML, read back exactly)."""
        return [f"{key}={toml_value(value)}" for key, value in sorted(self.values.items())]


@dataclass(frozen=True)
class SweepSpec:
    path: Path
    name: str
    baselines: tuple[str, ...]
    datasets: tuple[str, ...]
    seeds: tuple[int, ...]
    benchmark: str | None = None
    runs: Path | None = None
    config_file: Path | None = None
    retries: int = 2
    fixed: dict[str, Any] = field(default_factory=dict)
    protocol: dict[str, dict[str, Any]] = field(default_factory=dict)  # baseline -> config values its benchmark pins
    grid: dict[str, list[Any]] = field(default_factory=dict)
    random: dict[str, Any] = field(default_factory=dict)

    def run_count(self) -> int:
        """How many runs `expand` gives, computed without expanding."""
        return len(self.baselines) * len(self.datasets) * math.prod(len(v) for v in self.grid.values()) \
            * (self.random["samples"] if self.random else 1) * len(self.seeds)

    def variants(self) -> list[dict[str, Any]]:
        """Every grid point crossed with every random draw (one empty variant when there are neither)."""
        keys = sorted(self.grid)
        points = [dict(zip(keys, combo)) for combo in itertools.product(*(self.grid[k] for k in keys))]
        draws = draw_random(self.random, self.path)
        return [{**point, **draw} for point in points for draw in draws]

    def expand(self) -> list[PlannedRun]:
        """Baselines x datasets x variants x seeds, in that nesting order."""
        runs = []
        for baseline, dataset, variant, seed in itertools.product(self.baselines, self.datasets, self.variants(), self.seeds):
            digest = variant_digest(variant)
            stem = f"{baseline}-{dataset_slug(str(dataset))}"
            name = f"{stem}-{digest}-s{seed}" if digest else f"{stem}-s{seed}"
            if len(name) > 128:  # what `offbench run baseline --name` takes (safe_component): an error now, not in every run
                raise OffbenchError(f"{self.path}: run name {name} is longer than 128 characters (shorten the dataset's name or path)")
            values = {**self.fixed, **self.protocol.get(baseline, {}), **variant}
            runs.append(PlannedRun(name, baseline, dataset, seed, values, digest, self.config_file))
        twice = sorted(name for name, count in Counter(run.name for run in runs).items() if count > 1)  # linear
        if twice:
            raise OffbenchError(f"{self.path}: several runs would be named {twice[0]} (datasets or values repeated?)")
        return runs


def toml_value(value: Any) -> str:
    return tomli_w.dumps({"v": value}).strip()[len("v = "):]


def variant_digest(values: dict[str, Any]) -> str:
    if not values:
        return ""
    return hashlib.sha256(json.dumps(values, sort_keys=True).encode()).hexdigest()[:DIGEST_HEX]


def draw_random(table: dict[str, Any], path: Path) -> list[dict[str, Any]]:
    """`samples` value sets drawn from one generator seeded with `seed`, keys in sorted order."""
    if not table:
        return [{}]
    rng = np.random.default_rng(table["seed"])
    params = {k: v for k, v in table.items() if k not in ("samples", "seed")}
    draws = []
    for _ in range(table["samples"]):
        draw = {}
        for key in sorted(params):
            (kind, args), = params[key].items()
            if kind == "choice":
                draw[key] = args[int(rng.integers(len(args)))]
            elif kind == "uniform":
                draw[key] = float(rng.uniform(args[0], args[1]))
            elif kind == "log_uniform":
                draw[key] = float(math.exp(rng.uniform(math.log(args[0]), math.log(args[1]))))
            else:  # int_uniform, bounds included
                draw[key] = int(rng.integers(args[0], args[1] + 1))
        draws.append(draw)
    return draws


# ---------------------------------------------------------------------------------------------- reading
def _fail(path: Path, message: str) -> OffbenchError:
    return OffbenchError(f"{path}: {message}")


def _string_list(data: dict[str, Any], key: str, path: Path) -> tuple[str, ...]:
    value = data.get(key)
    if not isinstance(value, list) or not value or not all(isinstance(v, str) and v for v in value):
        raise _fail(path, f"'{key}' must be a non-empty list of strings")
    if len(set(value)) != len(value):
        raise _fail(path, f"'{key}' lists a value twice")
    return tuple(value)


def _check_random(table: Any, path: Path, max_runs: int) -> dict[str, Any]:
    if not isinstance(table, dict):
        raise _fail(path, "[random] must be a table")
    if not table:
        return {}
    for key in ("samples", "seed"):
        if not isinstance(table.get(key), int) or isinstance(table.get(key), bool) or table[key] < (1 if key == "samples" else 0):
            raise _fail(path, f"[random] needs '{key}', an integer{' of at least 1' if key == 'samples' else ' of at least 0'}")
    if table["samples"] > max_runs:
        raise _fail(path, f"[random] samples = {table['samples']:,} is more than the limit of {max_runs:,} runs; "
                          f"draw fewer, or raise the limit (offbench sweep --max-runs {table['samples']})")
    for key, spec in table.items():
        if key in ("samples", "seed"):
            continue
        if not isinstance(spec, dict) or len(spec) != 1 or next(iter(spec)) not in DISTRIBUTIONS:
            raise _fail(path, f"[random] '{key}' must be one of {{ {' | '.join(f'{d} = [...]' for d in DISTRIBUTIONS)} }}")
        (kind, args), = spec.items()
        if not isinstance(args, list) or not args:
            raise _fail(path, f"[random] '{key}': {kind} needs a non-empty list")
        if kind != "choice":
            numbers = len(args) == 2 and all(isinstance(a, (int, float)) and not isinstance(a, bool) for a in args)
            if not numbers or not args[0] <= args[1] or (kind == "log_uniform" and args[0] <= 0):
                raise _fail(path, f"[random] '{key}': {kind} needs [low, high] with low <= high" + (", both > 0" if kind == "log_uniform" else ""))
            if kind == "int_uniform" and not all(isinstance(a, int) for a in args):
                raise _fail(path, f"[random] '{key}': int_uniform needs integer bounds")
    return table


def _protocol_values(pins: dict[str, Any], fixed: dict[str, Any], where: str, path: Path) -> dict[str, Any]:
    """The config values a benchmark's protocol pins; one the spec's [set] contradicts is an error."""
    values: dict[str, Any] = {}
    for key, config_key in PROTOCOL_TO_CONFIG.items():
        if key not in pins:
            continue
        for other, value in ((f"[set] {config_key}", fixed.get(config_key)), (f"{where}'s {config_key}", values.get(config_key))):
            if value is not None and value != pins[key]:
                raise _fail(path, f"{other} = {value!r} contradicts {where} ({key} = {pins[key]!r})")
        values[config_key] = pins[key]
    return values


def _check_size(spec: SweepSpec, max_runs: int) -> None:
    """Refuse a spec of more than `max_runs` runs in one line, counted without drawing or expanding anything."""
    count = spec.run_count()
    if count <= max_runs:
        return

    def many(n: int, what: str) -> str:
        return f"{n:,} {what}{'' if n == 1 else 's'}"

    factors = [many(len(spec.baselines), "baseline"), many(len(spec.datasets), "dataset")]
    if spec.grid:
        factors.append(many(math.prod(len(v) for v in spec.grid.values()), "grid point"))
    if spec.random:
        factors.append(many(spec.random["samples"], "random sample"))
    factors.append(many(len(spec.seeds), "seed"))
    raise _fail(spec.path, f"expands to {count:,} runs ({' x '.join(factors)}), more than the limit of {max_runs:,}; "
                           f"sweep fewer values, or raise the limit (offbench sweep --max-runs {count})")


def load_sweep(path: str | Path, max_runs: int = MAX_RUNS) -> SweepSpec:
    """Read and check a sweep spec; every problem is a one-line error naming the file. A spec of more than
    `max_runs` runs is refused here, before anything is drawn or planned."""
    path = Path(path)
    try:
        data = tomllib.loads(read_text(path, "sweep spec"))
    except tomllib.TOMLDecodeError as exc:
        raise OffbenchError(f"{path}: malformed TOML ({exc})") from None
    unknown = sorted(set(data) - TOP_KEYS)
    if unknown:
        raise _fail(path, f"unknown key '{unknown[0]}' (known: {', '.join(sorted(TOP_KEYS))})")
    name = data.get("name", path.stem)
    if not isinstance(name, str) or not name or "/" in name or name.startswith("."):
        raise _fail(path, "'name' must be a plain folder name")

    fixed = data.get("set", {})
    if not isinstance(fixed, dict):
        raise _fail(path, "[set] must be a table of config values")
    baselines = _string_list(data, "baselines", path)
    benchmark = data.get("benchmark")
    datasets: tuple[str, ...]
    protocol: dict[str, dict[str, Any]] = {}
    if benchmark is not None:
        from offbench.leaderboard.spec import load_spec

        if not isinstance(benchmark, str):
            raise _fail(path, "'benchmark' must be a benchmark name")
        bench = load_spec(benchmark)
        protocol = {baseline: _protocol_values(bench.protocol_for(baseline), fixed, f"benchmark {benchmark}'s protocol for {baseline}", path)
                    for baseline in baselines}
        datasets = _string_list(data, "datasets", path) if "datasets" in data else tuple(bench.datasets)
        outside = [d for d in datasets if d not in bench.datasets]
        if outside:
            raise _fail(path, f"dataset '{outside[0]}' is not one of benchmark {benchmark}'s ({', '.join(bench.datasets)})")
    else:
        datasets = _string_list(data, "datasets", path)

    seeds = data.get("seeds")
    if not isinstance(seeds, list) or not seeds or not all(isinstance(s, int) and not isinstance(s, bool) and 0 <= s < 2**32 for s in seeds):
        raise _fail(path, "'seeds' must be a non-empty list of integers between 0 and 2**32 - 1")
    if len(set(seeds)) != len(seeds):
        raise _fail(path, "'seeds' lists a seed twice")
    grid = data.get("grid", {})
    if not isinstance(grid, dict) or not all(isinstance(v, list) and v for v in grid.values()):
        raise _fail(path, "[grid] must map config keys to non-empty lists of values")
    random = _check_random(data.get("random", {}), path, max_runs)
    pinned = set(fixed).union(*protocol.values())
    clash = sorted((set(grid) & set(random)) | ((set(grid) | set(random)) & pinned))
    if clash:
        raise _fail(path, f"config key '{clash[0]}' is given in more than one of [set], [grid], [random] (or by the benchmark's protocol)")
    runs = data.get("runs")
    if runs is not None and (not isinstance(runs, str) or not runs):
        raise _fail(path, "'runs' must be a folder path")
    retries = data.get("retries", 2)
    if not isinstance(retries, int) or isinstance(retries, bool) or retries < 0:
        raise _fail(path, "'retries' must be an integer of at least 0")
    config_file = None
    if "config" in data:
        if not isinstance(data["config"], str):
            raise _fail(path, "'config' must be a path (relative to the spec)")
        config_file = (path.parent / data["config"]).resolve()
        if not config_file.is_file():
            raise _fail(path, f"config file {config_file} does not exist")
    spec = SweepSpec(
        path=path, name=name, baselines=baselines, datasets=datasets, seeds=tuple(seeds), benchmark=benchmark,
        runs=Path(runs) if runs else None, config_file=config_file, retries=retries, fixed=dict(fixed), protocol=protocol, grid=dict(grid), random=random,
    )
    _check_size(spec, max_runs)
    return spec


def check_configs(spec: SweepSpec, runs: list[PlannedRun]) -> None:
    """Resolve each distinct (baseline, dataset, values) config now, so an unknown baseline, key or a
    wrong type is one error before anything starts rather than the same failure in every run."""
    from offbench.baselines import get_baseline
    from offbench.training.config import resolve_config

    seen = set()
    for run in runs:
        key = (run.baseline, run.dataset, run.variant)
        if key in seen:
            continue
        seen.add(key)
        try:
            resolve_config(get_baseline(run.baseline), run.dataset, run.config_file, run.overrides())
        except OffbenchError as exc:
            raise OffbenchError(f"{spec.path}: run {run.name}: {exc}") from None
