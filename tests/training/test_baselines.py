"""DT and BC on real batches: they learn, discrete actions work, and DT's evaluation context is built
exactly like its training segments (left padding, causal attention, returns-to-go)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from offbench.baselines import get_baseline
from offbench.baselines.base import Baseline, DatasetSpec
from offbench.data.samplers import make_sampler
from offbench.data.store import EpisodeStore
from offbench.evaluation.policy import Policy, PolicyOptions

# DT's tiny model with two layers, no warm-up and a faster rate: its loss must fall within 300 updates
TINY_DT = {**get_baseline("dt").tiny_config, "num_layers": 2, "warmup_steps": 1, "learning_rate": 1e-3}


def discrete_store(seed=0) -> EpisodeStore:
    """Episodes where the right action is a function of the observation (action = argmax of obs[:3])."""
    rng = np.random.default_rng(seed)
    episodes = []
    for length in (6, 9, 4, 7) * 4:
        observations = rng.normal(size=(length + 1, 3)).astype(np.float32)
        truncations = np.zeros(length, bool)
        truncations[-1] = True
        episodes.append(
            {
                "observations": observations,
                "actions": observations[:-1].argmax(axis=1).astype(np.int64),
                "rewards": rng.normal(size=length).astype(np.float32),
                "terminations": np.zeros(length, bool),
                "truncations": truncations,
            }
        )
    return EpisodeStore.from_episodes(
        episodes, observation_space=gym.spaces.Box(-np.inf, np.inf, (3,), np.float32), action_space=gym.spaces.Discrete(3)
    )


def train(name, store, steps, batch_size, **config):
    cls = get_baseline(name)
    torch.manual_seed(0)
    spec = DatasetSpec.from_store(store)
    baseline = cls(cls.Config(**config), spec)
    options = baseline.sampler_options() if hasattr(baseline, "sampler_options") else {}
    sampler = make_sampler(cls.sampler, store, batch_size, 0, **options)
    losses = [next(iter(baseline.update(sampler.sample()).values())) for _ in range(steps)]
    return baseline, losses


@pytest.mark.parametrize(("name", "config", "batch"), [("bc", dict(hidden_dim=64, learning_rate=1e-3), 64), ("dt", TINY_DT, 16)])
def test_continuous_baselines_learn_and_act_in_bounds(pendulum, name, config, batch):
    # the noiseless block (first 25 episodes): actions are a function of the history, so the loss must fall
    expert = EpisodeStore.from_episodes(
        [pendulum.episode(i) for i in range(25)], observation_space=pendulum.observation_space, action_space=pendulum.action_space
    )
    baseline, losses = train(name, expert, 300, batch, **config)
    assert isinstance(baseline, Baseline)
    assert np.mean(losses[-10:]) < 0.7 * np.mean(losses[:10])
    policy = baseline.policy(PolicyOptions(target_return=-150.0))  # bc has no use for a target
    assert isinstance(policy, Policy)
    policy.reset(4)
    actions = policy.act(np.asarray(pendulum.observations[:4]))
    assert actions.shape == (4, 1) and actions.dtype == np.float32 and np.all(np.abs(actions) <= 2.0)


@pytest.mark.parametrize(("name", "config", "batch"), [("bc", dict(hidden_dim=32, learning_rate=1e-3), 32), ("dt", TINY_DT, 16)])
def test_discrete_baselines_learn_with_cross_entropy(name, config, batch):
    store = discrete_store()
    baseline, losses = train(name, store, 300, batch, **config)
    assert np.mean(losses[:10]) > 0.9 and np.mean(losses[-10:]) < 0.5 * np.mean(losses[:10])  # CE starts near log(3)
    policy = baseline.policy(PolicyOptions(target_return=0.0))
    policy.reset(5)
    observations = np.asarray(store.observations[:5])
    actions = policy.act(observations)
    assert actions.dtype == np.int64 and actions.shape == (5,)
    assert np.mean(actions == observations.argmax(axis=1)) >= 0.6


def test_dt_policy_context_matches_training_segments(pendulum):
    """The policy's prediction at step t equals the model on a training-format (left-padded) segment of
    the same history: target minus rewards so far as returns-to-go, within-episode timesteps."""
    dt, _ = train("dt", pendulum, 5, 8, **TINY_DT)
    dt.model.eval()
    k, target = dt.config.segment_length, -300.0
    episode = pendulum.episode(3)
    policy = dt.policy(PolicyOptions(target_return=target))
    policy.reset(1)
    taken = []
    for t in range(8):
        taken.append(policy.act(episode["observations"][t : t + 1])[0])
        policy.observe(episode["rewards"][t : t + 1], np.zeros(1, bool))
        lo = max(0, t - k + 1)
        pad = k - (t + 1 - lo)
        rtg = target - np.concatenate([[0.0], np.cumsum(episode["rewards"])])[lo : t + 1]
        segment = {
            "observations": np.concatenate([np.zeros((pad, 3)), episode["observations"][lo : t + 1]]),
            "actions": np.concatenate([np.zeros((pad, 1)), np.stack(taken)[lo : t + 1]]),
            "returns_to_go": np.concatenate([np.zeros(pad), rtg]),
            "timesteps": np.concatenate([np.zeros(pad), np.arange(lo, t + 1)]),
            "mask": np.arange(k) >= pad,
        }
        segment["actions"][-1] = 7.0  # the current action token comes after the state token: never seen
        batch = {key: torch.as_tensor(value[None]) for key, value in segment.items()}
        with torch.no_grad():
            predicted = dt.model(
                batch["observations"].float(),
                batch["actions"].float(),
                batch["returns_to_go"].float() * dt.config.reward_scale,
                batch["timesteps"].long(),
                batch["mask"],
            )[0, -1]
        np.testing.assert_allclose(predicted.numpy(), taken[-1], rtol=1e-5, atol=1e-6)


def test_dt_attention_is_causal_and_ignores_padding(pendulum):
    dt, _ = train("dt", pendulum, 3, 8, **TINY_DT)
    dt.model.eval()
    batch = make_sampler("segments", pendulum, 8, 1, segment_length=5).sample()
    batch["mask"][:, :2] = False  # two padded steps at the left of every segment
    run = lambda b: dt.model(b["observations"], b["actions"], b["returns_to_go"] * 1e-3, b["timesteps"], b["mask"])  # noqa: E731
    with torch.no_grad():
        before = run(batch)
        changed = {key: value.clone() for key, value in batch.items()}
        changed["observations"][:, -1] += 5.0  # the future: the last step
        changed["observations"][:, :2] = 123.0  # padding
        changed["returns_to_go"][:, :2] = -1e4
        after = run(changed)
    torch.testing.assert_close(after[:, 2:-1], before[:, 2:-1])
    assert not torch.allclose(after[:, -1], before[:, -1])


def test_dt_last_block_on_state_queries_matches_the_full_block(pendulum):
    """The last block computes only the s-token outputs; they equal the full block's, in value and gradient."""
    dt, _ = train("dt", pendulum, 3, 8, **TINY_DT)
    dt.model.eval()
    block = dt.model.blocks[-1]
    batch = make_sampler("segments", pendulum, 8, 1, segment_length=5).sample()
    batch["mask"][:, :2] = False
    bias = dt.model.attention_bias(batch["mask"])
    x = torch.randn(8, 3 * 5 - 1, TINY_DT["embedding_dim"], requires_grad=True)
    full = block(x, bias)[:, 1::3]
    (full_grad,) = torch.autograd.grad(full.square().sum(), x)
    part = block(x, bias, queries=slice(1, None, 3))
    (part_grad,) = torch.autograd.grad(part.square().sum(), x)
    torch.testing.assert_close(part, full)
    torch.testing.assert_close(part_grad, full_grad)


