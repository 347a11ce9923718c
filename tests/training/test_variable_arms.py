"""Bandits of several arm counts: a recipe's num_arms list gives training tasks of each count and held-out tasks of
another; the data carries a per-step num_actions column the ad_windows sampler passes on; Headless-AD trains on it
and is evaluated in context at the held-out count through `offbench run`, while AD and DPT are refused in one line."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import read_jsonl

from offbench.envs.benchmarks import BENCHMARKS, card_tasks, split_tasks
from offbench.errors import OffbenchError
from offbench.generators.histories import HistoryRecipe, run_histories

MIXED = {"algo": "thompson", "variant": "uniform", "tasks": 70, "held_out": 6, "episodes": 30, "num_arms": [3, 4, 5], "held_out_arms": 8}
TINY = [
    "--set",
    "steps=20",
    "--set",
    "eval_every=20",
    "--set",
    "eval_episodes=10",
    "--set",
    "batch_size=4",
    "--set",
    "log_every=10",
    "--set",
    "context_steps=20",
    "--set",
    "embedding_dim=16",
    "--set",
    "hidden_dim=16",
    "--set",
    "num_layers=1",
    "--set",
    "num_heads=2",
]


@pytest.fixture(scope="module")
def mixed():
    return run_histories(HistoryRecipe.from_params("bandit", MIXED), 0)[0]


@pytest.fixture(scope="module")
def variable_arms_home(tmp_path_factory):
    return tmp_path_factory.mktemp("variable_arms_home")


@pytest.fixture
def variable_arms(variable_arms_home, monkeypatch):
    """OFFBENCH_HOME for bandit-variable-arms-small (Thompson sampling on 3, 4 and 5 arms, held out at 8), generated
    on first use."""
    monkeypatch.setenv("OFFBENCH_HOME", str(variable_arms_home))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")


def test_training_tasks_come_in_one_run_per_arm_count_and_held_out_tasks_have_their_own():
    train, held_out = split_tasks(BENCHMARKS["bandit"], 70, 6, 0, "uniform", [3, 4, 5], 8)
    assert [len(task["means"]) for task in train] == [3] * 22 + [4] * 21 + [5] * 21
    assert {len(task["means"]) for task in held_out} == {8}
    assert split_tasks(BENCHMARKS["bandit"], 20, 6, 0, "uniform", 8)[1] == held_out  # held-out tasks are drawn first
    assert split_tasks(BENCHMARKS["bandit"], 20, 6, 0, "uniform", 10) == split_tasks(BENCHMARKS["bandit"], 20, 6, 0, "uniform")


def test_the_num_actions_column_is_each_steps_task_arm_count_and_its_actions_stay_below_it(mixed):
    train, held_out = card_tasks(mixed.card)
    num_actions, task_ids = np.asarray(mixed.columns["num_actions"]), np.asarray(mixed.columns["task_id"])
    np.testing.assert_array_equal(num_actions, [len(train[task]["means"]) for task in task_ids])
    assert set(num_actions) == {3, 4, 5} and mixed.action_space.n == 5
    assert (np.asarray(mixed.actions) < num_actions).all()
    assert {len(task["means"]) for task in held_out} == {8}
    assert card_tasks(mixed.card) == HistoryRecipe.from_params("bandit", MIXED).split()
    assert "3/4/5 in training tasks, 8 in held-out ones" in mixed.card["description"]


def test_mixed_arm_data_are_the_same_bytes_for_the_same_seed_whatever_the_workers(mixed):
    recipe = HistoryRecipe.from_params("bandit", MIXED)
    assert run_histories(recipe, 0, workers=2)[0].content_sha256() == mixed.content_sha256()
    assert run_histories(recipe, 1)[0].content_sha256() != mixed.content_sha256()


def test_ad_windows_carry_each_windows_arm_count(mixed):
    from offbench.data.samplers import make_sampler

    batch = make_sampler("ad_windows", mixed, 64, 0, window_length=10).sample()
    train, _ = card_tasks(mixed.card)
    assert batch["num_actions"].dtype.is_floating_point is False and batch["num_actions"].shape == (64,)
    np.testing.assert_array_equal(batch["num_actions"].numpy(), [len(train[task]["means"]) for task in batch["task_ids"].numpy()])
    assert (batch["actions"] < batch["num_actions"][:, None]).all()
    assert (
        "num_actions"
        not in make_sampler(
            "ad_windows", run_histories(HistoryRecipe.from_params("bandit", {**MIXED, "num_arms": 4}), 0)[0], 4, 0, window_length=10
        ).sample()
    )


@pytest.mark.parametrize(
    "params,message",
    [
        ({"num_arms": [3, 3]}, "list of distinct ones"),
        ({"num_arms": [3, 1]}, "num-arms must be at least 2"),
        ({"held_out_arms": 1}, "held-out-arms must be at least 2"),
        ({"num_arms": "4"}, "num-arms must be an integer"),
    ],
)
def test_bad_arm_counts_are_one_line(params, message):
    with pytest.raises(OffbenchError, match=message) as info:
        HistoryRecipe.from_params("bandit", {**MIXED, **params})
    assert "\n" not in str(info.value)


def test_arm_counts_are_refused_where_there_are_no_arms():
    with pytest.raises(OffbenchError, match="darkroom has no arms"):
        HistoryRecipe.from_params("darkroom", {"tasks": 4, "held_out": 1, "num_arms": 4})


def test_headless_ad_trains_on_three_to_five_arms_and_is_evaluated_on_eight(variable_arms, cli, tmp_path):
    """Its regret at 8 arms is recorded; the training tasks (3, 4 and 5 arms) cannot share one evaluation batch."""
    code, out, err = cli(
        "run", "baseline", "headless-ad", "--dataset", "bandit-variable-arms-small", "--out", tmp_path, "--name", "run", *TINY
    )
    assert code == 0, err
    (line,) = read_jsonl(tmp_path / "run" / "evaluations.jsonl")
    assert len(line["task_returns"]) == 48 and len(line["in_context_regret"]) == 10 and line["regret"] > 0
    assert "final regret" in out
    code, _, err = cli("evaluate", tmp_path / "run", "--tasks", "train")
    assert code == 2 and "its train tasks have 3, 4, 5 arms" in err and len(err.strip().splitlines()) == 1, err


def test_ad_and_dpt_are_refused_in_one_line_before_anything_is_written(variable_arms, cli, tmp_path):
    for name in ("ad", "dpt"):
        code, _, err = cli("run", "baseline", name, "--dataset", "bandit-variable-arms-small", "--out", tmp_path, "--set", "steps=2")
        assert code == 2 and len(err.strip().splitlines()) == 1, err
        assert f"{name} is trained on 5 actions and the held-out tasks have 8" in err and "headless-ad" in err
    assert not list(tmp_path.iterdir())


def test_the_in_context_protocol_gives_the_policy_the_environments_arm_count():
    from offbench.data.cards import get_card
    from offbench.evaluation.protocols import EvaluationSetup, InContext

    seen = []

    class Recording:
        def policy(self, options):
            seen.append(options.num_actions)
            raise StopIteration

    protocol = InContext(EvaluationSetup(card=get_card("bandit-variable-arms-small"), seed=0, episodes=2, every_steps=1))
    with pytest.raises(StopIteration):
        protocol.evaluate(Recording(), 0)
    np.testing.assert_array_equal(seen[0], np.full(48, 8))
