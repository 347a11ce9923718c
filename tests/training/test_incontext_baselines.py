"""Algorithm Distillation and DPT: the key-value cache gives what recomputation gives, the context is carried
across episodes and cleared by reset, training steps change the loss, on tiny models and darkroom-small."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from offbench.baselines import get_baseline
from offbench.data.samplers import make_sampler
from offbench.data.spec import DatasetSpec
from offbench.envs.benchmarks import card_tasks, make_batch_env
from offbench.evaluation.policy import PolicyOptions

# the tiny models with two layers (the cache crosses layers) and short contexts (evaluation runs past them); AD in
# its three-token layout, without dropout (outputs compared between two ways of computing them)
NO_DROPOUT = {"attention_dropout": 0.0, "residual_dropout": 0.0, "embedding_dropout": 0.0}
TINY = {
    "ad": {**get_baseline("ad").tiny_config, "token_layout": "sar", "context_steps": 6, "num_layers": 2, **NO_DROPOUT},
    "dpt": {**get_baseline("dpt").tiny_config, "context_size": 12, "num_layers": 2},
}


def spec_of(store):
    return DatasetSpec.from_store(store)


def options(deterministic: bool = True):
    return PolicyOptions(deterministic=deterministic)


def build(name: str, store, **overrides):
    torch.manual_seed(0)
    cls = get_baseline(name)
    return cls(cls.Config(**{**TINY[name], **overrides}), spec_of(store))


def held_out_env(store):
    _, held_out = card_tasks(store.card)
    return make_batch_env(store.card["env"], held_out)


def rollout(policies, env, steps: int, reset: bool = True):
    """Step `env` with the first policy's actions; every policy acts and observes the same steps.
    Returns each policy's logits per step."""
    observations = env.reset()
    if reset:
        for policy in policies:
            policy.reset(env.num_envs)
    logits = [[] for _ in policies]
    for _ in range(steps):
        actions = [policy.act(observations) for policy in policies]
        for i, policy in enumerate(policies):
            logits[i].append(policy.last_logits.clone())
        observations, rewards, terminated, truncated = env.step(actions[0])
        dones = terminated | truncated
        for policy in policies:
            policy.observe(rewards, dones)
        if dones.any():
            observations = env.reset(dones)
    return [torch.stack(per_step) for per_step in logits]


def train_a_little(baseline, store, updates: int = 30):
    sampler = make_sampler(baseline.sampler, store, 8, 0, **baseline.sampler_options())
    return [baseline.update(sampler.sample())["action_loss"] for _ in range(updates)]


@pytest.mark.parametrize("layout", ["sar", "step"])
def test_kv_cache_gives_the_logits_of_full_recomputation(darkroom, layout):
    """Three episodes with a 6-step context: the window restarts every 3 steps, the cache grows in between;
    every step's logits match recomputing the window from scratch, and so do the actions."""
    ad = build("ad", darkroom, token_layout=layout)
    train_a_little(ad, darkroom, 20)
    cached = ad.policy(options())
    ad.config.kv_cache = False
    recomputed = ad.policy(options())
    with_cache, without = rollout([cached, recomputed], held_out_env(darkroom), steps=60)
    assert cached.cache is not None and recomputed.cache is None
    torch.testing.assert_close(with_cache, without, rtol=0, atol=1e-5)
    assert torch.equal(with_cache.argmax(-1), without.argmax(-1))