def test_dt_block_acts_with_the_same_attention_it_trains_with():
    """Acting uses the fused attention kernel, training the written-out one (for its dropout draws): without dropout
    the two give the same outputs, padding and causality included, over several heads."""
    from offbench.baselines.dt import causal_bias
    from offbench.baselines.nets import Block

    torch.manual_seed(0)
    block = Block(16, num_heads=4, attention_dropout=0.0, residual_dropout=0.0)
    real = torch.ones(3, 14, dtype=torch.bool)
    real[0, :6] = False  # left padding in one row
    bias = causal_bias(real)
    x = torch.randn(3, 14, 16)
    with torch.no_grad():
        trained_way = block.train()(x, bias, queries=slice(1, None, 3))
        acting_way = block.eval()(x, bias, queries=slice(1, None, 3))
    torch.testing.assert_close(acting_way, trained_way)


def test_keep_freed_memory_takes_on_glibc():
    import platform

    from offbench.utils import keep_freed_memory

    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        pytest.skip("mallopt tuning is glibc's")
    assert keep_freed_memory()
    assert torch.ones(1 << 20).sum().item() == 1 << 20  # allocations of many MiB still work after it


class CountdownEnv(gym.Env):
    """Episodes whose length depends on the reset seed (3 to 6 steps); reward = the action, so returns show what
    the policy chose at every step."""

    observation_space = gym.spaces.Box(-np.inf, np.inf, (3,), np.float32)
    action_space = gym.spaces.Box(-2.0, 2.0, (1,), np.float32)

    def reset(self, *, seed=None, options=None):
        self.left, self.rng = 3 + seed % 4, np.random.default_rng(seed)
        return self.rng.normal(size=3).astype(np.float32), {}

    def step(self, action):
        self.left -= 1
        return self.rng.normal(size=3).astype(np.float32), float(np.asarray(action).sum()), False, self.left == 0, {}


