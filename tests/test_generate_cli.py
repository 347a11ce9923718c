"""`offbench generate bandit --num-arms / --held-out-arms`: the command line reaches the recipe's arm counts, so a
variable-arm dataset (datasets/icrl/bandit-variable-arms*.toml) can be made without writing a card."""

from __future__ import annotations

import numpy as np

from offbench.data.store import load_native
from offbench.envs.benchmarks import card_tasks

BANDIT = ["generate", "bandit", "--algo", "thompson", "--variant", "uniform", "--tasks", "14", "--held-out", "2", "--episodes", "10", "-q"]


def test_repeated_num_arms_gives_training_tasks_of_each_count_and_held_out_arms_the_held_out_tasks(run_cli, isolated_home, tmp_path):
    run_cli(*BANDIT, "--num-arms", "3", "--num-arms", "4", "--held-out-arms", "6", "--out", tmp_path, check=True)
    store = load_native(tmp_path / "data.h5")
    assert store.card is not None
    params = store.card["source"]["recipe"]["params"]
    assert params["num_arms"] == [3, 4] and params["held_out_arms"] == 6
    train, held_out = card_tasks(store.card)
    assert [len(task["means"]) for task in train] == [3] * 6 + [4] * 6
    assert [len(task["means"]) for task in held_out] == [6, 6]
    arms = np.asarray(store.columns["num_actions"])
    assert set(arms.tolist()) == {3, 4} and (np.asarray(store.actions) < arms).all()


def test_one_num_arms_is_every_tasks_count_and_the_id_says_so(run_cli, isolated_home):
    proc = run_cli(*BANDIT, "--num-arms", "4", check=True)
    dataset_id = "generated/bandit-thompson-uniform-t14-ho2-h1-e10-a4-s0"
    assert f"registered as {dataset_id}" in proc.stdout
    store = load_native(isolated_home / "data" / dataset_id / "data.h5")
    assert store.card is not None and store.card["source"]["recipe"]["params"]["num_arms"] == 4
    assert "num_actions" not in store.columns and np.asarray(store.actions).max() < 4
    train, held_out = card_tasks(store.card)
    assert {len(task["means"]) for task in train + held_out} == {4}


def test_bad_arm_counts_are_one_line_and_grid_worlds_have_no_arm_options(run_cli, isolated_home):
    for args, message in (
        (["--num-arms", "1"], "num-arms must be at least 2"),
        (["--num-arms", "3", "--num-arms", "3"], "list of distinct ones"),
        (["--held-out-arms", "1"], "held-out-arms must be at least 2"),
    ):
        proc = run_cli(*BANDIT, *args)
        assert proc.returncode == 2 and message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    proc = run_cli("generate", "darkroom", "--tasks", "3", "--num-arms", "4")
    assert proc.returncode == 2 and "No such option: --num-arms" in proc.stderr
    assert not isolated_home.exists() or not any(p.is_file() for p in isolated_home.rglob("*"))