@pytest.mark.parametrize("layout", ["sar", "step"])
def test_sliding_window_acts_on_the_last_context_steps_of_its_history(darkroom, layout):
    """eval_window = "sliding": every step's logits are the model's on the last `context_steps` steps of the
    history so far (fewer before the context fills), recomputed here from the recorded history alone;
    "half" sees other windows once the context is full and the same ones before."""
    ad = build("ad", darkroom, token_layout=layout, eval_window="sliding")
    train_a_little(ad, darkroom, 20)
    ad.model.eval()
    steps = ad.config.context_steps
    sliding = ad.policy(options())
    env = held_out_env(darkroom)
    observations = env.reset()
    sliding.reset(env.num_envs)
    history, logits = {"obs": [], "act": [], "rew": []}, []
    for _ in range(4 * steps):
        actions = sliding.act(observations)
        logits.append(sliding.last_logits.clone())
        history["obs"].append(torch.tensor(observations, dtype=torch.float32))
        history["act"].append(torch.tensor(actions))
        observations, rewards, terminated, truncated = env.step(actions)
        history["rew"].append(torch.tensor(rewards, dtype=torch.float32))
        sliding.observe(rewards, terminated | truncated)
        if (terminated | truncated).any():
            observations = env.reset(terminated | truncated)
    with torch.no_grad():
        for t, step_logits in enumerate(logits):
            start = max(0, t + 1 - steps)
            window = [torch.stack(history[k][start : t + 1], dim=1) for k in ("obs", "act", "rew")]
            torch.testing.assert_close(step_logits, ad.model(*window)[:, -1].float(), rtol=0, atol=1e-5)
    ad.config.eval_window = "half"
    half = rollout([ad.policy(options())], held_out_env(darkroom), steps=4 * steps)[0]
    ad.config.eval_window = "sliding"
    again = rollout([ad.policy(options())], held_out_env(darkroom), steps=4 * steps)[0]
    torch.testing.assert_close(again, torch.stack(logits), rtol=0, atol=1e-5)
    torch.testing.assert_close(half[:steps], again[:steps], rtol=0, atol=1e-5)
    assert not torch.allclose(half[steps:], again[steps:], atol=1e-4)


@pytest.mark.parametrize("name", ["ad", "dpt"])
def test_context_is_carried_across_episodes_and_cleared_by_reset(darkroom, name):
    """Every episode starts in the same cell: the first step of episode 2 sees episode 1 in its context (other
    logits than episode 1's first step), and a reset policy starts again exactly as the first time."""
    baseline = build(name, darkroom)
    train_a_little(baseline, darkroom, 20)
    env = held_out_env(darkroom)
    horizon = env.horizon
    policy = baseline.policy(options())
    first = rollout([policy], env, steps=2 * horizon)[0]
    assert not torch.allclose(first[0], first[horizon], atol=1e-4)
    again = rollout([policy], env, steps=2 * horizon)[0]
    torch.testing.assert_close(again, first, rtol=0, atol=0)


def episode_actions(policy, env) -> np.ndarray:
    """The actions `policy` takes over one episode of every env row, from a reset."""
    observations = env.reset()
    policy.reset(env.num_envs)
    taken = []
    for _ in range(env.horizon):
        taken.append(policy.act(observations))
        observations, rewards, terminated, truncated = env.step(taken[-1])
        policy.observe(rewards, terminated | truncated)
    return np.stack(taken)


@pytest.mark.parametrize("name", ["ad", "dpt"])
def test_sampled_actions_are_reproducible_and_differ_from_greedy(darkroom, name):
    baseline = build(name, darkroom)
    env = held_out_env(darkroom)
    sampled, greedy = baseline.policy(options(False)), baseline.policy(options(True))
    assert np.array_equal(episode_actions(sampled, env), episode_actions(sampled, env))
    assert not np.array_equal(episode_actions(sampled, env), episode_actions(greedy, env))


@pytest.mark.parametrize("name", ["ad", "dpt"])
def test_sampled_evaluation_draws_from_the_run_seed(darkroom, name, tmp_path):
    """A run sets its seed on the baseline, and sampled actions follow it: seeds of a run differ in their
    evaluation noise too, so intervals over seeds include it."""
    from helpers import TRAINING_CONFIGS

    from offbench.training.trainer import start_run

    run = start_run(name, "darkroom-small", TRAINING_CONFIGS / f"{name}-tiny.toml", seed=3, out=tmp_path)
    run.lock.release()
    assert run.build_baseline().evaluation_seed == 3
    baseline = build(name, darkroom)
    env = held_out_env(darkroom)
    sampled = {}
    for seed in (0, 3):
        baseline.evaluation_seed = seed
        sampled[seed] = episode_actions(baseline.policy(options(False)), env)
    assert not np.array_equal(sampled[0], sampled[3])


@pytest.mark.parametrize(
    "name,overrides", [("ad", {"token_layout": "sar"}), ("ad", {"token_layout": "step"}), ("dpt", {}), ("dpt", {"state_table": True})]
)
def test_updates_fit_a_batch(darkroom, name, overrides):
    """Repeated updates on one batch drive its loss down: gradients reach the model through every token kind."""
    baseline = build(name, darkroom, learning_rate=3e-3, **overrides)
    batch = make_sampler(baseline.sampler, darkroom, 8, 0, **baseline.sampler_options()).sample()
    losses = [baseline.update(batch)["action_loss"] for _ in range(40)]
    assert losses[-1] < 0.7 * losses[0]