class EveryRow:
    """The same policy without `drop`: the evaluator must ask it for every row to the end of the batch."""

    def __init__(self, policy):
        self.policy, self.batch_sizes = policy, []

    def reset(self, num_envs):
        self.policy.reset(num_envs)

    def act(self, observations):
        self.batch_sizes.append(len(observations))
        return self.policy.act(observations)

    def observe(self, rewards, dones):
        self.policy.observe(rewards, dones)


def test_dt_evaluation_drops_finished_rows_and_acts_the_same(pendulum):
    from offbench.evaluation.rollout import run_episodes

    dt, _ = train("dt", pendulum, 5, 8, **TINY_DT)
    seeds = [0, 1, 2, 3, 4, 5]  # lengths 3, 4, 5, 6, 3, 4

    class Dropping(EveryRow):
        def drop(self, keep):
            self.policy.drop(keep)

    every, dropping = EveryRow(dt.policy(PolicyOptions(target_return=-100.0))), Dropping(dt.policy(PolicyOptions(target_return=-100.0)))
    full, compact = run_episodes(every, CountdownEnv, seeds), run_episodes(dropping, CountdownEnv, seeds)
    assert full.lengths == compact.lengths == [3, 4, 5, 6, 3, 4]
    np.testing.assert_allclose(compact.returns, full.returns, rtol=1e-6)
    assert every.batch_sizes == [6] * 6 and dropping.batch_sizes == [6, 6, 6, 4, 2, 1]


def test_block_masks_causally_alike_by_bias_by_kernel_and_through_a_cache():
    """One block serves both families: DT's additive causal bias, AD/DPT's causal kernel, and the key-value cache
    fed a token at a time all give the same outputs."""
    from offbench.baselines.dt import causal_bias
    from offbench.baselines.nets import Block, KVCache

    torch.manual_seed(0)
    block = Block(16, num_heads=4, attention_dropout=0.0, residual_dropout=0.0).eval()
    x = torch.randn(2, 7, 16)
    cache = KVCache(1, 2, 4, 7, 4, x.device, x.dtype)
    with torch.no_grad():
        by_bias = block(x, causal_bias(torch.ones(2, 7, dtype=torch.bool)))
        by_kernel = block(x)
        token_by_token = []
        for t in range(7):
            token_by_token.append(block(x[:, t : t + 1], cache=cache))
            cache.length += 1
    torch.testing.assert_close(by_kernel, by_bias)
    torch.testing.assert_close(torch.cat(token_by_token, dim=1), by_kernel)
