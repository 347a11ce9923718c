"""Headless-AD: random action embeddings drawn per sequence, a policy equivariant to the order of the available
actions, one model acting in an action space it never saw, its contrastive loss falling, and sampled evaluations
drawn from the run's seed."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from helpers import read_jsonl
from tiny_runs import run_args

from offbench.baselines.headless_ad import HeadlessAD, HeadlessADConfig
from offbench.data.spec import DatasetSpec
from offbench.envs.bandits import BanditBatch
from offbench.errors import OffbenchError
from offbench.evaluation.policy import PolicyOptions
from offbench.generators.histories import HistoryRecipe, run_histories
from offbench.generators.references import reference_pulls
from offbench.testing import check_baseline

BANDIT = {"suite": "offbench", "id": "offbench/BernoulliBandit-v0"}
PULLS = 40
TRAIN_ARMS = (3, 4)


def bandit_spec(arms: int) -> DatasetSpec:
    return DatasetSpec(gym.spaces.Box(0.0, 1.0, (1,), np.float32), gym.spaces.Discrete(arms), (1,), arms, True, 1)


def thompson_histories(arms: int, tasks: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(tasks, PULLS) actions and rewards of Thompson sampling on uniform Bernoulli bandits of `arms` arms."""
    means = np.random.default_rng(seed).uniform(size=(tasks, arms))
    actions, rewards, _ = reference_pulls(BANDIT, [{"means": row.tolist()} for row in means], "thompson", PULLS, seed)
    return actions, rewards


def window_batches(rows: int, seed: int):
    """Batches of whole histories from 3- and 4-armed bandits mixed, each row with its own `num_actions`."""
    data = {arms: thompson_histories(arms, 64, arms) for arms in TRAIN_ARMS}
    rng = np.random.default_rng(seed)
    while True:
        arms = rng.choice(TRAIN_ARMS, rows)
        pick = rng.integers(0, 64, rows)
        yield {
            "observations": torch.zeros(rows, PULLS, 1),
            "actions": torch.as_tensor(np.stack([data[a][0][i] for a, i in zip(arms, pick)])),
            "rewards": torch.as_tensor(np.stack([data[a][1][i] for a, i in zip(arms, pick)]), dtype=torch.float32),
            "num_actions": torch.as_tensor(arms),
        }


