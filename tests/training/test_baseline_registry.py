"""A built-in baseline is its module in offbench/baselines/ (found by reading the files) and its standard configs:
the registry finds exactly the classes the modules define, the README tables and the tests' run configs are
made from the classes, and every built-in brings the summary and tiny_config those need."""

from __future__ import annotations

import importlib
import pkgutil
import re
from pathlib import Path

import pytest

import offbench.baselines
from offbench.baselines import BASELINES, declared_baselines, get_baseline

REPO = Path(__file__).resolve().parents[2]


def test_the_registry_is_every_class_the_modules_define_with_a_name_and_a_config():
    defined = {}
    for module_info in pkgutil.iter_modules(offbench.baselines.__path__):
        module = importlib.import_module(f"offbench.baselines.{module_info.name}")
        for obj in vars(module).values():
            if (
                isinstance(obj, type)
                and obj.__module__ == module.__name__
                and isinstance(vars(obj).get("name"), str)
                and "Config" in vars(obj)
            ):
                defined[obj.name] = module.__name__
    assert BASELINES == defined


def test_reading_a_module_finds_class_level_names_beside_a_config_only():
    source = """
class Annotated:
    name: str = 'first'  # a comment
    Config = FirstConfig


class NoConfig:
    name = "not-a-baseline"


class MethodLevel:
    Config = C

    def f(self):
        name = "not-this"


class Inherits(Annotated):
    name = "second"
    Config = SecondConfig
"""
    assert declared_baselines(source) == ["first", "second"]


def test_the_readme_tables_are_the_registrys():
    from offbench.baselines.tables import stale_files

    assert stale_files(REPO, write=False) == [], "run: python -m offbench.baselines.tables"


def test_the_readme_run_command_names_every_baseline():
    row = next(line for line in (REPO / "README.md").read_text().splitlines() if line.startswith("| `offbench run baseline "))
    names = re.match(r"\| `offbench run baseline ([\w|\\-]+) ", row).group(1).split("\\|")
    assert sorted(names) == sorted(BASELINES)


@pytest.mark.parametrize("name", sorted(BASELINES))
def test_every_builtin_has_a_summary_a_tiny_config_and_a_standard_config(name):
    cls = get_baseline(name)
    assert isinstance(cls.summary, str) and cls.summary and "|" not in cls.summary
    assert cls.tiny_config and not offbench.baselines.contract_problems(cls, name)
    assert (REPO / "baselines" / name / "default.toml").is_file()


def test_the_tests_run_configs_are_the_baselines_tiny_configs():
    from tiny_runs import CONFIGS, RUNS, run_config_text

    assert sorted(path.name for path in CONFIGS.glob("*.toml")) == sorted(f"{name}-tiny.toml" for name in RUNS)
    stale = [name for name in RUNS if (CONFIGS / f"{name}-tiny.toml").read_text() != run_config_text(name)]
    assert not stale, f"run: python tests/training/tiny_runs.py ({', '.join(stale)})"
