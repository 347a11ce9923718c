"""Sweep specs: expansion (grid x random draws x seeds), stable names, the benchmark's protocol, and
one-line errors naming the file; the leaderboards' own reference sweeps load and resolve."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from offbench.baselines import BASELINES
from offbench.errors import OffbenchError
from offbench.sweep.spec import MAX_RUNS, check_configs, load_sweep

REPO = Path(__file__).resolve().parents[1]


def write(tmp_path: Path, text: str, name: str = "spec.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


BASE = 'baselines = ["bc", "iql"]\ndatasets = ["pendulum-scripted"]\nseeds = [0, 1]\n'


def test_grid_crosses_every_value_and_names_are_stable(tmp_path):
    spec = load_sweep(write(tmp_path, BASE + "[set]\neval_episodes = 2\n[grid]\nbatch_size = [16, 32]\nsteps = [10, 20, 30]\n"))
    runs = spec.expand()
    assert len(runs) == 2 * 6 * 2
    assert {(r.values["batch_size"], r.values["steps"]) for r in runs} == {(b, s) for b in (16, 32) for s in (10, 20, 30)}
    assert all(r.values["eval_episodes"] == 2 for r in runs)
    assert len({r.name for r in runs}) == len(runs)
    # the name depends on the run's own values only: a spec with one more seed and grid point keeps them
    bigger = load_sweep(
        write(
            tmp_path,
            BASE.replace("[0, 1]", "[0, 1, 2]") + "[set]\neval_episodes = 2\n[grid]\nbatch_size = [16, 32, 64]\nsteps = [10, 20, 30]\n",
            "bigger.toml",
        )
    )
    assert {r.name for r in runs} < {r.name for r in bigger.expand()}
    one = next(r for r in runs if r.baseline == "bc" and r.seed == 1 and r.values["batch_size"] == 32 and r.values["steps"] == 20)
    assert one.name.startswith("bc-pendulum-scripted-") and one.name.endswith("-s1") and len(one.variant) == 16
    assert sorted(one.overrides()) == ["batch_size=32", "eval_episodes=2", "steps=20"]


def test_without_grid_or_draws_names_are_baseline_dataset_seed(tmp_path):
    runs = load_sweep(write(tmp_path, BASE)).expand()
    assert [r.name for r in runs] == [
        "bc-pendulum-scripted-s0",
        "bc-pendulum-scripted-s1",
        "iql-pendulum-scripted-s0",
        "iql-pendulum-scripted-s1",
    ]


def test_random_draws_are_reproducible_in_bounds_and_seed_dependent(tmp_path):
    text = BASE + (
        "[random]\nsamples = 5\nseed = {seed}\nlr = {{ log_uniform = [1e-5, 1e-3] }}\nhidden_dim = {{ choice = [32, 64] }}\n"
        "num_layers = {{ int_uniform = [1, 3] }}\ndropout = {{ uniform = [0.0, 0.5] }}\n"
    )
    first = load_sweep(write(tmp_path, text.format(seed=0), "a.toml")).variants()
    again = load_sweep(write(tmp_path, text.format(seed=0), "b.toml")).variants()
    other = load_sweep(write(tmp_path, text.format(seed=1), "c.toml")).variants()
    assert first == again and first != other and len(first) == 5
    for draw in first:
        assert 1e-5 <= draw["lr"] <= 1e-3 and draw["hidden_dim"] in (32, 64)
        assert draw["num_layers"] in (1, 2, 3) and isinstance(draw["num_layers"], int) and 0 <= draw["dropout"] <= 0.5


def test_grid_and_draws_cross(tmp_path):
    spec = load_sweep(
        write(tmp_path, BASE + "[grid]\nbatch_size = [16, 32]\n[random]\nsamples = 3\nseed = 0\nlr = { uniform = [0.001, 0.002] }\n")
    )
    variants = spec.variants()
    assert len(variants) == 6 and len({v["lr"] for v in variants}) == 3


def test_benchmark_gives_datasets_and_protocol(tmp_path):
    spec = load_sweep(write(tmp_path, 'benchmark = "pendulum-scripted"\nbaselines = ["bc"]\nseeds = [0]\n'))
    (run,) = spec.expand()
    assert run.dataset == "pendulum-scripted" and run.values == {"eval_episodes": 10, "eval_every": 1000}


RANDOM = BASE + "[random]\nsamples = 2\nseed = 0\n"
ONE_DATASET = 'baselines = ["bc"]\ndatasets = ["x"]\n'
ON_BENCHMARK = 'benchmark = "pendulum-scripted"\nbaselines = ["bc"]\nseeds = [0]\n'


@pytest.mark.parametrize(
    ("text", "message"),
    [
        # the file, unknown and missing keys
        ("baselines = [\n", "malformed TOML"),
        (
            BASE + "colour = 1\n",
            "'colour' is not a known key (known: baselines, benchmark, config, datasets, grid, name, random, retries, runs, seeds, set)",
        ),
        ('datasets = ["x"]\nseeds = [0]\n', "missing required key 'baselines'"),
        (ONE_DATASET, "missing required key 'seeds'"),
        (RANDOM.replace("samples = 2\n", ""), "missing required key 'random.samples'"),
        (BASE + "[random]\n", "missing required key 'random.samples'"),
        (RANDOM + "lr = { normal = [0, 1] }\n", "'random.lr.normal' is not a known key (known: choice, int_uniform, log_uniform, uniform)"),
        # wrong types
        ('baselines = "bc"\ndatasets = ["x"]\nseeds = [0]\n', "'baselines' must be a list of strings, got 'bc'"),
        (ONE_DATASET + "seeds = [0.5]\n", "'seeds[0]' must be an integer, got 0.5"),
        (BASE + "name = 3\n", "'name' must be a string, got 3"),
        (BASE + "retries = true\n", "'retries' must be an integer, got True"),
        (BASE + "config = 3\n", "'config' must be a string, got 3"),
        (BASE + "set = 1\n", "'set' must be a table, got 1"),
        (BASE + "[grid]\nlr = 0.1\n", "'grid.lr' must be a list of values, got 0.1"),
        (RANDOM.replace("samples = 2", "samples = 2.5"), "'random.samples' must be an integer, got 2.5"),
        (RANDOM + "lr = 0.1\n", "'random.lr' must be a table, got 0.1"),
        (RANDOM + "lr = { uniform = [0, 1, 2] }\n", "'random.lr.uniform' must be a list of 2 numbers, got [0, 1, 2]"),
        (RANDOM + 'lr = { uniform = ["a", 1] }\n', "'random.lr.uniform[0]' must be a finite number, got 'a'"),
        (RANDOM + "lr = { int_uniform = [1, 2.5] }\n", "'random.lr.int_uniform[1]' must be an integer, got 2.5"),
        # out of range
        (ONE_DATASET + "seeds = [-1]\n", "'seeds' must be at least 0 and less than 4294967296, got -1"),
        (ONE_DATASET + "seeds = [0, 4294967296]\n", "'seeds' must be at least 0 and less than 4294967296, got 4294967296"),
        (BASE + "retries = -1\n", "'retries' must be at least 0, got -1"),
        (RANDOM.replace("samples = 2", "samples = 0"), "'random.samples' must be at least 1, got 0"),
        (RANDOM.replace("seed = 0", "seed = -1"), "'random.seed' must be at least 0, got -1"),
        (RANDOM + "lr = { log_uniform = [0, 1] }\n", "'random.lr.log_uniform' must be greater than 0, got 0.0"),
        # the records' own rules
        (BASE + 'name = "a/b"\n', "'name' must be a plain folder name (no '/', not empty or starting with '.'), got 'a/b'"),
        (BASE + 'name = ".hidden"\n', "'name' must be a plain folder name (no '/', not empty or starting with '.'), got '.hidden'"),
        (BASE + 'runs = ""\n', "'runs' must be a folder path, got ''"),
        ('baselines = ["bc"]\nseeds = [0]\n', "needs 'datasets' (or a 'benchmark', whose datasets it then runs)"),
        ('baselines = []\ndatasets = ["x"]\nseeds = [0]\n', "'baselines' must be a non-empty list, got []"),
        ('baselines = ["bc", ""]\ndatasets = ["x"]\nseeds = [0]\n', "'baselines[1]' must be a non-empty string"),
        ('baselines = ["bc", "bc"]\ndatasets = ["x"]\nseeds = [0]\n', "'baselines' lists 'bc' twice"),
        ('baselines = ["bc"]\ndatasets = []\nseeds = [0]\n', "'datasets' must be a non-empty list, got []"),
        (ONE_DATASET + "seeds = []\n", "'seeds' must be a non-empty list, got []"),
        (ONE_DATASET + "seeds = [0, 0]\n", "'seeds' lists 0 twice"),
        (BASE + "[grid]\nlr = []\n", "'grid.lr' must be a non-empty list of values"),
        (BASE + "[set]\nlr = 1\n[grid]\nlr = [1, 2]\n", "config key 'lr' is given in more than one of [set], [grid], [random]"),
        (
            BASE + "[set]\nlr = 1\n[random]\nsamples = 2\nseed = 0\nlr = { uniform = [0, 1] }\n",
            "config key 'lr' is given in more than one of [set], [grid], [random]",
        ),
        (
            BASE + "[grid]\nlr = [1, 2]\n[random]\nsamples = 2\nseed = 0\nlr = { uniform = [0, 1] }\n",
            "config key 'lr' is given in more than one of [set], [grid], [random]",
        ),
        (RANDOM + "lr = {}\n", "'random.lr' needs exactly one of choice, uniform, log_uniform, int_uniform, got none"),
        (
            RANDOM + "lr = { uniform = [0, 1], choice = [1] }\n",
            "'random.lr' needs exactly one of choice, uniform, log_uniform, int_uniform, got choice and uniform",
        ),
        (RANDOM + "lr = { uniform = [1, 0] }\n", "'random.lr.uniform' must be [low, high] with low <= high, got [1.0, 0.0]"),
        (RANDOM + "lr = { choice = [] }\n", "'random.lr.choice' must be a non-empty list"),
        # what comes from outside the file: the config file and the benchmark
        (BASE + 'config = "missing.toml"\n', "config file {dir}/missing.toml does not exist"),
        (
            ON_BENCHMARK + "[set]\neval_episodes = 3\n",
            "[set] eval_episodes = 3 contradicts benchmark pendulum-scripted's protocol for bc (episodes = 10)",
        ),
        (
            ON_BENCHMARK + "[grid]\neval_every = [10, 20]\n",
            "config key 'eval_every' is pinned by benchmark pendulum-scripted's protocol, so it cannot be in [grid] or [random]",
        ),
        (ON_BENCHMARK + 'datasets = ["darkroom"]\n', "dataset 'darkroom' is not one of benchmark pendulum-scripted's (pendulum-scripted)"),
    ],
)
def test_bad_specs_are_one_line_errors_naming_the_file_and_field(tmp_path, text, message):
    path = write(tmp_path, text)
    with pytest.raises(OffbenchError) as info:
        load_sweep(path)
    assert str(info.value).startswith(f"{path}: {message.format(dir=tmp_path.resolve())}")
    assert "\n" not in str(info.value)


def test_an_unknown_benchmark_is_named(tmp_path):
    with pytest.raises(OffbenchError, match="unknown benchmark 'nope'"):
        load_sweep(write(tmp_path, 'benchmark = "nope"\nbaselines = ["bc"]\nseeds = [0]\n'))


def test_the_default_name_is_checked_as_a_given_one(tmp_path):
    """A spec's name defaults to its file's stem; `..toml` would put its runs in runs/sweeps itself."""
    assert load_sweep(write(tmp_path, BASE, "widths.toml")).name == "widths"
    with pytest.raises(OffbenchError, match=r"'name' must be a plain folder name .*, got '\.'$"):
        load_sweep(write(tmp_path, BASE, "..toml"))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (BASE.replace('"iql"', '"nope"'), "unknown baseline 'nope'"),
        (BASE + "[grid]\nwidth = [1, 2]\n", "unknown config key 'width'"),
        (BASE + '[set]\nbatch_size = "big"\n', "'batch_size' must be an integer"),
    ],
)
def test_configs_are_checked_before_anything_runs(tmp_path, text, message):
    path = write(tmp_path, text)
    spec = load_sweep(path)
    with pytest.raises(OffbenchError, match=message) as info:
        check_configs(spec, spec.expand())
    assert str(path) in str(info.value)


@pytest.mark.parametrize("path", sorted((REPO / "leaderboards").glob("*/sweep.toml")), ids=lambda p: p.parent.name)
def test_leaderboard_reference_sweeps_cover_their_benchmark(path):
    from offbench.leaderboard.spec import load_spec

    sweep = load_sweep(path)
    assert sweep.spec.benchmark == path.parent.name and sweep.name == path.parent.name
    bench = load_spec(sweep.spec.benchmark)
    runs = sweep.expand()
    assert {r.dataset for r in runs} == set(bench.datasets) and len(sweep.spec.seeds) >= bench.min_seeds
    missing = [b for b in sweep.spec.baselines if b not in BASELINES]
    if missing:
        pytest.skip(f"baselines {missing} are not registered on this branch")
    check_configs(sweep, runs)


def test_per_baseline_protocol_pins_reach_each_baselines_runs():
    spec = load_sweep(REPO / "leaderboards" / "d4rl-locomotion" / "sweep.toml")
    episodes = {run.baseline: run.values["eval_episodes"] for run in spec.expand()}
    assert episodes == {"bc": 10, "cql": 10, "iql": 10, "dt": 100}  # CORL's DT evaluates on 100 episodes


# ---------------------------------------------------------------------------------------------- bounds
def test_variant_names_do_not_collide_where_8_hex_digits_did(tmp_path):
    """hidden_dim 81 / batch_size 80 and hidden_dim 91 / batch_size 220 share their first 8 hex digits."""
    spec = load_sweep(
        write(
            tmp_path,
            'baselines = ["bc"]\ndatasets = ["pendulum-scripted"]\nseeds = [0]\n[grid]\nhidden_dim = [81, 91]\nbatch_size = [80, 220]\n',
        )
    )
    runs = spec.expand()
    assert len(runs) == 4 and len({run.name for run in runs}) == 4 and len({run.variant for run in runs}) == 4
    assert all(len(run.variant) == 16 for run in runs)


def test_a_spec_of_too_many_runs_is_refused_in_one_line_before_anything_is_planned(tmp_path):
    grid = "".join(f"k{i} = [{', '.join(map(str, range(10)))}]\n" for i in range(12))  # 10**12 grid points
    path = write(tmp_path, BASE + "[grid]\n" + grid)
    started = time.monotonic()
    with pytest.raises(OffbenchError) as info:
        load_sweep(path)
    message = str(info.value)
    assert time.monotonic() - started < 2 and "\n" not in message
    assert message == (
        f"{path}: expands to 4,000,000,000,000 runs (2 baselines x 1 dataset x 1,000,000,000,000 grid points x 2 seeds), "
        f"more than the limit of {MAX_RUNS:,}; sweep fewer values, or raise the limit (offbench sweep --max-runs 4000000000000)"
    )


def test_random_samples_past_the_limit_are_refused_before_any_draw(tmp_path):
    path = write(tmp_path, BASE + "[random]\nsamples = 1000000000\nseed = 0\nlr = { uniform = [0.001, 0.002] }\n")
    started = time.monotonic()
    with pytest.raises(
        OffbenchError, match=rf"^{re.escape(str(path))}: \[random\] samples = 1,000,000,000 is more than the limit of {MAX_RUNS:,} runs"
    ):
        load_sweep(path)
    assert time.monotonic() - started < 2
    # within the limit for samples, but not once crossed with the rest: the run count says so
    path = write(tmp_path, BASE + f"[random]\nsamples = {MAX_RUNS}\nseed = 0\nlr = {{ uniform = [0.001, 0.002] }}\n", "crossed.toml")
    with pytest.raises(
        OffbenchError, match=rf"expands to {4 * MAX_RUNS:,} runs \(2 baselines x 1 dataset x {MAX_RUNS:,} random samples x 2 seeds\)"
    ):
        load_sweep(path)


def test_the_limit_can_be_raised(tmp_path, run_cli):
    path = write(tmp_path, BASE + "[grid]\nbatch_size = [16, 32, 64]\n")  # 12 runs
    with pytest.raises(OffbenchError, match="more than the limit of 11"):
        load_sweep(path, max_runs=11)
    assert len(load_sweep(path, max_runs=12).expand()) == 12

    refused = run_cli("sweep", "status", path, "--runs", tmp_path / "runs", "--max-runs", "11")
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr.strip() == (
        f"offbench: error: {path}: expands to 12 runs (2 baselines x 1 dataset x 3 grid points x 2 seeds), "
        "more than the limit of 11; sweep fewer values, or raise the limit (offbench sweep --max-runs 12)"
    )
    shown = run_cli("sweep", "status", path, "--runs", tmp_path / "runs", "--max-runs", "12")
    assert shown.returncode == 0 and "12 queued" in shown.stdout


def test_repeated_names_are_found_in_linear_time(tmp_path):
    values = ", ".join(map(str, [*range(40_000), 7]))  # one value twice among 40,001: found without comparing all pairs
    path = write(tmp_path, f'baselines = ["bc"]\ndatasets = ["pendulum-scripted"]\nseeds = [0]\n[grid]\nbatch_size = [{values}]\n')
    spec = load_sweep(path, max_runs=50_000)
    started = time.monotonic()
    with pytest.raises(
        OffbenchError, match=r"several runs would be named bc-pendulum-scripted-[0-9a-f]{16}-s0 \(datasets or values repeated\?\)"
    ):
        spec.expand()
    assert time.monotonic() - started < 30  # about a second; comparing all 8e8 pairs would take minutes


def test_a_run_name_too_long_for_a_run_directory_is_refused_before_anything_runs(tmp_path):
    path = write(tmp_path, f'baselines = ["{"b" * 40}"]\ndatasets = ["{"d" * 80}.h5"]\nseeds = [0]\n[grid]\nlr = [0.1]\n')
    with pytest.raises(OffbenchError, match=r"run name b+-d+-[0-9a-f]{16}-s0 is longer than 128 characters"):
        load_sweep(path).expand()


@pytest.mark.parametrize("path", sorted((REPO / "leaderboards").glob("*/sweep-*.toml")), ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_every_boards_row_sweep_plans_runs_on_its_benchmark_with_configs_that_resolve(path):
    """The sweeps that made (or will make) a board's rows: their datasets are the board's, and every run's config
    (the config file, [set] and the board's protocol pins) resolves before anything runs."""
    from offbench.leaderboard.spec import load_spec

    sweep = load_sweep(path)
    assert sweep.spec.benchmark == path.parent.name
    runs = sweep.expand()
    assert runs and {r.dataset for r in runs} <= set(load_spec(path.parent.name).datasets)
    check_configs(sweep, runs)
