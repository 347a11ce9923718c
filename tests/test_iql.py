"""IQL on tiny synthetic batches: expectile regression, advantage weighting, schedule, resume, action spaces."""

from __future__ import annotations

import io
from dataclasses import replace

import numpy as np
import pytest
import torch
from helpers import bandit_batch, best_action_batch, box_spec, discrete_spec, greedy_accuracy

from offbench.baselines.iql import IQL, IQLConfig, expectile_loss
from offbench.errors import OffbenchError

pytestmark = pytest.mark.usefixtures("one_thread")

TINY = dict(hidden_dim=32, num_hidden_layers=2, steps=1000)


def make(spec=None, seed=0, **overrides) -> IQL:
    torch.manual_seed(seed)
    config = IQLConfig(**{**TINY, "critic_lr": 3e-3, "value_lr": 3e-3, "actor_lr": 3e-3, **overrides})
    return IQL(config, spec or box_spec())


def test_expectile_loss_is_minimised_by_the_expectile():
    """For samples {0, 1} the tau-expectile is tau (tau (1 - c) = (1 - tau) c); 0.5 gives the mean."""
    samples = torch.tensor([0.0, 1.0])
    for tau in (0.5, 0.7, 0.9):
        c = torch.zeros((), requires_grad=True)
        optimizer = torch.optim.SGD([c], lr=0.5)
        for _ in range(300):
            optimizer.zero_grad()
            expectile_loss(samples - c, tau).backward()
            optimizer.step()
        assert c.item() == pytest.approx(tau, abs=1e-3)


def test_losses_finite_and_decreasing():
    algo, gen = make(), torch.Generator().manual_seed(1)
    history = [algo.update(bandit_batch(gen)) for _ in range(150)]
    assert all(np.isfinite(v) for h in history for v in h.values())
    for key in ("critic_loss", "value_loss"):
        assert np.mean([h[key] for h in history[-10:]]) < 0.25 * np.mean([h[key] for h in history[:10]])


@pytest.mark.parametrize("beta", [3.0, 0.0])
def test_advantage_weighting_prefers_the_better_action(beta):
    """Half the data takes +0.5 (reward 1), half -0.5 (reward 0). With beta 3 the advantage weights pull the
    actor towards +0.5; with beta 0 it is plain behaviour cloning and sits between the two."""
    algo, gen = make(beta=beta), torch.Generator().manual_seed(2)
    for _ in range(300):
        sign = torch.randint(0, 2, (64, 1), generator=gen).float() * 2 - 1
        batch = bandit_batch(gen, actions=0.5 * sign)
        batch["rewards"] = (sign[:, 0] > 0).float()
        algo.update(batch)
    action = algo.policy().act(np.random.default_rng(0).normal(size=(64, 3))).mean()
    if beta > 0:
        assert action > 0.25
    else:
        assert abs(action) < 0.1


@pytest.mark.parametrize("schedule, halfway", [("cosine", 0.5), ("linear", 0.5), ("constant", 1.0)])
def test_actor_learning_rate_schedule(schedule, halfway):
    algo, gen = make(steps=10, actor_lr_schedule=schedule), torch.Generator().manual_seed(3)
    lrs = []
    for _ in range(10):
        algo.update(bandit_batch(gen))
        lrs.append(algo.optimizers["actor"].param_groups[0]["lr"])
    assert lrs[0] == pytest.approx(3e-3)  # the first update runs at the full rate
    assert lrs[5] == pytest.approx(3e-3 * halfway)  # after 5 of 10 updates
    if schedule == "cosine":
        assert lrs[2] == pytest.approx(3e-3 * 0.5 * (1 + np.cos(np.pi * 0.2)))


@pytest.mark.parametrize("spec", [box_spec(), discrete_spec()], ids=["continuous", "discrete"])
def test_state_dict_round_trip_resumes_identically(spec):
    gen = torch.Generator().manual_seed(5)
    batches = [(best_action_batch if spec.discrete else bandit_batch)(gen) for _ in range(6)]
    original = make(spec=spec, seed=0, steps=6)
    for b in batches[:3]:
        original.update(b)
    buffer = io.BytesIO()
    torch.save(original.state_dict(), buffer)
    expected = [original.update(b) for b in batches[3:]]
    resumed = make(spec=spec, seed=123, steps=6)
    buffer.seek(0)
    resumed.load_state_dict(torch.load(buffer, weights_only=True))
    assert [resumed.update(b) for b in batches[3:]] == expected


def test_discrete_actions_use_a_categorical_actor():
    algo, gen = make(spec=discrete_spec()), torch.Generator().manual_seed(7)
    assert algo.discrete
    for _ in range(250):
        algo.update(best_action_batch(gen))
    assert greedy_accuracy(algo.policy()) > 0.9


def test_reward_normalisation_uses_the_return_range():
    spec = replace(box_spec(), return_range=(-5.0, 15.0), max_episode_length=10)
    algo = make(spec=spec, normalize_reward=True)
    assert algo.nets["transform"].reward_scale == pytest.approx(10 / 20)
    with pytest.raises(OffbenchError, match="normalize_reward needs episodes with different returns"):
        make(spec=replace(box_spec(), return_range=(3.0, 3.0)), normalize_reward=True)


def test_bad_options_are_one_line_errors():
    with pytest.raises(OffbenchError, match="actor_lr_schedule must be one of"):
        make(actor_lr_schedule="exponential")
    with pytest.raises(OffbenchError, match="deterministic_actor applies to continuous actions only"):
        make(spec=discrete_spec(), deterministic_actor=True)


def test_deterministic_actor_regresses_to_data_actions():
    algo, gen = make(deterministic_actor=True, beta=0.0), torch.Generator().manual_seed(8)
    for _ in range(200):
        algo.update(bandit_batch(gen, actions=torch.full((64, 1), -0.4)))
    np.testing.assert_allclose(algo.policy().act(np.zeros((4, 3), np.float32)), -0.4, atol=0.05)
