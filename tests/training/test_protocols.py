"""The evaluation seam: the card's kind picks the protocol, every baseline meets one contract, and each
protocol evaluates and records what docs/run-directory.md says (single-task numbers unchanged)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from offbench.baselines import BASELINES, get_baseline
from offbench.errors import OffbenchError
from offbench.evaluation.policy import PolicyOptions
from offbench.evaluation.protocols import PROTOCOL_FOR_KIND, PROTOCOLS, EvaluationSetup, InContext, build_protocol, run_in_context

from baseline_contract import check_baseline_contract, multi_task_store
from helpers import TRAINING_CONFIGS as CONFIGS


def contract_store(name: str, pendulum):
    """A store of the kind the baseline's first protocol evaluates."""
    import offbench

    protocol = get_baseline(name).evaluation_protocols[0]
    if protocol == "multi-task":
        return multi_task_store()
    if protocol == "in-context":
        return offbench.load("darkroom-small")
    return pendulum


@pytest.mark.parametrize("name", sorted(BASELINES))
def test_every_registered_baseline_meets_the_contract(name, pendulum):
    check_baseline_contract(name, contract_store(name, pendulum))


@pytest.mark.parametrize("name", sorted(n for n in BASELINES if "multi-task" in get_baseline(n).evaluation_protocols))
def test_multi_task_capable_baselines_meet_the_contract_on_multi_task_data(name):
    check_baseline_contract(name, multi_task_store(), num_envs=3)


def test_every_card_kind_has_a_registered_protocol():
    from offbench.data.cards import all_cards

    kinds = {card.kind for card in all_cards().values()}
    assert kinds <= set(PROTOCOL_FOR_KIND) and set(PROTOCOL_FOR_KIND.values()) <= set(PROTOCOLS)


def test_single_task_numbers_are_unchanged_by_the_seam(pendulum, cli, tmp_path):
    """Pinned before the protocols existed (commit 56191ed): BC, 60 updates, 3 evaluation episodes."""
    code, _, err = cli("run", "baseline", "bc", "--dataset", "pendulum-scripted", "--steps", "60", "--set", "eval_every=30",
                       "--set", "eval_episodes=3", "--set", "log_every=30", "--out", tmp_path, "--name", "pin")
    assert code == 0, err
    lines = [json.loads(line) for line in (tmp_path / "pin" / "evaluations.jsonl").read_text().splitlines()]
    np.testing.assert_allclose(lines[0]["returns"], [-913.4526280798615, -1012.2808309942956, -943.6761276118941], rtol=1e-6)
    np.testing.assert_allclose(lines[1]["returns"], [-903.2932082598426, -990.5027738774875, -1009.7865595370764], rtol=1e-6)
    evaluation = json.loads((tmp_path / "pin" / "run.json").read_text())["evaluation"]
    assert evaluation["protocol"] == "single-task" and evaluation["episode_seeds"] == "10000 + 1000 * seed + episode"


def test_a_baseline_without_the_cards_protocol_is_refused_before_anything_is_written(cli, tmp_path):
    code, _, err = cli("run", "baseline", "bc", "--dataset", "darkroom-small", "--out", tmp_path / "runs")
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "learning-history dataset is evaluated in-context" in err and "'bc' has no in-context mode" in err
    assert not (tmp_path / "runs").exists()


# ---------------------------------------------------------------------------------------------- in-context
class ArmCounter:
    """A tiny in-context learner for bandits: pull every arm once, then the best mean so far (per row);
    records what the evaluator tells it."""

    def __init__(self, num_arms: int):
        self.num_arms = num_arms

    def reset(self, num_envs):
        self.resets = getattr(self, "resets", 0) + 1
        self.sums, self.counts = np.zeros((num_envs, self.num_arms)), np.zeros((num_envs, self.num_arms))
        self.dones = []

    def act(self, observations):
        untried = self.counts == 0
        means = np.where(untried, np.inf, self.sums / np.maximum(self.counts, 1))
        self.last = means.argmax(axis=1)
        return self.last

    def observe(self, rewards, dones):
        rows = np.arange(len(rewards))
        self.sums[rows, self.last] += rewards
        self.counts[rows, self.last] += 1
        self.dones.append(dones.copy())


class ArmCounterBaseline:
    """An in-context 'baseline' around ArmCounter, to drive the trainer through the in-context protocol."""

    name = "arm-counter"
    sampler = "transitions"
    action_kinds = ("discrete",)
    evaluation_protocols = ("in-context",)
    return_conditioned = False

    from dataclasses import dataclass as _dataclass

    @_dataclass
    class Config:
        unused: int = 0

    def __init__(self, config, spec, device="cpu"):
        self.spec, self.weight = spec, torch.zeros(1)

    def update(self, batch):
        return {"loss": 0.0}

    def policy(self, options):
        assert options.task_ids is not None
        return ArmCounter(self.spec.action_dim)

    def state_dict(self):
        return {"weight": self.weight}

    def load_state_dict(self, state):
        self.weight = state["weight"]


