"""Every shipped CQL/IQL config file names its source and passes the trainer's config resolution."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from offbench.baselines.cql import CQL, CQLConfig
from offbench.baselines.iql import IQL, IQLConfig
from offbench.training.config import resolve_config, standard_config_path

ROOT = Path(__file__).resolve().parents[1] / "baselines"
FILES = [(path, CQL) for path in sorted((ROOT / "cql").glob("*.toml"))] + [
    (path, IQL) for path in sorted((ROOT / "iql").glob("*.toml"))
]


@pytest.mark.parametrize("path, baseline", FILES, ids=[f"{p.parent.name}/{p.name}" for p, _ in FILES])
def test_config_file_resolves_with_a_source(path, baseline):
    assert "CORL" in tomllib.loads(path.read_text())["source"]  # every file derives from CORL's configs
    resolved = resolve_config(baseline, None, config_file=path)  # unknown keys and wrong types raise
    assert resolved.baseline.steps == resolved.train.steps


def test_default_files_hold_the_dataclass_defaults():
    for baseline, config_class in ((CQL, CQLConfig), (IQL, IQLConfig)):
        assert resolve_config(baseline, None).baseline == config_class()


def test_d4rl_dataset_ids_find_their_corl_config():
    assert standard_config_path("iql", "d4rl/hopper-medium-expert-v2").name == "d4rl-hopper-medium-expert-v2.toml"
    resolved = resolve_config(IQL, "d4rl/hopper-medium-expert-v2")
    assert (resolved.baseline.beta, resolved.baseline.expectile) == (6.0, 0.5)  # CORL's values for that dataset
    assert resolve_config(CQL, "d4rl/hopper-medium-v2").baseline.normalize_reward
