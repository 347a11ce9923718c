"""The contract every registered baseline meets (d3rlpy-style: one check, called for every algorithm).

`check_baseline_contract(name, store, num_envs, device)` builds the baseline with its tiny config on a store of
the kind its first evaluation protocol needs, takes two updates on `device`, round-trips its state through a
weights-only checkpoint, and checks the policy it builds acts in the store's action space, the same way after the
round trip. Off the CPU the checkpoint must also load onto the CPU (as `offbench evaluate --device cpu` and resume
load it: `map_location="cpu"`) and act there. A new baseline adds its tiny config to TINY_CONFIGS (the contract
test fails until it does)."""

from __future__ import annotations

import dataclasses
import io

import gymnasium as gym
import numpy as np
import torch

from offbench.baselines import get_baseline
from offbench.data.samplers import SAMPLERS, make_sampler
from offbench.data.spec import DatasetSpec
from offbench.evaluation.policy import Policy, PolicyOptions
from offbench.evaluation.protocols import PROTOCOLS
from offbench.training.config import config_from_dict

TINY_CONFIGS: dict[str, dict] = {
    "bc": dict(hidden_dim=16),
    "dt": dict(segment_length=4, embedding_dim=16, num_layers=1, num_heads=1, warmup_steps=1),
    "cql": dict(hidden_dim=16, critic_hidden_layers=1, actor_hidden_layers=1, n_quantiles=4, cql_n_actions=2),
    "iql": dict(hidden_dim=16, num_hidden_layers=1),
    "moore-bc": dict(expert_dims=[8, 8], num_experts=2),
    "moore-iql": dict(expert_dims=[8, 8], num_experts=2),
    "prompt-dt": dict(segment_length=4, prompt_length=2, embedding_dim=16, num_layers=1, num_heads=1, warmup_steps=1),
    "harmodt": dict(segment_length=4, prompt_length=2, embedding_dim=16, num_layers=1, num_heads=1, warmup_steps=1, mask_interval=1, steps=4),
    "ad": dict(context_steps=4, embedding_dim=8, hidden_dim=16, num_layers=1, num_heads=2),
    "dpt": dict(context_size=4, embedding_dim=16, num_layers=1),
}


def tiny(name: str, cls: type):
    assert name in TINY_CONFIGS, f"add a tiny config for '{name}' to tests/training/baseline_contract.py TINY_CONFIGS"
    config = cls.Config()
    for key, value in TINY_CONFIGS[name].items():
        assert hasattr(config, key), f"{name}: TINY_CONFIGS sets unknown field {key}"
        setattr(config, key, value)
    return config


def check_class(name: str) -> type:
    cls = get_baseline(name)
    assert cls.name == name and dataclasses.is_dataclass(cls.Config)
    assert cls.sampler in SAMPLERS, f"{name}: sampler '{cls.sampler}' is not registered"
    assert set(cls.action_kinds) <= {"continuous", "discrete"} and cls.action_kinds
    assert set(cls.evaluation_protocols) <= set(PROTOCOLS) and cls.evaluation_protocols
    assert isinstance(cls.return_conditioned, bool)
    values = dataclasses.asdict(cls.Config())
    assert dataclasses.asdict(config_from_dict(cls, values).baseline) == values  # configs serialise
    return cls


def check_baseline_contract(name: str, store, num_envs: int = 3, device: str = "cpu") -> None:
    cls = check_class(name)
    spec = DatasetSpec.from_store(store)
    torch.manual_seed(0)
    baseline = cls(tiny(name, cls), spec, device)
    options = baseline.sampler_options() if hasattr(baseline, "sampler_options") else {}
    sampler = make_sampler(cls.sampler, store, 8, 0, device=device, **options)
    for _ in range(2):
        losses = baseline.update(sampler.sample())
        assert losses and all(np.isfinite(float(v)) for v in losses.values())

    buffer = io.BytesIO()
    torch.save(baseline.state_dict(), buffer)
    restored = {}
    for where in dict.fromkeys([device, "cpu"]):  # the same device, and the CPU
        buffer.seek(0)
        restored[where] = cls(tiny(name, cls), spec, where)
        restored[where].load_state_dict(torch.load(buffer, map_location="cpu", weights_only=True))

    task_ids = np.arange(num_envs) % max(spec.num_tasks, 1)
    policy_options = PolicyOptions(task_ids=task_ids, target_return=1.0 if cls.return_conditioned else None)
    observations = np.asarray(store.observations[:num_envs])
    acted = []
    for model in (baseline, *restored.values()):
        policy = model.policy(policy_options)
        assert isinstance(policy, Policy)
        policy.reset(num_envs)
        actions = policy.act(observations)
        policy.observe(np.zeros(num_envs, np.float32), np.zeros(num_envs, bool))
        assert len(actions) == num_envs and all(spec.action_space.contains(np.asarray(a, dtype=spec.action_space.dtype)) for a in actions)
        acted.append(actions)
    np.testing.assert_array_equal(acted[0], acted[1])  # the checkpoint holds everything the policy uses


def multi_task_store(num_tasks: int = 3, episodes_per_task: int = 6, length: int = 8, seed: int = 0):
    """Discrete-action multi-task data where the right action is the task id whatever the observation."""
    from offbench.data.store import EpisodeStore

    rng = np.random.default_rng(seed)
    episodes = []
    for task in range(num_tasks):
        for _ in range(episodes_per_task):
            truncations = np.zeros(length, bool)
            truncations[-1] = True
            episodes.append({
                "observations": rng.normal(size=(length + 1, 4)).astype(np.float32),
                "actions": np.full(length, task, np.int64),
                "rewards": rng.uniform(size=length).astype(np.float32) + task,
                "terminations": np.zeros(length, bool),
                "truncations": truncations,
                "task_id": np.full(length, task, np.int64),
            })
    return EpisodeStore.from_episodes(
        episodes, observation_space=gym.spaces.Box(-np.inf, np.inf, (4,), np.float32), action_space=gym.spaces.Discrete(num_tasks)
    )
