"""The few network pieces several baselines share: an MLP, observation normalisation, bounded actions, and
the task input of the single-task baselines on multi-task data."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Callable

import numpy as np
import torch
from torch import nn

from offbench.baselines.base import DatasetSpec


def init_linear_(weight: torch.Tensor, bias: torch.Tensor, orthogonal: bool, gain: float | None) -> None:
    """CORL's `init_module_weights`: orthogonal hidden layers (gain sqrt 2) when `orthogonal`, and an output
    layer with a small gain (orthogonal or Xavier) when `gain` is given; otherwise PyTorch's Linear default.
    `weight` is (out, in), as in nn.Linear."""
    with torch.no_grad():
        if gain is not None:  # output layer
            (nn.init.orthogonal_ if orthogonal else nn.init.xavier_uniform_)(weight, gain=gain)
            bias.zero_()
        elif orthogonal:
            nn.init.orthogonal_(weight, gain=math.sqrt(2))
            bias.zero_()
        else:  # nn.Linear.reset_parameters
            nn.init.kaiming_uniform_(weight, a=math.sqrt(5))
            bound = 1 / math.sqrt(weight.shape[1]) if weight.shape[1] > 0 else 0.0
            nn.init.uniform_(bias, -bound, bound)


def mlp(
    in_dim: int, out_dim: int, hidden_dims: Sequence[int], orthogonal: bool = False, output_gain: float | None = None
) -> nn.Sequential:
    """ReLU MLP; `output_gain` re-initialises the last layer with a small gain (CORL's CQL networks)."""
    dims = [in_dim, *hidden_dims, out_dim]
    layers: list[nn.Module] = []
    for i in range(len(dims) - 1):
        linear = nn.Linear(dims[i], dims[i + 1])
        last = i == len(dims) - 2
        if orthogonal or (last and output_gain is not None):
            init_linear_(linear.weight, linear.bias, orthogonal, output_gain if last else None)
        layers += [linear] if last else [linear, nn.ReLU()]
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


def task_input_dim(spec: DatasetSpec) -> int:
    """Width of the task input: a one-hot of the task id on multi-task data (num_tasks > 1), nothing otherwise."""
    return spec.num_tasks if spec.num_tasks > 1 else 0


def with_task_onehot(features: torch.Tensor, task_ids: torch.Tensor | None, num_tasks: int) -> torch.Tensor:
    """(B, D) features with the one-hot of each row's task id appended (B, D + num_tasks); unchanged when the data
    has one task. Multi-task data without task ids is a programming error, not a user's."""
    if num_tasks <= 1:
        return features
    if task_ids is None:
        raise ValueError("multi-task data: the batch or the policy options must carry task_ids")
    return torch.cat([features, nn.functional.one_hot(task_ids.long(), num_tasks).to(features.dtype)], dim=-1)


def part_states(**parts) -> dict:
    """A checkpoint's `baseline` entry: each named part's (network, optimiser, scheduler) state_dict."""
    return {name: part.state_dict() for name, part in parts.items()}


def load_part_states(state: dict, **parts) -> None:
    """The inverse of `part_states`: each named part loads its own entry."""
    for name, part in parts.items():
        part.load_state_dict(state[name])