@pytest.fixture(scope="module")
def trained():
    """A small Headless-AD trained for 150 updates on 3- and 4-armed bandits; its losses. One torch thread, as
    the function-scoped torch_settings would set, which runs only after a module's fixtures."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    torch.manual_seed(1)
    config = HeadlessADConfig(context_steps=PULLS, embedding_dim=16, hidden_dim=32, num_layers=2, num_heads=2, learning_rate=3e-3)
    headless = HeadlessAD(config, bandit_spec(max(TRAIN_ARMS)))
    batches = window_batches(16, seed=0)
    losses = [headless.update(next(batches))["contrastive_loss"] for _ in range(150)]
    torch.set_num_threads(threads)
    return headless, losses


def test_action_embeddings_are_drawn_afresh_for_every_sequence():
    torch.manual_seed(0)
    headless = HeadlessAD(HeadlessADConfig(**{**HeadlessAD.tiny_config, "context_steps": PULLS}), bandit_spec(4))
    seen = []
    headless.model.register_forward_pre_hook(lambda module, args: seen.append(args[3].detach().clone()))
    batches = window_batches(3, seed=0)
    headless.update(next(batches))
    headless.update(next(batches))
    first, second = seen
    assert first.shape == (3, 4, 16)
    assert not torch.allclose(first[0], first[1]), "two sequences of one batch share their embeddings"
    assert not torch.allclose(first, second), "two batches share their embeddings"
    gram = first @ first.transpose(1, 2)
    torch.testing.assert_close(gram, torch.eye(4).expand(3, 4, 4), atol=1e-5, rtol=0)  # orthonormal: the paper's draw


def test_permuting_the_available_actions_permutes_the_policy_the_same_way(trained):
    headless, _ = trained
    permutation = np.array([4, 2, 0, 5, 1, 3])  # label j of the second policy is action permutation[j] of the first
    inverse = np.argsort(permutation)
    first, second = (headless.policy(PolicyOptions(num_actions=np.full(5, 6))) for _ in range(2))
    first.reset(5)
    second.reset(5)
    second.embeddings = first.embeddings[:, torch.as_tensor(permutation)]
    rewards = (np.random.default_rng(4).random((PULLS + 5, 5)) < 0.5).astype(np.float32)
    for step in range(PULLS + 5):  # past context_steps: the window slides
        actions = first.act(np.zeros((5, 1), np.float32))
        assert np.array_equal(second.act(np.zeros((5, 1), np.float32)), inverse[actions])
        torch.testing.assert_close(
            second.last_probabilities, first.last_probabilities[:, torch.as_tensor(permutation)], atol=1e-5, rtol=1e-4
        )
        for policy in (first, second):
            policy.observe(rewards[step], np.ones(5, bool))


def test_one_model_acts_and_learns_in_context_with_more_actions_than_it_trained_on(trained):
    headless, _ = trained
    means = np.random.default_rng(5).uniform(size=(200, 6))
    env = BanditBatch(means, seed=0)
    policy = headless.policy(PolicyOptions(deterministic=False, num_actions=np.full(200, 6)))
    policy.reset(200)
    pulled, regret = [], []
    for _ in range(PULLS):
        actions = policy.act(np.zeros((200, 1), np.float32))
        _, rewards, _, _ = env.step(actions)
        policy.observe(rewards, np.ones(200, bool))
        pulled.append(actions)
        regret.append(np.mean(means.max(1) - means[np.arange(200), actions]))
    assert policy.last_probabilities.shape == (200, 6)
    assert set(np.concatenate(pulled)) == set(range(6)), "arms 4 and 5, never seen in training, are acted on"
    random_regret = np.mean(means.max(1) - means.mean(1))
    assert np.mean(regret[-10:]) < 0.8 * random_regret, "the last pulls do better than chance: it learns the new bandits in context"


def test_the_contrastive_loss_falls_on_a_tiny_run(trained):
    _, losses = trained
    assert np.mean(losses[-10:]) < 0.85 * np.mean(losses[:10])


def sampled_pulls(headless: HeadlessAD, seed: int) -> np.ndarray:
    """(PULLS, 20) actions of a sampled evaluation with `evaluation_seed` = seed on fixed 6-armed bandits."""
    headless.evaluation_seed = seed
    means = np.random.default_rng(6).uniform(size=(20, 6))
    env, policy = BanditBatch(means, seed=0), headless.policy(PolicyOptions(deterministic=False, num_actions=np.full(20, 6)))
    policy.reset(20)
    pulled = []
    for _ in range(PULLS):
        actions = policy.act(np.zeros((20, 1), np.float32))
        _, rewards, _, _ = env.step(actions)
        policy.observe(rewards, np.ones(20, bool))
        pulled.append(actions)
    return np.stack(pulled)


def test_sampled_evaluation_draws_from_the_run_seed(trained, darkroom, tmp_path):
    """A run sets its seed on the baseline, and the policy's embeddings and sampled actions follow it: the same seed
    repeats an evaluation, seeds of a run differ in their evaluation noise too."""
    from offbench.training.trainer import start_run

    run = start_run("headless-ad", "darkroom-small", seed=3, out=tmp_path)
    run.lock.release()
    assert run.build_baseline().evaluation_seed == 3
    headless, _ = trained
    try:
        first, again, other = (sampled_pulls(headless, seed) for seed in (0, 0, 3))
    finally:
        headless.evaluation_seed = HeadlessAD.evaluation_seed
    assert np.array_equal(first, again)
    assert not np.array_equal(first, other)


def test_a_row_is_never_offered_more_actions_than_embedding_dim(trained):
    headless, _ = trained
    with pytest.raises(OffbenchError, match="between 1 and embedding_dim"):
        headless.policy(PolicyOptions(num_actions=np.full(3, 17)))


def test_headless_ad_meets_the_baseline_contract():
    store, _ = run_histories(HistoryRecipe.from_params("bandit", {"algo": "thompson", "tasks": 6, "held_out": 2, "episodes": 40}), 0)
    check_baseline(HeadlessAD, None, store)


@pytest.fixture(scope="module")
def permuted_home(tmp_path_factory):
    from tests.training.conftest import generated_home

    return generated_home(tmp_path_factory, "darkroom-small", "darkroom-permuted-small")


def goal_walker(size: int = 9):
    """A callable policy that knows the held-out goals and the plain action order: optimal on darkroom-small's
    held-out tasks, lost wherever a task's labels make other moves."""
    from offbench.data.cards import get_card
    from offbench.envs.benchmarks import card_tasks
    from offbench.envs.gridworld import cell_index, policy_table

    goals = np.array([task["goal"] for task in card_tasks(get_card("darkroom-small"))[1]])
    table = policy_table(size)[cell_index(goals, size)]  # [task, cell] plain-order optimal move
    return lambda observations: table[np.arange(len(goals)), cell_index(np.asarray(observations, dtype=np.int64), size)]


def test_the_permuted_card_plays_each_held_out_goal_in_its_own_action_order(permuted_home, monkeypatch, cli, tmp_path):
    """The same goals as darkroom-small's held-out ones: a walker in the plain order is optimal there and lost on the
    permuted card; Headless-AD, trained on plain-order histories, is evaluated there on every held-out goal."""
    import offbench

    monkeypatch.setenv("OFFBENCH_HOME", str(permuted_home))
    plain = offbench.evaluate(goal_walker(), "darkroom-small", episodes=2)
    permuted = offbench.evaluate(goal_walker(), "darkroom-permuted-small", episodes=2)
    from offbench.data.cards import get_card
    from offbench.envs.benchmarks import BENCHMARKS, card_tasks

    optimal = BENCHMARKS["darkroom"].make_batch(card_tasks(get_card("darkroom-small"))[1]).optimal_returns.tolist()
    assert plain.returns == optimal and all(r < o for r, o in zip(permuted.returns, optimal)), (plain.returns, permuted.returns)
    tiny = {"context_steps": 20, "embedding_dim": 8, "hidden_dim": 16, "num_layers": 1, "num_heads": 2, "eval_every": 4, "eval_episodes": 2}
    code, _, err = cli(*run_args("headless-ad", "darkroom-permuted-small", steps=4, out=tmp_path, **tiny), "--name", "run")
    assert code == 0, err
    (line,) = read_jsonl(tmp_path / "run" / "evaluations.jsonl")
    assert line["tasks"] == "held-out" and len(line["task_returns"]) == 2 and all(len(r) == 2 for r in line["task_returns"])
