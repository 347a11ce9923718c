"""CQL on tiny synthetic batches: losses, the conservative term, targets, resume, action spaces."""

from __future__ import annotations

import io

import gymnasium as gym
import numpy as np
import pytest
import torch
from helpers import bandit_batch, best_action_batch, box_spec, discrete_spec, greedy_accuracy

from offbench.baselines.base import DatasetSpec
from offbench.baselines.cql import CQL, CQLConfig
from offbench.errors import OffbenchError

pytestmark = pytest.mark.usefixtures("one_thread")

TINY = dict(hidden_dim=32, critic_hidden_layers=2, actor_hidden_layers=2, cql_n_actions=4)


def make(config=None, spec=None, seed=0, **overrides) -> CQL:
    torch.manual_seed(seed)
    return CQL(config or CQLConfig(**{**TINY, "critic_lr": 3e-3, "policy_lr": 1e-3, **overrides}), spec or box_spec())


def test_continuous_losses_finite_and_decreasing():
    algo, gen = make(cql_alpha=1.0), torch.Generator().manual_seed(1)
    history = [algo.update(bandit_batch(gen)) for _ in range(150)]
    assert all(np.isfinite(v) for h in history for v in h.values())
    assert np.mean([h["td_loss"] for h in history[-10:]]) < 0.25 * np.mean([h["td_loss"] for h in history[:10]])
    assert {"critic_loss", "cql_gap", "policy_loss", "alpha"} <= set(history[0])


def q_at(algo: CQL, obs: torch.Tensor, action: float) -> float:
    obs = algo.nets["transform"].observations(obs)
    actions = torch.full((obs.shape[0], 1, 1), action)
    return algo._critic_at(algo.nets["critic"], obs, actions).mean().item()


@pytest.mark.parametrize("cql_alpha", [5.0, 0.0])
def test_conservative_term_pushes_out_of_distribution_values_down(cql_alpha):
    """All data actions lie in [0.4, 0.6] with reward 0: CQL must rank an unseen action (-0.8) well below them;
    without the regulariser (alpha 0) the critic has no reason to, and the gap stays near zero."""
    algo, gen = make(cql_alpha=cql_alpha), torch.Generator().manual_seed(2)
    for _ in range(150):
        batch = bandit_batch(gen, actions=0.4 + 0.2 * torch.rand(64, 1, generator=gen))
        batch["rewards"] = torch.zeros(64)
        algo.update(batch)
    probe = torch.randn(256, 3, generator=gen)
    gap = q_at(algo, probe, -0.8) - q_at(algo, probe, 0.5)
    if cql_alpha > 0:
        assert gap < -1.0
    else:
        assert abs(gap) < 0.3


@pytest.mark.parametrize("target_gap, direction", [(100.0, -1), (-100.0, 1)])
def test_lagrangian_alpha_prime_moves_towards_target_gap(target_gap, direction):
    """alpha' shrinks while the action gap is below its target and grows while above."""
    algo = make(cql_lagrange=True, cql_target_action_gap=target_gap, cql_alpha=1.0)
    gen = torch.Generator().manual_seed(3)
    before = algo.nets["log_alpha_prime"].value.item()
    for _ in range(20):
        losses = algo.update(bandit_batch(gen))
    after = algo.nets["log_alpha_prime"].value.item()
    assert np.sign(after - before) == direction
    assert losses["alpha_prime"] == pytest.approx(np.exp(after), rel=0.05)


def test_target_critic_polyak_average_and_period():
    algo = make(tau=0.5, target_update_period=2)
    gen = torch.Generator().manual_seed(4)
    target0 = [p.clone() for p in algo.nets["target_critic"].parameters()]
    algo.update(bandit_batch(gen))  # step 1: no target update
    assert all(torch.equal(a, b) for a, b in zip(target0, algo.nets["target_critic"].parameters()))
    algo.update(bandit_batch(gen))  # step 2: target <- 0.5 target + 0.5 online
    for old, new, online in zip(target0, algo.nets["target_critic"].parameters(), algo.nets["critic"].parameters()):
        assert torch.allclose(new, 0.5 * old + 0.5 * online)


@pytest.mark.parametrize("spec", [box_spec(), discrete_spec()], ids=["continuous", "discrete"])
def test_state_dict_round_trip_resumes_identically(spec):
    gen = torch.Generator().manual_seed(5)
    batches = [(best_action_batch if spec.discrete else bandit_batch)(gen) for _ in range(6)]
    original = make(spec=spec, seed=0)
    for b in batches[:3]:
        original.update(b)
    buffer = io.BytesIO()
    torch.save(original.state_dict(), buffer)
    expected = [original.update(b) for b in batches[3:]]

    resumed = make(spec=spec, seed=123)  # different initial weights and noise, all overwritten by the state
    buffer.seek(0)
    resumed.load_state_dict(torch.load(buffer, weights_only=True))
    assert [resumed.update(b) for b in batches[3:]] == expected
    for a, b in zip(original.nets.state_dict().values(), resumed.nets.state_dict().values()):
        assert torch.equal(a, b)


def test_bc_warm_start_clones_data_actions():
    algo, gen = make(bc_steps=10_000, policy_lr=3e-3), torch.Generator().manual_seed(6)
    for _ in range(200):
        algo.update(bandit_batch(gen, actions=torch.full((64, 1), 0.3)))
    actions = algo.policy().act(np.random.default_rng(0).normal(size=(8, 3)))
    np.testing.assert_allclose(actions, 0.3, atol=0.05)


def test_continuous_policy_maps_to_action_bounds():
    spec = box_spec(act_dim=2, low=-2.0, high=6.0)
    algo = make(spec=spec)
    policy = algo.policy()
    policy.reset(4)
    actions = policy.act(np.zeros((4, 3), np.float32))
    assert actions.shape == (4, 2) and actions.dtype == np.float32
    np.testing.assert_allclose(actions, 2.0, atol=0.1)  # tanh(mean ~ 0) -> the middle of [-2, 6]
    data = torch.tensor([[-2.0, 6.0]])
    assert torch.allclose(algo.nets["transform"].actions_to_unit(data), torch.tensor([[-1.0, 1.0]]))


def test_discrete_uses_quantile_critic_and_learns_the_best_action():
    """Uniform data over 3 actions, reward 1 for the best one: the greedy policy must pick it."""
    algo = make(spec=discrete_spec(), critic_lr=3e-3, n_quantiles=16)
    assert algo.discrete and "actor" not in algo.nets
    gen = torch.Generator().manual_seed(7)
    losses = [algo.update(best_action_batch(gen)) for _ in range(250)]
    assert all(np.isfinite(v) for h in losses for v in h.values())
    assert np.mean([h["qr_loss"] for h in losses[-10:]]) < np.mean([h["qr_loss"] for h in losses[:10]])
    assert greedy_accuracy(algo.policy()) > 0.9


def test_continuous_only_options_refuse_discrete_data():
    with pytest.raises(OffbenchError, match="cql_lagrange apply to continuous actions only"):
        make(spec=discrete_spec(), cql_lagrange=True)


@pytest.mark.parametrize(
    "space",
    [gym.spaces.MultiDiscrete([2, 3]), gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)],
    ids=["multidiscrete", "unbounded-box"],
)
def test_unsupported_action_space_is_one_line_error(space):
    spec = DatasetSpec(gym.spaces.Box(-1, 1, (3,)), space, (3,), 2, False, 10)
    with pytest.raises(OffbenchError) as err:
        make(spec=spec)
    assert "cql needs" in str(err.value) and "\n" not in str(err.value)
