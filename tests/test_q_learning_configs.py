"""Every shipped CQL/IQL config file names its source and fits its config dataclass exactly."""

from __future__ import annotations

import tomllib
from dataclasses import fields
from pathlib import Path

import pytest

from offbench.baselines.cql import CQLConfig
from offbench.baselines.iql import IQLConfig

ROOT = Path(__file__).resolve().parents[1] / "baselines"
FILES = [(path, CQLConfig) for path in sorted((ROOT / "cql").glob("*.toml"))] + [
    (path, IQLConfig) for path in sorted((ROOT / "iql").glob("*.toml"))
]
TYPES = {"int": int, "float": float, "bool": bool, "str": str}


@pytest.mark.parametrize("path, config_class", FILES, ids=[f"{p.parent.name}/{p.name}" for p, _ in FILES])
def test_config_file_matches_dataclass(path, config_class):
    values = tomllib.loads(path.read_text())
    assert "CORL" in values.pop("source")  # every file derives from CORL's configs
    types = {f.name: TYPES[f.type] for f in fields(config_class)}
    assert set(values) == set(types), f"{path.name}: keys differ from {config_class.__name__}"
    for key, value in values.items():
        assert type(value) is types[key], f"{path.name}: {key} = {value!r} is not {types[key].__name__}"
    config_class(**values)


def test_default_files_hold_the_dataclass_defaults():
    for config_class, name in ((CQLConfig, "cql"), (IQLConfig, "iql")):
        values = tomllib.loads((ROOT / name / "default.toml").read_text())
        values.pop("source")
        assert config_class(**values) == config_class()
