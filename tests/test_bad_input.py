"""Bad input on every command of the CLI: one line on stderr starting `offbench: error:`, exit code 2, no
traceback, and not a byte changed on disk. Runs `offbench.cli.main` in-process (a subprocess per case
would cost a second each); a traceback escapes main() as an exception and fails the test."""

from __future__ import annotations

import hashlib

import h5py
import numpy as np
import pytest
import typer

from helpers import make_store
from offbench import cli

RECIPE_CARD = """id = "mine/bad-recipe"
description = "x"
format = "offbench"
[source.recipe]
generator = "darkroom"
seed = {seed}
params = {params}
"""
FILES_CARD = """id = "mine/bad-scores"
description = "x"
format = "d4rl"
[[source.files]]
url = "https://example.invalid/x.hdf5"
[scores]
ref_min = true
ref_max = 1.0
"""


@pytest.fixture
def world(tmp_path, isolated_home):
    """A native dataset, a truncated copy, a D4RL file with no usable transition, and an --out folder in use."""
    native = make_store().save(tmp_path / "data" / "data.h5")
    (tmp_path / "truncated.h5").write_bytes(native.read_bytes()[:3000])
    with h5py.File(tmp_path / "one-row-timeouts.hdf5", "w") as f:  # every episode one row, ended by a timeout
        for key, value in {"observations": np.zeros((3, 2)), "actions": np.zeros((3, 1)), "rewards": np.zeros(3),
                           "terminals": np.zeros(3, bool), "timeouts": np.ones(3, bool)}.items():
            f[key] = value
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "data.h5").write_bytes(b"someone else's data")
    (tmp_path / "bad.toml").write_text("steps = [")
    (isolated_home / "datasets").mkdir(parents=True)
    return tmp_path


def snapshot(folder):
    return {str(p): (p.stat().st_mode, hashlib.sha256(p.read_bytes()).hexdigest()) for p in sorted(folder.rglob("*")) if p.is_file()}


CASES = {
    # id: (user card file text or None, argv with {tmp} for the test folder, fragment of the message)
    "malformed-user-card": ('id = "x', ["list"], "malformed TOML"),
    "recipe-seed-not-int": (RECIPE_CARD.format(seed='"abc"', params="{}"), ["info", "mine/bad-recipe"], "seed must be a non-negative integer"),
    "recipe-params-not-table": (RECIPE_CARD.format(seed=0, params='"x"'), ["download", "mine/bad-recipe"], "params must be a table"),
    "score-is-boolean": (FILES_CARD, ["list"], "scores.ref_min must be a number"),
    "list-unknown-kind": (None, ["list", "--kind", "offlin"], "no dataset of that kind"),
    "unknown-id": (None, ["info", "nope/nothing"], "unknown dataset id"),
    "missing-path": (None, ["verify", "{tmp}/absent.h5"], "no such file"),
    "truncated-file": (None, ["verify", "{tmp}/truncated.h5"], "truncated"),
    "d4rl-nothing-left": (None, ["info", "{tmp}/one-row-timeouts.hdf5"], "one-row-timeouts.hdf5: every episode has one row"),
    "download-unknown": (None, ["download", "nope"], "unknown dataset id"),
    "export-unknown-format": (None, ["export", "{tmp}/data/data.h5", "--format", "rlds", "--out", "{tmp}/x"], "unknown format"),
    "export-over-existing": (None, ["export", "{tmp}/data/data.h5", "--format", "offbench", "--out", "{tmp}/used"], "already exists"),
    "generate-zero-tasks": (None, ["generate", "darkroom", "--tasks", "0"], "tasks must be at least 1"),
    "generate-not-an-int": (None, ["generate", "keydoor", "--tasks", "two"], "--tasks"),
    "generate-wrong-algo": (None, ["generate", "bandit", "--tasks", "2", "--algo", "q-learning"], "unknown algorithm"),
    "generate-over-existing": (None, ["generate", "darkroom", "--tasks", "2", "--episodes", "5", "--out", "{tmp}/used", "-q"], "already exists"),
    "run-unknown-baseline": (None, ["run", "baseline", "nope", "--dataset", "{tmp}/data/data.h5"], "unknown baseline"),
    "run-negative-seed": (None, ["run", "baseline", "bc", "--dataset", "{tmp}/data/data.h5", "--seed", "-1", "--out", "{tmp}/runs"], "--seed"),
    "run-unknown-key": (None, ["run", "baseline", "bc", "--dataset", "{tmp}/data/data.h5", "--set", "nope=1", "--out", "{tmp}/runs"], "unknown config key"),
    "run-bad-value": (None, ["run", "baseline", "dt", "--dataset", "{tmp}/data/data.h5", "--set", "steps=x", "--out", "{tmp}/runs"], "must be an integer"),
    "run-malformed-config": (None, ["run", "baseline", "bc", "--dataset", "{tmp}/data/data.h5", "--config", "{tmp}/bad.toml"], "malformed TOML"),
    "run-bad-device": (None, ["run", "baseline", "bc", "--dataset", "{tmp}/data/data.h5", "--device", "abacus"], "not a torch device"),
    "resume-missing": (None, ["run", "baseline", "bc", "--resume", "{tmp}/absent"], "no such file"),
    "evaluate-not-a-run": (None, ["evaluate", "{tmp}/data"], "run.json"),
    "evaluate-too-many-episodes": (None, ["evaluate", "{tmp}/data", "--episodes", "5000"], "between 1 and 1000"),
}


@pytest.mark.parametrize("name", CASES)
def test_bad_input_is_one_line_exit_2_and_changes_nothing(name, world, isolated_home, capsys):
    card, argv, fragment = CASES[name]
    if card is not None:
        (isolated_home / "datasets" / "user.toml").write_text(card)
    before = snapshot(world)
    with pytest.raises(SystemExit) as exit_info:
        cli.main([arg.format(tmp=world) for arg in argv])
    err = capsys.readouterr().err.strip()
    assert exit_info.value.code == 2, err
    assert len(err.splitlines()) == 1 and err.startswith("offbench: error:"), err
    assert fragment in err, err
    assert snapshot(world) == before


def test_main_lets_a_real_bug_through_and_maps_typer_abort_and_exit(monkeypatch, capsys):
    """Only OffbenchError and usage errors become exit 2; a bug keeps its traceback (exit 1)."""

    def raising(error):
        def app(**_):
            raise error

        return app

    monkeypatch.setattr(cli, "app", raising(RuntimeError("a bug")))
    with pytest.raises(RuntimeError, match="a bug"):
        cli.main(["list"])
    for error, code in ((typer.Abort(), 1), (typer.Exit(130), 130)):
        monkeypatch.setattr(cli, "app", raising(error))
        with pytest.raises(SystemExit) as exit_info:
            cli.main(["list"])
        assert exit_info.value.code == code
