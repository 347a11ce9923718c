"""The few network pieces several baselines share: an MLP, observation normalisation, bounded actions, and
the task input of the single-task baselines on multi-task data."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F
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


class Dropout(nn.Module):
    """nn.Dropout's maths (keep each element with probability 1 - p, scale kept ones by 1 / (1 - p)), with the
    keep mask drawn by `torch.rand`: on CPU that is about twice as fast as the `bernoulli_` nn.Dropout uses."""

    def __init__(self, p: float):
        super().__init__()
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0:
            return x
        return x * torch.rand_like(x).ge_(self.p).mul_(1.0 / (1.0 - self.p))


def grouped_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """F.linear, or, with weights stacked over G groups (G, out, in) and x's rows in G equal consecutive blocks,
    each block through its own weights in one batched product (HarmoDT acting: every task under its masked weights)."""
    if weight.dim() == 2:
        return F.linear(x, weight, bias)
    groups = weight.shape[0]
    out = torch.baddbmm(bias.unsqueeze(1), x.reshape(groups, -1, x.shape[-1]), weight.transpose(1, 2))
    return out.view(*x.shape[:-1], weight.shape[1])


def grouped_layer_norm(x: torch.Tensor, norm: nn.LayerNorm) -> torch.Tensor:
    """`norm(x)`, or with its weight and bias stacked over G groups (G, dim), as `grouped_linear`."""
    if norm.weight.dim() == 1:
        return norm(x)
    groups = norm.weight.shape[0]
    h = F.layer_norm(x, norm.normalized_shape, eps=norm.eps).reshape(groups, -1, x.shape[-1])
    return torch.addcmul(norm.bias.unsqueeze(1), h, norm.weight.unsqueeze(1)).view(x.shape)


class KVCache:
    """Every layer's keys and values for `batch` sequences of up to `max_tokens` tokens; `length` are filled."""

    def __init__(self, num_layers: int, batch: int, num_heads: int, max_tokens: int, head_dim: int, device, dtype):
        shape = (num_layers, batch, num_heads, max_tokens, head_dim)
        self.keys = torch.zeros(shape, device=device, dtype=dtype)
        self.values = torch.zeros(shape, device=device, dtype=dtype)
        self.length = 0

    @property
    def max_tokens(self) -> int:
        return self.keys.shape[3]

    def clear(self) -> None:
        self.length = 0


class Block(nn.Module):
    """Pre-LayerNorm transformer block: x + attention(LN(x)), then x + MLP(LN(x)), with dropout on the attention
    weights and on both residual branches. Every transformer baseline stacks these; attention is masked one of two
    ways:

    - `bias` (B, 1, L, L) added to the scores (0 where a query may see a key, -inf where not: DT, Prompt-DT,
      HarmoDT), with `queries` picking the tokens whose outputs are wanted (all by default) and `past` the keys
      and values (B, P, dim) of P earlier tokens attended to first (`bias` then has P + L key columns). Training
      writes the attention out, so that its dropout draws are `dropout`'s (SDPA's would differ); acting uses the
      fused kernel. The parameters may be swapped (`torch.func.functional_call`) for ones stacked over groups of
      rows: see `grouped_linear`.
    - causal, without `bias` (AD, DPT): the fused kernel throughout (attention dropout its own draws), appending
      this call's keys and values to `cache` (layer `layer`) and attending to everything cached when one is given.

    `dropout` makes the dropout modules: `Dropout`, or nn.Dropout for the models trained with its draws (AD, DPT)."""

    def __init__(self, dim: int, num_heads: int, attention_dropout: float, residual_dropout: float,
                 dropout: Callable[[float], nn.Module] = Dropout):
        super().__init__()
        if dim % num_heads:
            raise ValueError(f"hidden size {dim} must be divisible by num_heads {num_heads}")
        self.num_heads = num_heads
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.attention_dropout, self.drop = dropout(attention_dropout), dropout(residual_dropout)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim), dropout(residual_dropout))

    def keys_values(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The attention keys and values (B, L, dim) this block makes of its input tokens x."""
        return self._keys_values(grouped_layer_norm(x, self.norm1))

    def _keys_values(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        dim = h.shape[-1]
        k, v = grouped_linear(h, self.qkv.weight[..., dim:, :], self.qkv.bias[..., dim:]).split(dim, dim=-1)
        return k, v

    def forward(
        self, x: torch.Tensor, bias: torch.Tensor | None = None, queries: slice | None = None,
        past: tuple[torch.Tensor, torch.Tensor] | None = None, cache: KVCache | None = None, layer: int = 0,
    ) -> torch.Tensor:
        batch, _, dim = x.shape
        h = grouped_layer_norm(x, self.norm1)
        if queries is None:
            q, k, v = grouped_linear(h, self.qkv.weight, self.qkv.bias).split(dim, dim=-1)
        else:  # keys and values of every token, queries (and everything after attention) of the wanted ones only
            k, v = self._keys_values(h)
            q = grouped_linear(h[:, queries], self.qkv.weight[..., :dim, :], self.qkv.bias[..., :dim])
            x, bias = x[:, queries], bias[:, :, queries]
        if past is not None:
            k, v = torch.cat([past[0], k], dim=1), torch.cat([past[1], v], dim=1)
        heads = lambda t: t.view(batch, -1, self.num_heads, dim // self.num_heads).transpose(1, 2)  # noqa: E731
        q, k, v = heads(q), heads(k), heads(v)
        attended = self.causal_attention(q, k, v, cache, layer) if bias is None else self.biased_attention(q, k, v, bias)
        x = x + self.drop(grouped_linear(attended.transpose(1, 2).reshape(batch, -1, dim), self.proj.weight, self.proj.bias))
        expand, activation, contract, drop = self.mlp
        hidden = activation(grouped_linear(grouped_layer_norm(x, self.norm2), expand.weight, expand.bias))
        return x + drop(grouped_linear(hidden, contract.weight, contract.bias))

    def biased_attention(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        """Attention of (B, heads, L, head_dim) queries, keys and values with `bias` added to the scores."""
        if not self.training:  # acting: the fused kernel (its effect on evaluation time: benchmarks/studies/multitask-speed.md)
            return F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
        batch, heads, _, head_dim = q.shape  # written out: attention dropout with this block's dropout draws
        scores = torch.baddbmm(
            bias.expand(batch, heads, -1, -1).flatten(0, 1), q.flatten(0, 1), k.flatten(0, 1).transpose(1, 2), alpha=head_dim**-0.5,
        )
        weights = self.attention_dropout(torch.softmax(scores, dim=-1))
        return torch.bmm(weights, v.flatten(0, 1)).view(batch, heads, -1, head_dim)

    def causal_attention(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cache: KVCache | None, layer: int) -> torch.Tensor:
        """Causal attention of (B, heads, L, head_dim) queries, keys and values, after `cache`'s tokens if given."""
        start, length = 0, q.shape[2]
        if cache is not None:  # append this call's keys and values, attend to everything cached
            start = cache.length
            cache.keys[layer, :, :, start : start + length] = k
            cache.values[layer, :, :, start : start + length] = v
            k, v = cache.keys[layer, :, :, : start + length], cache.values[layer, :, :, : start + length]
        mask, causal = None, start == 0 and length > 1
        if start > 0 and length > 1:  # new query i sees the cache and new tokens up to itself
            mask = torch.arange(start + length, device=q.device) <= torch.arange(start, start + length, device=q.device)[:, None]
        dropout = self.attention_dropout.p if self.training else 0.0
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal, dropout_p=dropout)


