"""DPT's posterior labels: for every prefix of a context, the distribution of the optimal action at the query when
the goal is uniform over the card's training goals and consistent with the prefix's rewards, checked against
stepping each training goal's own environment; DPT's loss is then the cross-entropy to that distribution."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from offbench.baselines import get_baseline
from offbench.data.samplers import make_sampler
from offbench.data.spec import DatasetSpec
from offbench.data.store import load_native
from offbench.envs.benchmarks import card_tasks
from offbench.envs.darkroom import DarkRoomEnv
from offbench.generators.histories import generate


@pytest.fixture(scope="module")
def roll_in(tmp_path_factory):
    """A tiny uniform roll-in card: 6 training goals, 2 held out, 4 contexts of 40 one-step transitions per goal."""
    out = tmp_path_factory.mktemp("roll-in") / "data.h5"
    params = {"algo": "uniform-states", "tasks": 8, "held_out": 2, "histories_per_task": 4, "episodes": 40}
    return load_native(generate("darkroom", params, seed=0, out=out, quiet=True, workers=1))


def brute_force(goals, query, cells, actions, rewards) -> np.ndarray:
    """(C + 1, A): after each prefix, the share of the goals that explain its rewards by which action is optimal at the query."""
    envs = [DarkRoomEnv(tuple(goal)) for goal in goals]
    explained = np.ones(len(goals), bool)
    out = []
    for j in range(len(actions) + 1):
        votes = np.zeros(5)
        for env, ok in zip(envs, explained):
            votes[env.optimal_action(query.astype(np.int64))] += ok
        out.append(votes / votes.sum())
        if j < len(actions):
            for k, env in enumerate(envs):
                env.reset()
                env.pos = tuple(int(v) for v in cells[j])
                explained[k] &= env.step(int(actions[j]))[1] == rewards[j]
    return np.array(out)


def test_posterior_labels_match_stepping_every_training_goal(roll_in):
    train, _ = card_tasks(roll_in.card)
    goals = [task["goal"] for task in train]
    batch = make_sampler("dpt", roll_in, batch_size=12, seed=0, context_size=10, context="shuffled", label="posterior").sample()
    probabilities = batch["optimal_action_probabilities"].numpy()
    assert probabilities.shape == (12, 11, 5)
    rewarded = 0
    for b in range(12):
        expected = brute_force(
            goals,
            batch["query_observations"][b].numpy(),
            batch["context_observations"][b].numpy(),
            batch["context_actions"][b].numpy(),
            batch["context_rewards"][b].numpy(),
        )
        np.testing.assert_allclose(probabilities[b], expected, atol=1e-6)
        if batch["context_rewards"][b].any():  # the reward names the goal: the label itself, one-hot, from then on
            rewarded += 1
            after = int(np.argmax(batch["context_rewards"][b].numpy())) + 1
            np.testing.assert_array_equal(probabilities[b, after:].argmax(-1), int(batch["optimal_actions"][b]))
            assert (probabilities[b, after:].max(-1) == 1).all()
    assert 0 < rewarded < 12  # both kinds of context were checked
    plain = make_sampler("dpt", roll_in, batch_size=12, seed=0, context_size=10, context="shuffled").sample()
    assert plain.keys() == batch.keys() - {"optimal_action_probabilities"}
    assert all(torch.equal(plain[key], batch[key]) for key in plain)  # the same draws: only the target is added


def test_dpt_posterior_loss_is_the_cross_entropy_to_the_posterior(roll_in):
    cls = get_baseline("dpt")
    torch.manual_seed(0)
    dpt = cls(cls.Config(context_size=10, embedding_dim=16, num_layers=2, label="posterior"), DatasetSpec.from_store(roll_in))
    batch = make_sampler(dpt.sampler, roll_in, 8, 0, **dpt.sampler_options()).sample()
    args = [
        batch[k] for k in ("query_observations", "context_observations", "context_actions", "context_rewards", "context_next_observations")
    ]
    with torch.no_grad():
        log_p = F.log_softmax(dpt.model(*args), -1)
    expected = -(batch["optimal_action_probabilities"] * log_p).sum(-1).mean().item()
    assert dpt.update(batch)["action_loss"] == pytest.approx(expected, rel=1e-5)
