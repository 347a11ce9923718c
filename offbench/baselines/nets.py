"""The few network pieces several baselines share: an MLP, observation normalisation, bounded actions, and
the task input of the single-task baselines on multi-task data."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Callable, TypeVar, cast

import gymnasium as gym
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


def mlp(in_dim: int, out_dim: int, hidden_dims: Sequence[int], orthogonal: bool = False, output_gain: float | None = None) -> nn.Sequential:
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

    mean: torch.Tensor
    std: torch.Tensor

    def __init__(self, spec: DatasetSpec, eps: float, enabled: bool = True):
        super().__init__()
        dim = flat_observation_dim(spec)
        mean, std = spec.observation_mean, spec.observation_std
        if enabled and mean is not None and std is not None:
            std = std + eps
        else:
            mean, std = np.zeros(dim), np.ones(dim)
        self.register_buffer("mean", torch.as_tensor(np.reshape(mean, -1), dtype=torch.float32))
        self.register_buffer("std", torch.as_tensor(np.reshape(std, -1), dtype=torch.float32))
        self.batch_dims = len(spec.observation_shape)

    def forward(self, observations: torch.Tensor) -> torch.Tensor:
        flat = observations.float().flatten(start_dim=observations.dim() - self.batch_dims)
        return (flat - self.mean) / self.std


def action_bounds(spec: DatasetSpec) -> tuple[np.ndarray, np.ndarray]:
    """The flattened (low, high) of a continuous action space, which every loader gives as a Box."""
    space = spec.action_space
    if not isinstance(space, gym.spaces.Box):
        raise ValueError(f"continuous actions need a Box action space, got {space}")
    return np.reshape(space.low, -1), np.reshape(space.high, -1)


class BoundedActions(nn.Module):
    """Maps unbounded network outputs into a Box action space: tanh scaled to [low, high] when the
    bounds are finite (CORL's tanh * max_action for symmetric bounds), identity otherwise."""

    centre: torch.Tensor
    half_range: torch.Tensor

    def __init__(self, spec: DatasetSpec):
        super().__init__()
        low, high = (bound.astype(np.float32) for bound in action_bounds(spec))
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


ModuleT = TypeVar("ModuleT", bound=nn.Module)


def part(parts: nn.ModuleDict, name: str, kind: type[ModuleT] | tuple[type[ModuleT], ...]) -> ModuleT:
    """`parts[name]` as the class it was built as: a ModuleDict types its items as any Module, which hides their
    methods and attributes from type checks."""
    module = parts[name]
    if not isinstance(module, kind):
        raise TypeError(f"{name!r} is a {type(module).__name__}, not a {kind}")
    return module


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

    `dropout` makes the dropout modules: `Dropout`, or nn.Dropout for the models trained with its draws (AD, DPT).
    `feed_forward` (AD, DPT with `moe = "t2mir"`) replaces the MLP: a `T2MIRFeedForward`, its output under the
    residual dropout, its routing statistics appended to `routing` when one is given."""

    def __init__(
        self,
        dim: int,
        num_heads: int,
        attention_dropout: float,
        residual_dropout: float,
        dropout: Callable[[float], Dropout | nn.Dropout] = Dropout,
        feed_forward: T2MIRFeedForward | None = None,
    ):
        super().__init__()
        if dim % num_heads:
            raise ValueError(f"hidden size {dim} must be divisible by num_heads {num_heads}")
        self.num_heads = num_heads
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.attention_dropout, self.drop = dropout(attention_dropout), dropout(residual_dropout)
        self.feed_forward = feed_forward
        self.mlp = (
            None
            if feed_forward is not None
            else (nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim), dropout(residual_dropout)))
        )

    def keys_values(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The attention keys and values (B, L, dim) this block makes of its input tokens x."""
        return self._keys_values(grouped_layer_norm(x, self.norm1))

    def _keys_values(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        dim = h.shape[-1]
        k, v = grouped_linear(h, self.qkv.weight[..., dim:, :], self.qkv.bias[..., dim:]).split(dim, dim=-1)
        return k, v

    def forward(
        self,
        x: torch.Tensor,
        bias: torch.Tensor | None = None,
        queries: slice | None = None,
        past: tuple[torch.Tensor, torch.Tensor] | None = None,
        cache: KVCache | None = None,
        layer: int = 0,
        routing: list[Routing] | None = None,
    ) -> torch.Tensor:
        batch, _, dim = x.shape
        h = grouped_layer_norm(x, self.norm1)
        if queries is None:
            q, k, v = grouped_linear(h, self.qkv.weight, self.qkv.bias).split(dim, dim=-1)
        else:  # keys and values of every token, queries (and everything after attention) of the wanted ones only
            if bias is None:
                raise ValueError("picking queries needs an attention bias")
            k, v = self._keys_values(h)
            q = grouped_linear(h[:, queries], self.qkv.weight[..., :dim, :], self.qkv.bias[..., :dim])
            x, bias = x[:, queries], bias[:, :, queries]
        if past is not None:
            k, v = torch.cat([past[0], k], dim=1), torch.cat([past[1], v], dim=1)
        heads = lambda t: t.view(batch, -1, self.num_heads, dim // self.num_heads).transpose(1, 2)  # noqa: E731
        q, k, v = heads(q), heads(k), heads(v)
        attended = self.causal_attention(q, k, v, cache, layer) if bias is None else self.biased_attention(q, k, v, bias)
        x = x + self.drop(grouped_linear(attended.transpose(1, 2).reshape(batch, -1, dim), self.proj.weight, self.proj.bias))
        if self.feed_forward is not None:
            return x + self.drop(self.feed_forward(self.norm2(x), routing))
        # without a feed_forward, __init__ built the MLP as (Linear, GELU, Linear, dropout)
        expand, activation, contract, drop = cast(nn.Sequential, self.mlp)
        expand, contract = cast(nn.Linear, expand), cast(nn.Linear, contract)
        hidden = activation(grouped_linear(grouped_layer_norm(x, self.norm2), expand.weight, expand.bias))
        return x + drop(grouped_linear(hidden, contract.weight, contract.bias))

    def biased_attention(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        """Attention of (B, heads, L, head_dim) queries, keys and values with `bias` added to the scores."""
        if not self.training:  # acting: the fused kernel (its effect on evaluation time: benchmarks/studies/multitask-speed.md)
            return F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
        batch, heads, _, head_dim = q.shape  # written out: attention dropout with this block's dropout draws
        scores = torch.baddbmm(
            bias.expand(batch, heads, -1, -1).flatten(0, 1),
            q.flatten(0, 1),
            k.flatten(0, 1).transpose(1, 2),
            alpha=head_dim**-0.5,
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


# ----------------------------------------------------------------------------- T2MIR: token- and task-wise experts
# Token- and Task-wise Mixture of experts for In-context RL (NJU-RL/T2MIR; files read: T2MIR-AD/algorithms/moe.py,
# T2MIR-AD/algorithms/transformers_moe.py, T2MIR-AD/train.py, T2MIR-AD/configs/args_darkroom_v0.yaml,
# T2MIR-DPT/algorithms/gpt2moe_model.py, T2MIR-DPT/configs/args_darkroom_v0.yaml). The feed-forward layer becomes two
# mixtures side by side, each writing half of the model width, their outputs concatenated (no projection back):
# - token-wise: a noisy top-k router per token, kept balanced by cv^2(importance) + cv^2(load) (the reference's
#   TopKBalancedNoisyGate, weight 0.1 for AD and 0.01 for DPT on Dark Room);
# - task-wise: a clean top-k router per token whose probabilities, averaged over a sequence, are the sequence's task
#   embedding, tied to the task by a contrastive loss against a momentum copy of the router (EMA rate 0.005; the
#   similarity is a learned bilinear q^T W k, CURL-style, with no temperature). The reference balances it not at all.
# Differences: the reference pairs row i with row i + B/2, which its sampler draws from the same task; here the
# positives of a row are every other row of its task in the batch (supervised contrastive), so any sampler's batches
# serve. Experts are GELU MLPs as the dense block's (the reference's leaky ReLU), with GPT-2 initialisation.

NOISE_FLOOR = 1e-2  # the least standard deviation of the token router's noise (the reference's noise_epsilon)


def top_k_gates(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(N, E) router logits -> (N, k) the experts each token goes to, its k highest logits, and their weights: a
    softmax over those k logits alone, so a token's weights sum to one and every other expert gets none."""
    top, experts = logits.topk(k, dim=-1)
    return experts, torch.softmax(top.float(), dim=-1)


def squared_variation(values: torch.Tensor) -> torch.Tensor:
    """The squared coefficient of variation var / mean^2 of (E,) per-expert totals: 0 when they are all equal."""
    if values.numel() == 1:
        return values.new_zeros(())
    return values.float().var() / (values.float().mean() ** 2 + 1e-10)


def load_balancing_loss(importance: torch.Tensor, load: torch.Tensor) -> torch.Tensor:
    """Shazeer et al. (2017)'s balance term: uneven gate weight per expert (`importance`) plus uneven token counts
    per expert (`load`); 0 for uniform routing, largest when every token goes to the same experts."""
    return squared_variation(importance) + squared_variation(load)


def gate_logits(x: torch.Tensor, gate_in: torch.Tensor, gate_out: torch.Tensor) -> torch.Tensor:
    """The router's gate network: Linear, tanh, Linear, without biases (the reference's "mlp" gate)."""
    return F.linear(torch.tanh(F.linear(x, gate_in)), gate_out)


@dataclass
class Routed:
    """One router's choice for N tokens: `experts` and `weights` (N, k), the clean `logits` (N, E), and the
    per-expert `importance` (summed weights) and `load` (tokens routed, or its differentiable expectation)."""

    experts: torch.Tensor
    weights: torch.Tensor
    logits: torch.Tensor
    importance: torch.Tensor
    load: torch.Tensor


class Router(nn.Module):
    """Sends each token to its top-k of E experts. With `noisy`, training adds Gaussian noise of a learned,
    token-dependent scale (softplus of a zero-initialised Linear, plus NOISE_FLOOR) to the logits before choosing,
    and the load is each expert's probability of being chosen under that noise, summed over tokens (differentiable,
    so the balance term trains the gate); otherwise the load counts the tokens each expert got."""

    def __init__(self, dim: int, num_experts: int, top_k: int, noisy: bool):
        super().__init__()
        if not 1 <= top_k <= num_experts:
            raise ValueError(f"top_k {top_k} must be between 1 and the number of experts {num_experts}")
        self.top_k = top_k
        self.gate_in = nn.Parameter(torch.randn(num_experts, dim) * 0.02)  # GPT-2's N(0, 0.02)
        self.gate_out = nn.Parameter(torch.randn(num_experts, num_experts) * 0.02)
        self.noise = nn.Parameter(torch.zeros(num_experts, dim)) if noisy else None

    def forward(self, x: torch.Tensor) -> Routed:
        clean = gate_logits(x, self.gate_in, self.gate_out).float()
        noise = self.noise if self.training else None
        if noise is not None:
            scale = F.softplus(F.linear(x, noise).float()) + NOISE_FLOOR
            logits = clean + torch.randn_like(clean) * scale
        else:
            logits = clean
        experts, weights = top_k_gates(logits, self.top_k)
        chosen = torch.zeros_like(logits, dtype=torch.bool).scatter(1, experts, True)
        importance = torch.zeros_like(logits).scatter(1, experts, weights).sum(0)
        if noise is not None and self.top_k < logits.shape[1]:
            # an expert is chosen when its noisy logit beats the k-th best of the others': the (k+1)-th best logit
            # when it is among the top k, the k-th when not; the chance of that over its own noise is a normal CDF
            best = logits.topk(self.top_k + 1, dim=-1).values
            threshold = torch.where(chosen, best[:, self.top_k :], best[:, self.top_k - 1 : self.top_k])
            load = torch.special.ndtr((clean - threshold) / scale).sum(0)
        else:
            load = chosen.float().sum(0)
        return Routed(experts, weights, clean, importance, load)


class Experts(nn.Module):
    """E two-layer GELU networks dim -> hidden -> out with their weights stacked; each token goes through the experts
    it was routed to, their outputs weighted by its gate weights and summed. A token costs k experts' work."""

    def __init__(self, num_experts: int, dim: int, hidden: int, out: int):
        super().__init__()
        self.up = nn.Parameter(torch.randn(num_experts, hidden, dim) * 0.02)
        self.up_bias = nn.Parameter(torch.zeros(num_experts, hidden))
        self.down = nn.Parameter(torch.randn(num_experts, out, hidden) * 0.02)
        self.down_bias = nn.Parameter(torch.zeros(num_experts, out))

    def parameters_per_expert(self) -> int:
        return sum(p[0].numel() for p in (self.up, self.up_bias, self.down, self.down_bias))

    def forward(self, x: torch.Tensor, experts: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        """(N, dim) tokens, (N, k) experts and weights -> (N, out)."""
        out = x.new_zeros(x.shape[0], self.down.shape[1], dtype=weights.dtype)
        for e in range(self.up.shape[0]):
            token, slot = (experts == e).nonzero(as_tuple=True)
            y = F.linear(F.gelu(F.linear(x[token], self.up[e], self.up_bias[e])), self.down[e], self.down_bias[e])
            out = out.index_add(0, token, y * weights[token, slot, None])
        return out


@dataclass
class Routing:
    """What one T2MIR layer's training pass leaves for its losses: the token router's `balance` term, and the task
    router's embedding of each sequence (B, E) by the router (`task_query`) and by its momentum copy (`task_key`, no
    gradient), compared through the layer's `bilinear` map."""

    balance: torch.Tensor
    task_query: torch.Tensor
    task_key: torch.Tensor
    bilinear: torch.Tensor


class T2MIRFeedForward(nn.Module):
    """T2MIR's feed-forward layer (see the section comment above): [token experts' half, task experts' half]. The
    task router's momentum copy is kept in buffers (saved in checkpoints) and follows it by `follow_task_router`
    after each optimiser step; it is used only for the contrastive loss's keys."""

    target_gate_in: torch.Tensor
    target_gate_out: torch.Tensor

    def __init__(self, dim: int, token_experts: int, task_experts: int, top_k: int, expert_hidden: int, router_momentum: float):
        super().__init__()
        half = dim // 2
        self.token_router = Router(dim, token_experts, top_k, noisy=True)
        self.token_experts = Experts(token_experts, dim, expert_hidden, half)
        self.task_router = Router(dim, task_experts, top_k, noisy=False)
        self.task_experts = Experts(task_experts, dim, expert_hidden, dim - half)
        self.register_buffer("target_gate_in", self.task_router.gate_in.detach().clone())
        self.register_buffer("target_gate_out", self.task_router.gate_out.detach().clone())
        self.bilinear = nn.Parameter(torch.randn(task_experts, task_experts))  # the reference's W
        self.router_momentum = router_momentum

    def forward(self, h: torch.Tensor, routing: list[Routing] | None = None) -> torch.Tensor:
        """(B, L, dim) normalised tokens -> (B, L, dim); appends this pass's `Routing` to `routing` if given."""
        batch, dim = h.shape[0], h.shape[-1]
        x = h.reshape(-1, dim)
        token, task = self.token_router(x), self.task_router(x)
        out = torch.cat([self.token_experts(x, token.experts, token.weights), self.task_experts(x, task.experts, task.weights)], dim=-1)
        if routing is not None:
            with torch.no_grad():
                key_logits = gate_logits(x, self.target_gate_in, self.target_gate_out).float()
            embed = lambda logits: torch.softmax(logits, dim=-1).view(batch, -1, logits.shape[-1]).mean(1)  # noqa: E731
            routing.append(Routing(load_balancing_loss(token.importance, token.load), embed(task.logits), embed(key_logits), self.bilinear))
        return out.view(*h.shape[:-1], -1)

    @torch.no_grad()
    def follow_task_router(self) -> None:
        """The momentum copy moves `router_momentum` of the way to the task router (the reference's soft update)."""
        self.target_gate_in.lerp_(self.task_router.gate_in, self.router_momentum)
        self.target_gate_out.lerp_(self.task_router.gate_out, self.router_momentum)

    def inactive_parameters(self) -> int:
        """Parameters a token's evaluation pass leaves unused: the experts its routers did not pick, the noise scale
        (training only) and the bilinear map (a loss term only)."""
        unused_experts = sum(
            (experts.up.shape[0] - router.top_k) * experts.parameters_per_expert()
            for router, experts in ((self.token_router, self.token_experts), (self.task_router, self.task_experts))
        )
        noise_scales = sum(router.noise.numel() for router in (self.token_router, self.task_router) if router.noise is not None)
        return unused_experts + noise_scales + self.bilinear.numel()


def contrastive_task_loss(query: torch.Tensor, key: torch.Tensor, bilinear: torch.Tensor, task_ids: torch.Tensor) -> torch.Tensor:
    """InfoNCE that ties the task router to the task: row i's embedding `query` (B, E) scores every other row's `key`
    as q_i^T W k_j; the other rows of row i's task are its positives, the rest negatives, and row i's loss is the mean
    over its positives of -log softmax (supervised contrastive). Rows without a positive in the batch are left out;
    0 when no row has one."""
    others = ~torch.eye(len(task_ids), dtype=torch.bool, device=task_ids.device)
    positives = (task_ids[:, None] == task_ids[None, :]) & others
    counts = positives.sum(1)
    has = counts > 0
    with torch.autocast(query.device.type, enabled=False):  # full precision under mixed-precision training
        scores = query.float() @ bilinear.float() @ key.float().T
    if not has.any():  # 0, but still of the inputs: every data-parallel rank's bilinear map gets a gradient to average
        return scores.sum() * 0.0
    log_p = torch.log_softmax(scores.masked_fill(~others, float("-inf")), dim=1)
    return (-log_p.masked_fill(~positives, 0.0).sum(1)[has] / counts[has]).mean()


def routing_losses(routing: list[Routing], task_ids: torch.Tensor | None) -> dict[str, torch.Tensor]:
    """The T2MIR layers' terms summed over layers, as the reference sums them: `balance_loss`, and with task ids
    `contrastive_loss`. A T2MIR model has at least one such layer."""
    balances = [r.balance for r in routing]
    losses = {"balance_loss": sum(balances[1:], balances[0])}
    if task_ids is not None:
        contrastive = [contrastive_task_loss(r.task_query, r.task_key, r.bilinear, task_ids) for r in routing]
        losses["contrastive_loss"] = sum(contrastive[1:], contrastive[0])
    return losses


def active_parameters(model: nn.Module) -> int:
    """Parameters a token's forward pass uses at evaluation: all of a dense model's; with T2MIR layers, all but what
    each leaves unused (`T2MIRFeedForward.inactive_parameters`). Compares a mixture with a dense model of equal cost."""
    total = sum(p.numel() for p in model.parameters())
    return total - sum(layer.inactive_parameters() for layer in model.modules() if isinstance(layer, T2MIRFeedForward))