def test_in_context_rollout_keeps_context_across_episodes_and_scores_regret():
    from offbench.envs.bandits import BanditBatch

    means = np.array([[0.1, 0.9, 0.5], [0.8, 0.2, 0.4]])
    policy = ArmCounter(3)
    results = run_in_context(policy, BanditBatch(means, seed=0), episodes=12)
    assert policy.resets == 1 and len(policy.dones) == 12 and all(d.all() for d in policy.dones)  # one pull per episode
    assert results.returns.shape == (2, 12) and (results.lengths == 1).all()
    chosen = results.expected_returns  # the pulled arms' means: first the three arms in order, then the best seen
    np.testing.assert_allclose(chosen[:, :3], means)
    regret_always_first_arm = run_in_context(_Constant(0), BanditBatch(means, seed=0), episodes=5)
    np.testing.assert_allclose(regret_always_first_arm.expected_returns, np.repeat(means[:, :1], 5, axis=1))


class _Constant:
    def __init__(self, action):
        self.action = action

    def reset(self, num_envs):
        self.n = num_envs

    def act(self, observations):
        return np.full(self.n, self.action)

    def observe(self, rewards, dones):
        pass


def test_in_context_protocol_evaluates_held_out_tasks_unless_asked_for_training_tasks():
    from offbench.data.cards import get_card
    from offbench.envs.benchmarks import card_tasks

    card = get_card("bandit-small")
    train, held_out = card_tasks(card)
    held = InContext(EvaluationSetup(card=card, seed=0, episodes=5, every_steps=1))
    assert held.task_list == held_out and held.task_ids == list(range(len(train), len(train) + len(held_out)))
    on_train = InContext(EvaluationSetup(card=card, seed=0, episodes=5, every_steps=1, tasks="train"))
    assert on_train.task_list == train and on_train.task_ids == list(range(len(train)))
    with pytest.raises(OffbenchError, match="--tasks must be one of held-out, train"):
        InContext(EvaluationSetup(card=card, seed=0, episodes=5, every_steps=1, tasks="test"))


def test_in_context_run_records_the_curve_regret_and_reevaluates(cli, tmp_path, monkeypatch):
    import sys
    import types

    module = types.ModuleType("arm_counter_baseline")
    module.ArmCounterBaseline = ArmCounterBaseline
    monkeypatch.setitem(sys.modules, "arm_counter_baseline", module)
    monkeypatch.setitem(BASELINES, "arm-counter", "arm_counter_baseline")
    standard = tmp_path / "arm-counter.toml"
    standard.write_text('source = "tests"\n')
    monkeypatch.setattr("offbench.training.config.standard_config_path", lambda name, dataset_id: standard)
    code, out, err = cli("run", "baseline", "arm-counter", "--dataset", "bandit-small", "--steps", "4", "--set", "eval_every=2",
                         "--set", "eval_episodes=30", "--set", "batch_size=4", "--out", tmp_path, "--name", "ctx")
    assert code == 0, err
    run_dir = tmp_path / "ctx"
    evaluation = json.loads((run_dir / "run.json").read_text())["evaluation"]
    assert evaluation["protocol"] == "in-context" and evaluation["in_context_episodes"] == 30 and evaluation["tasks"] == "held-out"
    lines = [json.loads(line) for line in (run_dir / "evaluations.jsonl").read_text().splitlines()]
    assert [line["step"] for line in lines] == [2, 4]
    for line in lines:
        assert len(line["in_context_returns"]) == 30 and line["mean_return"] == line["in_context_returns"][-1]
        assert len(line["returns"]) == len(evaluation["task_ids"]) and np.all(np.diff(line["in_context_regret"]) >= -1e-12)
        assert line["regret"] == line["in_context_regret"][-1] and 0 < line["optimal_return"] <= 1
    assert lines[0]["in_context_returns"] == lines[1]["in_context_returns"]  # same seeds, context reset per evaluation
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["score_metric"] == "regret" and summary["final"]["regret"] == lines[-1]["regret"]

    code, out, err = cli("evaluate", run_dir, "--tasks", "train", "--episodes", "10")
    assert code == 0, err and "in context (train tasks)" in out
    code, _, err = cli("evaluate", run_dir, "--tasks", "test")
    assert code == 2 and "--tasks must be one of held-out, train" in err


