"""The contract every registered baseline meets (d3rlpy-style: one check, called for every algorithm).

`check_baseline_contract(name, store, num_envs, device)` runs the public `offbench.testing.check_baseline` (what a
plugin's own tests run) on the baseline with its tiny config, on a store of the kind its first evaluation protocol
needs. A new baseline adds its tiny config to TINY_CONFIGS (the contract test fails until it does)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from offbench.baselines import get_baseline
from offbench.testing import check_baseline

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


def check_baseline_contract(name: str, store, num_envs: int = 3, device: str = "cpu") -> None:
    cls = get_baseline(name)
    check_baseline(cls, tiny(name, cls), store, num_envs=num_envs, device=device)


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