@pytest.mark.parametrize("state_table", [False, True])
def test_dpt_trains_every_prefix(darkroom, state_table):
    """DPT's output at position j depends on the query and the first j transitions only (causal), and the
    loss averages over all C + 1 positions."""
    dpt = build("dpt", darkroom, state_table=state_table)
    sampler = make_sampler(dpt.sampler, darkroom, 4, 0, **dpt.sampler_options())
    batch = sampler.sample()
    dpt.model.eval()
    args = [
        batch[k] for k in ("query_observations", "context_observations", "context_actions", "context_rewards", "context_next_observations")
    ]
    full = dpt.model(*args)
    assert full.shape == (4, dpt.config.context_size + 1, dpt.spec.action_dim)
    changed = [a.clone() for a in args]
    changed[3][:, 5] += 1.0  # the 6th transition's reward: positions 0..5 must not see it
    other = dpt.model(*changed)
    torch.testing.assert_close(other[:, :6], full[:, :6])
    assert not torch.allclose(other[:, 6:], full[:, 6:])


def test_dpt_state_table_adds_one_vector_per_state_to_each_token(darkroom):
    """With state_table, a transition's token is the Linear embedding of [s, a, s', r] plus s's vector from one table
    and s''s from another; the query token adds its state's vector from s's table. A space that is not a small
    integer grid is refused with a one-line error."""
    import dataclasses

    from gymnasium.spaces import Box

    from offbench.errors import OffbenchError

    dpt = build("dpt", darkroom, state_table=True)
    batch = make_sampler(dpt.sampler, darkroom, 3, 0, **dpt.sampler_options()).sample()
    query, observations, actions, rewards, next_observations = (
        batch[k] for k in ("query_observations", "context_observations", "context_actions", "context_rewards", "context_next_observations")
    )
    model, tokens = dpt.model, []
    model.transformer.register_forward_pre_hook(lambda module, inputs: tokens.append(inputs[0].detach().clone()))
    table, next_table = model.state_table.table.weight.detach().clone(), model.next_state_table.table.weight.detach().clone()
    model(query, observations, actions, rewards, next_observations)
    with torch.no_grad():  # the same pass without the tables' vectors: the Linear embedding alone
        model.state_table.table.weight.zero_()
        model.next_state_table.table.weight.zero_()
    model(query, observations, actions, rewards, next_observations)
    index = lambda obs: obs[..., 0].long() * 9 + obs[..., 1].long()  # Dark Room 9 x 9: (x, y) -> x * 9 + y
    expected = tokens[1].clone()
    expected[:, 0] += table[index(query)]
    expected[:, 1:] += table[index(observations)] + next_table[index(next_observations)]
    torch.testing.assert_close(tokens[0], expected)
    float_spec = dataclasses.replace(spec_of(darkroom), observation_space=Box(0.0, 8.0, (2,)))
    with pytest.raises(OffbenchError, match="state_table needs observations that are a small integer grid"):
        get_baseline("dpt")(get_baseline("dpt").Config(**TINY["dpt"], state_table=True), float_spec)


def test_dpt_offline_context_is_collected_at_random_then_fixed(darkroom):
    """offline_episodes = 2: two episodes of uniform actions fill the context; from then on it does not change,
    so every later episode (same start cell, greedy) repeats the same logits step for step."""
    dpt = build("dpt", darkroom, offline_episodes=2, context_size=40)
    env = held_out_env(darkroom)
    policy = dpt.policy(options())
    logits = rollout([policy], env, steps=4 * env.horizon)[0]
    assert (policy.context_length == 2 * env.horizon).all()
    torch.testing.assert_close(logits[2 * env.horizon : 3 * env.horizon], logits[3 * env.horizon :], rtol=0, atol=0)


def test_dpt_acts_through_episodes_longer_than_the_data_has(darkroom):
    """An evaluation horizon beyond the data's longest episode (an XLand card's own max_steps) grows the buffer."""
    from dataclasses import replace

    torch.manual_seed(0)
    cls = get_baseline("dpt")
    dpt = cls(cls.Config(**TINY["dpt"]), replace(spec_of(darkroom), max_episode_length=3))
    env = held_out_env(darkroom)
    (logits,) = rollout([dpt.policy(options())], env, steps=2 * env.horizon)
    assert logits.shape[0] == 2 * env.horizon and torch.isfinite(logits).all()