# ---------------------------------------------------------------------------------------------- multi-task
def test_multi_task_bc_conditions_on_the_task_id():
    """MTBC: the same observation gets each task's action (the data's action is the task id)."""
    from baseline_contract import tiny

    from offbench.data.samplers import make_sampler
    from offbench.data.spec import DatasetSpec

    store = multi_task_store()
    cls = get_baseline("bc")
    torch.manual_seed(0)
    config = tiny("bc", cls)
    config.learning_rate = 3e-3
    bc = cls(config, DatasetSpec.from_store(store))
    sampler = make_sampler("transitions", store, 32, 0)
    for _ in range(300):
        bc.update(sampler.sample())
    policy = bc.policy(PolicyOptions(task_ids=np.array([0, 1, 2])))
    policy.reset(3)
    same = np.repeat(np.asarray(store.observations[:1]), 3, axis=0)
    assert policy.act(same).tolist() == [0, 1, 2]
    policy.drop(np.array([True, False, True]))  # the task-1 row's episode ended: its task id goes with it
    assert policy.act(same[:2]).tolist() == [0, 2]


def test_best_return_per_task():
    from offbench.training.trainer import best_return_per_task

    store = multi_task_store(num_tasks=3, episodes_per_task=4)
    returns, tasks = store.episode_returns(), np.asarray(store.columns["task_id"])[store.episode_starts[:-1]]
    np.testing.assert_allclose(best_return_per_task(store), [returns[tasks == t].max() for t in range(3)])


class _CountingBaseline:
    """Acts 0 everywhere; counts policy calls per step (the multi-task protocol batches all lanes into one)."""

    def __init__(self):
        self.built, self.act_calls, self.rows = [], 0, []

    def policy(self, options):
        self.built.append(options)
        outer = self

        class Act(_Constant):
            def act(self, observations):
                outer.act_calls += 1
                outer.rows.append(len(observations))
                return super().act(observations)

        return Act(0)


def test_multi_task_protocol_batches_every_task_into_one_policy_call_and_records_per_task():
    from offbench.data.cards import get_card

    card = get_card("minigrid/tiny-near-optimal")
    protocol = build_protocol(EvaluationSetup(card=card, seed=0, episodes=2, every_steps=1))
    baseline = _CountingBaseline()
    (record,) = protocol.evaluate(baseline, step=7)
    names = card.env["kwargs"]["tasks"]
    assert len(baseline.built) == 1 and baseline.built[0].task_ids.tolist() == [0, 1, 2, 0, 1, 2]  # episode-major lanes
    assert set(baseline.rows) == {6} and baseline.act_calls == max(record["lengths"])  # one call per step for all lanes
    assert list(record["per_task"]) == names and [t["task_id"] for t in record["per_task"].values()] == [0, 1, 2]
    assert record["success_rate"] == pytest.approx(np.mean([t["success_rate"] for t in record["per_task"].values()]))
    assert record["mean_return"] == pytest.approx(np.mean([t["mean_return"] for t in record["per_task"].values()]))
    assert len(record["returns"]) == 6 and all(len(t["returns"]) == 2 for t in record["per_task"].values())


def test_multi_task_run_end_to_end_and_per_task_targets_for_dt(cli, tmp_path):
    code, _, err = cli("run", "baseline", "bc", "--dataset", "minigrid/tiny-near-optimal", "--config", CONFIGS / "bc-tiny.toml",
                       "--set", "eval_episodes=1", "--out", tmp_path, "--name", "mtbc")
    assert code == 0, err
    lines = [json.loads(line) for line in (tmp_path / "mtbc" / "evaluations.jsonl").read_text().splitlines()]
    assert lines and all(len(line["per_task"]) == 3 for line in lines)
    summary = json.loads((tmp_path / "mtbc" / "summary.json").read_text())
    assert summary["score_metric"] == "success_rate"
    code, _, err = cli("run", "baseline", "dt", "--dataset", "minigrid/tiny-near-optimal", "--config", CONFIGS / "dt-tiny.toml",
                       "--set", "eval_episodes=0", "--out", tmp_path, "--name", "mtdt")
    assert code == 0, err
    evaluation = json.loads((tmp_path / "mtdt" / "run.json").read_text())["evaluation"]
    assert evaluation["protocol"] == "multi-task" and evaluation["target_returns"] is None
    assert len(evaluation["task_target_returns"]) == 3 and len(evaluation["tasks"]) == 3


def test_config_fields_that_disagree_are_refused_before_anything_is_written(pendulum, cli, tmp_path):
    code, _, err = cli("run", "baseline", "dt", "--dataset", "pendulum-scripted", "--set", "embedding_dim=10", "--set", "num_heads=3",
                       "--out", tmp_path / "runs")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "embedding_dim (10) must be divisible by num_heads (3)" in err
    assert not (tmp_path / "runs").exists()
