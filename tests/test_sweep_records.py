"""Sweep specs are read through their records (offbench/sweep/spec.py): every spec the repository ships and every
example in docs/sweeps.md loads, the documented field tables are the records', and run names and draws stay
those that existing sweeps' run directories carry."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from offbench import records
from offbench.sweep.spec import DOCS_PAGE, SWEEP_RECORDS, load_sweep

REPO = Path(__file__).resolve().parents[1]
LEADERBOARD_SPECS = sorted((REPO / "leaderboards").glob("*/sweep*.toml"))


@pytest.mark.parametrize("path", LEADERBOARD_SPECS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_leaderboard_sweep_spec_loads_and_expands(path):
    sweep = load_sweep(path)
    runs = sweep.expand()
    assert sweep.spec.benchmark == path.parent.name and len(runs) == sweep.run_count() > 0
    assert sweep.config_file is None or sweep.config_file.is_file()


def test_every_spec_example_in_the_sweeps_doc_loads(tmp_path):
    examples = [block for block in re.findall(r"```toml\n(.*?)```", DOCS_PAGE.read_text(), re.DOTALL) if "baselines" in block]
    assert examples
    for index, text in enumerate(examples):
        for config in re.findall(r'^config = "([^"]+)"', text, re.MULTILINE):  # the --config file it names
            (tmp_path / config).write_text("")
        path = tmp_path / f"example{index}.toml"
        path.write_text(text)
        assert load_sweep(path).expand()


def test_the_field_tables_in_the_sweeps_doc_are_the_records():
    page = DOCS_PAGE.read_text()
    assert records.fill_field_tables(page, *SWEEP_RECORDS) == page, "run offbench.sweep.spec.write_field_docs()"


def test_run_names_and_draws_are_pinned(tmp_path):
    """Existing sweeps find their runs by name: the digest of a run's values and the values drawn from a seed must
    not change with how the spec is read."""
    path = tmp_path / "spec.toml"
    path.write_text(
        'benchmark = "pendulum-scripted"\nbaselines = ["bc"]\nseeds = [0]\n[set]\nbatch_size = 128\n'
        "[grid]\nhidden_dim = [64, 256]\nnum_layers = [2, 3]\n[random]\nsamples = 4\nseed = 0\n"
        "lr = { log_uniform = [1e-5, 1e-3] }\ntau = { uniform = [0.001, 0.01] }\nn_heads = { int_uniform = [1, 4] }\n"
        'activation = { choice = ["relu", "tanh"] }\n'
    )
    first = load_sweep(path).expand()[0]
    assert first.name == "bc-pendulum-scripted-495ed2acb73252c5-s0"
    assert first.values == {
        "activation": "tanh",
        "batch_size": 128,
        "eval_episodes": 10,
        "eval_every": 1000,
        "hidden_dim": 64,
        "lr": 3.463964459891803e-05,
        "n_heads": 3,
        "num_layers": 2,
        "tau": 0.0013687617154257523,
    }
    path.write_text('baselines = ["bc"]\ndatasets = ["pendulum-scripted"]\nseeds = [0]\n[grid]\nbatch_size = [64]\n')
    assert [run.name for run in load_sweep(path).expand()] == ["bc-pendulum-scripted-2fdcb62e8c4b8126-s0"]  # docs/sweeps.md's example
