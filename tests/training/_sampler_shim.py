"""A minimal stand-in for offbench.data.samplers (written on the `samplers` branch), used by the training
tests only while that module is missing on this branch: `install()` does nothing once it exists.

Same interface: make_sampler(kind, store, batch_size, seed, device="cpu", **opts) -> object with
sample() -> dict of tensors, state_dict() / load_state_dict(); kinds "transitions" and "segments"
(left-padded, returns-to-go to the episode end), per the briefing's batch conventions.
"""

from __future__ import annotations

import importlib.util
import sys
import types

import numpy as np
import torch


class _Sampler:
    def __init__(self, kind, store, batch_size, seed, device="cpu", segment_length=20):
        self.kind, self.store, self.batch_size, self.device = kind, store, batch_size, torch.device(device)
        self.segment_length = segment_length
        self.rng = np.random.default_rng(seed)
        self.observations = np.asarray(store.observations)
        self.actions = np.asarray(store.actions)
        self.rewards = np.asarray(store.rewards, dtype=np.float32)
        starts = store.episode_starts
        episode = store.step_episode
        cumulative = np.concatenate([[0.0], np.cumsum(self.rewards, dtype=np.float64)])
        self.returns_to_go = (cumulative[starts[1:]][episode] - cumulative[:-1]).astype(np.float32)
        self.timesteps = np.arange(store.num_transitions) - starts[:-1][episode]

    def _tensor(self, array, dtype=None):
        return torch.as_tensor(np.ascontiguousarray(array), dtype=dtype, device=self.device)

    def sample(self):
        index = self.rng.integers(self.store.num_transitions, size=self.batch_size)
        if self.kind == "transitions":
            return {
                "observations": self._tensor(self.observations[index], torch.float32),
                "actions": self._tensor(self.actions[index]),
                "rewards": self._tensor(self.rewards[index]),
                "next_observations": self._tensor(self.store.next_observations(index), torch.float32),
                "terminals": self._tensor(np.asarray(self.store.terminations)[index], torch.float32),
            }
        k = self.segment_length
        steps = index[:, None] + np.arange(-k + 1, 1)  # segments ending at the sampled step
        mask = (steps >= 0) & (self.timesteps[np.maximum(steps, 0)] <= self.timesteps[index][:, None]) & (
            steps >= index[:, None] - self.timesteps[index][:, None]
        )
        rows = np.where(mask, steps, 0)
        fill = lambda array: np.where(mask.reshape(mask.shape + (1,) * (array.ndim - 1)), array[rows], 0)  # noqa: E731
        return {
            "observations": self._tensor(fill(self.observations), torch.float32),
            "actions": self._tensor(fill(self.actions)),
            "rewards": self._tensor(fill(self.rewards)),
            "returns_to_go": self._tensor(fill(self.returns_to_go)),
            "timesteps": self._tensor(fill(self.timesteps), torch.int64),
            "mask": self._tensor(mask),
        }

    def state_dict(self):
        return {"rng": self.rng.bit_generator.state}

    def load_state_dict(self, state):
        self.rng.bit_generator.state = state["rng"]


def make_sampler(kind, store, batch_size, seed, device="cpu", **opts):
    return _Sampler(kind, store, batch_size, seed, device, **opts)


def install() -> None:
    if importlib.util.find_spec("offbench.data.samplers") is None and "offbench.data.samplers" not in sys.modules:
        module = types.ModuleType("offbench.data.samplers")
        module.make_sampler = make_sampler
        sys.modules["offbench.data.samplers"] = module


if __name__ == "__main__":  # `python tests/_sampler_shim.py ARGS...` = `offbench ARGS...` with the stand-in installed
    install()
    from offbench.cli import main

    main(sys.argv[1:])
