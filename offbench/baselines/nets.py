"""The few network pieces several baselines share: an MLP, observation normalisation, bounded actions,
and the evaluation policy of a feed-forward actor."""

from __future__ import annotations

from typing import Callable

import numpy as np
import torch
from torch import nn

from offbench.baselines.base import DatasetSpec


def mlp(in_dim: int, hidden_dim: int, num_layers: int, out_dim: int, activation: type[nn.Module] = nn.ReLU) -> nn.Sequential:
    """`num_layers` hidden layers of width `hidden_dim`, then a linear output layer."""
    layers: list[nn.Module] = []
    for i in range(num_layers):
        layers += [nn.Linear(in_dim if i == 0 else hidden_dim, hidden_dim), activation()]
    layers.append(nn.Linear(hidden_dim if num_layers else in_dim, out_dim))
    return nn.Sequential(*layers)


def fused_adam(device: torch.device) -> bool:
    """Whether torch has fused Adam/AdamW kernels for `device` (one pass over all parameters instead of a loop of
    small ops: ~5 % of a small network's update on CPU)."""
    return device.type in ("cpu", "cuda")


def flat_observation_dim(spec: DatasetSpec) -> int:
    return int(np.prod(spec.observation_shape))


class ObservationNormalizer(nn.Module):
    """(obs - mean) / (std + eps) with the dataset's statistics as buffers (saved in checkpoints), flattened
    to (..., D); the identity when disabled."""

    def __init__(self, spec: DatasetSpec, eps: float, enabled: bool = True):
        super().__init__()
        dim = flat_observation_dim(spec)
        use = enabled and spec.observation_mean is not None and spec.observation_std is not None
        mean = spec.observation_mean if use else np.zeros(dim)
        std = spec.observation_std + eps if use else np.ones(dim)
        self.register_buffer("mean", torch.as_tensor(np.reshape(mean, -1), dtype=torch.float32))
        self.register_buffer("std", torch.as_tensor(np.reshape(std, -1), dtype=torch.float32))
        self.batch_dims = len(spec.observation_shape)

    def forward(self, observations: torch.Tensor) -> torch.Tensor:
        flat = observations.float().flatten(start_dim=observations.dim() - self.batch_dims)
        return (flat - self.mean) / self.std


class BoundedActions(nn.Module):
    """Maps unbounded network outputs into a Box action space: tanh scaled to [low, high] when the
    bounds are finite (CORL's tanh * max_action for symmetric bounds), identity otherwise."""

    def __init__(self, spec: DatasetSpec):
        super().__init__()
        low = np.reshape(spec.action_space.low, -1).astype(np.float32)
        high = np.reshape(spec.action_space.high, -1).astype(np.float32)
        self.bounded = bool(np.all(np.isfinite(low)) and np.all(np.isfinite(high)))
        self.register_buffer("centre", torch.as_tensor((high + low) / 2 if self.bounded else np.zeros_like(low)))
        self.register_buffer("half_range", torch.as_tensor((high - low) / 2 if self.bounded else np.ones_like(low)))

    def forward(self, raw: torch.Tensor) -> torch.Tensor:
        return self.centre + self.half_range * torch.tanh(raw) if self.bounded else raw


class FeedForwardPolicy:
    """Evaluation policy of a memoryless actor: observations (N, *obs) -> actions (N, *act) as NumPy."""

    def __init__(self, act: Callable[[torch.Tensor], torch.Tensor], spec: DatasetSpec, device: torch.device):
        self._act, self._spec, self._device = act, spec, device

    def reset(self, num_envs: int) -> None:
        pass

    @torch.no_grad()
    def act(self, observations: np.ndarray) -> np.ndarray:
        actions = self._act(torch.tensor(np.asarray(observations), device=self._device)).cpu().numpy()
        if self._spec.discrete:
            return actions.astype(np.int64)
        return actions.reshape(len(actions), *self._spec.action_space.shape).astype(self._spec.action_space.dtype)

    def observe(self, rewards: np.ndarray, dones: np.ndarray) -> None:
        pass
