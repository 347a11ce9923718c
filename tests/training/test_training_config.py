"""Config resolution: defaults <- standard file <- --config <- --set, typed by the dataclass fields."""

from __future__ import annotations

import dataclasses
import tomllib

import pytest

from offbench.baselines import BASELINES, get_baseline
from offbench.errors import OffbenchError
from offbench.paths import builtin_dir
from offbench.records import check_allowed, field_limits
from offbench.training.config import (
    TrainConfig,
    config_from_dict,
    parse_override,
    read_config_file,
    resolve_config,
    standard_config_path,
)

DT = get_baseline("dt")
BC = get_baseline("bc")


def test_every_standard_config_names_its_source_and_fits_its_baseline():
    files = sorted(builtin_dir("baselines").glob("*/*.toml"))
    assert {path.parent.name for path in files} >= {"dt", "bc"}
    for path in files:
        assert isinstance(tomllib.loads(path.read_text()).get("source"), str), f"{path} has no source"
        baseline = get_baseline(path.parent.name)
        values = read_config_file(path)
        # every key is a field of TrainConfig or the baseline's Config, with the right type
        resolved = config_from_dict(baseline, values)
        for key, value in values.items():
            assert resolved.as_dict()[key] == (tuple(value) if isinstance(value, list) else value), (path, key)


def test_standard_config_is_the_longest_matching_prefix_of_the_dataset_id():
    folder = builtin_dir("baselines") / "dt"
    assert standard_config_path("dt", "d4rl/hopper-medium-v2") == folder / "d4rl-hopper.toml"
    assert standard_config_path("dt", "d4rl/halfcheetah-medium-expert-v2") == folder / "d4rl-halfcheetah.toml"
    assert standard_config_path("dt", "pendulum-scripted") == folder / "pendulum-scripted.toml"
    assert standard_config_path("dt", "mujoco/hopper/medium-v0") == folder / "default.toml"
    assert standard_config_path("dt", None) == folder / "default.toml"


def test_corl_d4rl_numbers_reach_the_resolved_config():
    config = resolve_config(DT, "d4rl/hopper-medium-replay-v2")
    assert (config.train.steps, config.train.batch_size) == (100_000, 4096)
    assert config.baseline.learning_rate == 8e-4 and config.baseline.warmup_steps == 10_000
    assert (config.baseline.segment_length, config.baseline.num_layers, config.baseline.num_heads, config.baseline.embedding_dim) == (
        20,
        3,
        1,
        128,
    )
    assert config.baseline.target_returns == (3600.0, 1800.0)
    assert config.baseline.reward_scale == 1e-3 and config.baseline.grad_clip == 0.25


def test_layers_override_in_order(tmp_path):
    user = tmp_path / "mine.toml"
    user.write_text('source = "me"\nlearning_rate = 0.01\nsteps = 7\ntarget_returns = [1, 2.5]\n')
    config = resolve_config(DT, "d4rl/hopper-medium-v2", user, ["steps=9", "betas=[0.8, 0.9]", "grad_clip=0"])
    assert config.baseline.learning_rate == 0.01  # --config over the standard file
    assert config.train.steps == 9  # --set over --config
    assert config.train.batch_size == 4096  # standard file over the dataclass default
    assert config.baseline.target_returns == (1.0, 2.5) and all(isinstance(t, float) for t in config.baseline.target_returns)
    assert config.baseline.betas == (0.8, 0.9) and config.baseline.grad_clip == 0.0
    assert config.sources[0].endswith("d4rl-hopper.toml") and config.sources[1] == str(user)
    assert dataclasses.asdict(config.train)["steps"] == 9 and config.as_dict()["learning_rate"] == 0.01


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("lr=1e-3", "--set lr=1e-3: unknown config key 'lr' for baseline 'bc'"),
        ("steps=ten", "'steps' must be an integer, got 'ten'"),
        ("steps=1.5", "'steps' must be an integer, got 1.5"),
        ("learning_rate=true", "'learning_rate' must be a finite number, got True"),
        ("learning_rate=nan", "'learning_rate' must be a finite number, got nan"),
        ("learning_rate=0", "'learning_rate' must be greater than 0, got 0.0"),
        ("num_layers=-1", "'num_layers' must be at least 0, got -1"),
        ("hidden_dim=0", "'hidden_dim' must be at least 1, got 0"),
        ("eval_episodes=1001", "'eval_episodes' must be at least 0 and at most 1000, got 1001"),
        ("normalize_observations=1", "'normalize_observations' must be true or false, got 1"),
        ("steps=0", "'steps' must be at least 1"),
        ("steps", "expected key=value"),
    ],
)
def test_bad_overrides_are_one_line_errors(override, message):
    with pytest.raises(OffbenchError) as info:
        resolve_config(BC, "pendulum-scripted", None, [override])
    assert message in str(info.value) and "\n" not in str(info.value)


def test_bad_config_file_names_the_file(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("hidden_dim = 'wide'\n")
    with pytest.raises(OffbenchError, match=rf"{bad}: 'hidden_dim' must be an integer"):
        resolve_config(BC, None, bad)
    bad.write_text("hidden_dim = \n")
    with pytest.raises(OffbenchError, match="malformed TOML"):
        resolve_config(BC, None, bad)
    with pytest.raises(OffbenchError, match="cannot read config"):
        resolve_config(BC, None, tmp_path / "missing.toml")


def test_override_values_are_read_as_toml():
    assert parse_override("a=1e-4") == ("a", 1e-4)
    assert parse_override("a=3") == ("a", 3)
    assert parse_override("a = [1, 2]") == ("a", [1, 2])
    assert parse_override("a=true") == ("a", True)
    assert parse_override("a=hello") == ("a", "hello")
    assert parse_override("a=x=y") == ("a", "x=y")


@pytest.mark.parametrize("name", sorted(BASELINES))
def test_every_default_is_within_its_declared_limits(name):
    """The declared ranges and the defaults agree, for the training loop and every registered baseline."""
    for section in (TrainConfig(), get_baseline(name).Config()):
        limits = field_limits(section)
        assert any(limits.values()), f"{type(section).__name__} declares no ranges"
        for key, value in dataclasses.asdict(section).items():
            check_allowed(value, limits[key], key)


def test_run_json_values_are_checked_against_the_limits_too():
    with pytest.raises(OffbenchError, match="run.json config 'eval_episodes' must be at least 0"):
        config_from_dict(BC, {"eval_episodes": -1})
