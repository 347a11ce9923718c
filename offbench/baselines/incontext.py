"""The transformer pieces Algorithm Distillation and DPT share: a pre-LayerNorm causal transformer on
`scaled_dot_product_attention` (fused kernels on CPU and CUDA) with an optional key-value cache, and an
observation embedding.

The cache holds every layer's keys and values of the tokens seen so far, so generating one more token
costs one token's worth of work per layer instead of recomputing the whole context; `forward(tokens,
cache)` appends the new tokens' keys and values and attends the new queries to everything cached.
Positions are learned (GPT-2) and absolute within a context: a context starts at position 0.

Observations become features by their space (`observation_features`): a grid of categorical codes (XLand's
(tile, colour) per cell) through one learned table per channel, shared by every cell, as xland-minigrid's
EmbeddingEncoder (training/nn.py: tile and colour embeddings of 16, concatenated); anything else normalised
with the dataset's statistics. Codes are categories, not magnitudes: tile 7 is not "more" than tile 6.

With `moe = "t2mir"` (AD and DPT), the last `moe_layers` blocks' MLP becomes T2MIR's token- and task-wise mixtures
of experts (offbench.baselines.nets.T2MIRFeedForward); a training pass collects their routing statistics, the
baseline adds the load-balancing and contrastive terms to its loss (`with_routing_losses`), and the task router's
momentum copy follows it after each optimiser step (`CausalTransformer.follow_task_routers`).
"""

from __future__ import annotations

import math
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any, cast

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from offbench.baselines.nets import (
    Block,
    KVCache,
    ObservationNormalizer,
    Routing,
    T2MIRFeedForward,
    flat_observation_dim,
    routing_losses,
)
from offbench.data.spec import DatasetSpec
from offbench.errors import OffbenchError

MAX_TABLE_STATES = 4096  # an integer observation space with at most this many values gets an embedding table
MAX_CHANNEL_CODES = 256  # a grid channel with at most this many codes is embedded as categories (GridCodeEmbedding)
CODE_EMBEDDING_DIM = 16  # per channel of a cell: xland-minigrid's EmbeddingEncoder default (emb_dim=16)


def init_gpt_weights(module: nn.Module) -> None:
    """GPT-2 initialisation (as CORL's DT and ad-eps): N(0, 0.02) weights, zero biases."""
    if isinstance(module, (nn.Linear, nn.Embedding)):
        nn.init.normal_(module.weight, mean=0.0, std=0.02)
    if isinstance(module, nn.Linear) and module.bias is not None:
        nn.init.zeros_(module.bias)


def autocast(device: torch.device):
    """bfloat16 mixed precision on CUDA (no loss scaling needed); full precision elsewhere."""
    return torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda" else nullcontext()


def grid_channel_ranges(spec: DatasetSpec) -> tuple[np.ndarray, np.ndarray] | None:
    """(low, number of codes) per channel of a categorical grid observation, or None: an integer Box of two or
    more axes whose last axis holds channels with the same finite range in every cell (XLand's (5, 5, 2) of
    tile and colour codes), each channel of at most MAX_CHANNEL_CODES codes."""
    space = spec.observation_space
    if not (isinstance(space, gym.spaces.Box) and np.issubdtype(space.dtype, np.integer) and len(space.shape) >= 2):
        return None
    low, high = np.asarray(space.low, np.int64), np.asarray(space.high, np.int64)
    channels = space.shape[-1]
    low_cells, high_cells = low.reshape(-1, channels), high.reshape(-1, channels)
    if not ((low_cells == low_cells[0]).all() and (high_cells == high_cells[0]).all()):
        return None
    sizes = high_cells[0] - low_cells[0] + 1
    return (low_cells[0], sizes) if (sizes <= MAX_CHANNEL_CODES).all() else None


class GridCodeEmbedding(nn.Module):
    """(..., *grid, channels) codes -> (..., cells * channels * width): each channel's code through its own table,
    shared by every cell, concatenated per cell, then flattened over the cells."""

    low: torch.Tensor

    def __init__(self, spec: DatasetSpec, low: np.ndarray, sizes: np.ndarray, width: int = CODE_EMBEDDING_DIM):
        super().__init__()
        self.tables = nn.ModuleList(nn.Embedding(int(n), width) for n in sizes)
        self.register_buffer("low", torch.as_tensor(low))
        self.observation_dims = len(spec.observation_shape)
        self.out_dim = int(np.prod(spec.observation_shape[:-1])) * len(sizes) * width

    def forward(self, observations: torch.Tensor) -> torch.Tensor:
        codes = observations.long() - self.low
        per_cell = torch.cat([table(codes[..., c]) for c, table in enumerate(self.tables)], dim=-1)
        return per_cell.flatten(start_dim=observations.dim() - self.observation_dims)


def observation_features(spec: DatasetSpec) -> tuple[GridCodeEmbedding | None, ObservationNormalizer | None, int]:
    """(codes, normalize, width): the module that makes flat features of observations (see the module docstring;
    the other one None) and how many features there are. Two names, so checkpoints of normalised observations
    keep their `normalize.*` keys."""
    ranges = grid_channel_ranges(spec)
    if ranges is not None:
        codes = GridCodeEmbedding(spec, *ranges)
        return codes, None, codes.out_dim
    return None, ObservationNormalizer(spec, eps=1e-6), flat_observation_dim(spec)


def features_of(codes: GridCodeEmbedding | None, normalize: ObservationNormalizer | None, observations: torch.Tensor) -> torch.Tensor:
    """Flat features of observations through the pair `observation_features` made."""
    if codes is not None:
        return codes(observations)
    return cast(ObservationNormalizer, normalize)(observations)  # observation_features makes one of the two


def state_index_layout(spec: DatasetSpec) -> tuple[np.ndarray, np.ndarray, int] | None:
    """(low, strides, number of states) that number the states of a small integer observation space (Dark Room's
    (x, y): index = sum((obs - low) * strides)), or None where the space is not one of at most MAX_TABLE_STATES."""
    space = spec.observation_space
    if not (isinstance(space, gym.spaces.Box) and np.issubdtype(space.dtype, np.integer)):
        return None
    low, high = np.reshape(space.low, -1).astype(np.int64), np.reshape(space.high, -1).astype(np.int64)
    sizes = high - low + 1
    if np.prod(sizes.astype(float)) > MAX_TABLE_STATES:
        return None
    return low, np.concatenate([np.cumprod(sizes[::-1])[::-1][1:], [1]]), int(np.prod(sizes))


class ObservationEmbedding(nn.Module):
    """Observations -> vectors. A small integer grid (Dark Room's (x, y)) gets one learned vector per state, as
    ad-eps embeds the state index; anything else goes through a Linear layer after `observation_features`."""

    low: torch.Tensor  # with a state table
    strides: torch.Tensor

    def __init__(self, spec: DatasetSpec, dim: int):
        super().__init__()
        layout = state_index_layout(spec)
        self.table = None
        if layout is not None:
            low, strides, states = layout
            self.register_buffer("low", torch.as_tensor(low))
            self.register_buffer("strides", torch.as_tensor(strides))
            self.table = nn.Embedding(states, dim)
        else:
            self.codes, self.normalize, width = observation_features(spec)
            self.linear = nn.Linear(width, dim)
        self.observation_dims = len(spec.observation_shape)

    def forward(self, observations: torch.Tensor) -> torch.Tensor:
        if self.table is None:
            return self.linear(features_of(self.codes, self.normalize, observations))
        flat = observations.flatten(start_dim=observations.dim() - self.observation_dims).long()
        return self.table(((flat - self.low) * self.strides).sum(-1))


@dataclass(frozen=True)
class T2MIR:
    """The T2MIR layers of a model (the Config fields of AD and DPT that say them; docs/in-context-rl.md)."""

    layers: int  # the last this many blocks
    token_experts: int
    task_experts: int
    top_k: int
    expert_hidden: int
    router_momentum: float

    def feed_forward(self, dim: int) -> T2MIRFeedForward:
        return T2MIRFeedForward(dim, self.token_experts, self.task_experts, self.top_k, self.expert_hidden, self.router_momentum)


def t2mir_of(config: Any, spec: DatasetSpec) -> T2MIR | None:
    """The T2MIR layers an AD or DPT Config asks for on `spec`'s data, or None for the dense model; fields that
    disagree with each other or with the data are one OffbenchError line."""
    if config.moe != "t2mir":
        return None
    if config.moe_layers > config.num_layers:
        raise OffbenchError(f"moe = 't2mir': moe_layers {config.moe_layers} is more than the model's num_layers {config.num_layers}")
    if config.top_k > min(config.num_experts, config.task_experts):
        raise OffbenchError(
            f"moe = 't2mir': top_k {config.top_k} is more than a mixture's experts (num_experts "
            f"{config.num_experts}, task_experts {config.task_experts})"
        )
    if config.contrastive_weight > 0 and spec.num_tasks <= 1:
        raise OffbenchError(
            "moe = 't2mir' ties its task router to the task, but this dataset has one task (no task_id column "
            "or a single id): set contrastive_weight = 0 or train on multi-task data"
        )
    return T2MIR(config.moe_layers, config.num_experts, config.task_experts, config.top_k, config.expert_hidden, config.router_momentum)


ROUTING_LOSSES = ("balance_loss", "contrastive_loss")


def with_routing_losses(
    values: dict[str, torch.Tensor], routing: list[Routing], task_ids: torch.Tensor | None, config: Any
) -> dict[str, torch.Tensor]:
    """A T2MIR training pass's `values` with the routing terms added to the objective "loss" at the Config's
    weights (balance_weight, contrastive_weight): the action loss alone stays as action_loss, and each term is also
    given unweighted, as the reference logs them. The contrastive term needs the batch's task ids: a row's positives
    are the other rows of its task (with the Config's `task_pairs`, its pair's other row at least)."""
    if config.contrastive_weight > 0 and task_ids is None:
        raise ValueError("moe = 't2mir' with contrastive_weight > 0: the batch must carry task_ids")
    terms = routing_losses(routing, task_ids)
    objective = values["loss"] + config.balance_weight * terms["balance_loss"]
    if config.contrastive_weight > 0:
        objective = objective + config.contrastive_weight * terms["contrastive_loss"]
    return {**values, "loss": objective, "action_loss": values["loss"], **terms}


def logged_losses(logged: dict[str, torch.Tensor]) -> dict[str, float]:
    """An update's losses to log: the action loss (the objective less any routing terms) and T2MIR's terms."""
    return {
        "action_loss": logged.get("action_loss", logged["loss"]).item(),
        **{name: logged[name].item() for name in ROUTING_LOSSES if name in logged},
    }


def routing_batch_coupling(config: Any) -> str | None:
    """Why T2MIR's terms tie a batch's rows together (so micro-batches cannot add up to its gradient), or None."""
    if config.moe == "t2mir":
        return "moe = 't2mir' balances the routers over the whole batch's tokens and contrasts its rows with each other"
    return None


class CausalTransformer(nn.Module):
    """Learned positions + embedding dropout + blocks + final LayerNorm over already-embedded tokens (B, L, dim);
    with `t2mir`, its last blocks have T2MIR's mixtures of experts instead of an MLP."""

    def __init__(
        self,
        dim: int,
        num_layers: int,
        num_heads: int,
        max_tokens: int,
        attention_dropout: float = 0.0,
        residual_dropout: float = 0.0,
        embedding_dropout: float = 0.0,
        t2mir: T2MIR | None = None,
    ):
        super().__init__()
        self.dim, self.num_heads, self.max_tokens = dim, num_heads, max_tokens
        self.positions = nn.Embedding(max_tokens, dim)
        self.embedding_dropout = nn.Dropout(embedding_dropout)
        self.blocks = nn.ModuleList(
            Block(
                dim,
                num_heads,
                attention_dropout,
                residual_dropout,
                nn.Dropout,
                t2mir.feed_forward(dim) if t2mir is not None and layer >= num_layers - t2mir.layers else None,
            )
            for layer in range(num_layers)
        )
        self.norm = nn.LayerNorm(dim)

    def new_cache(self, batch: int, max_tokens: int | None = None) -> KVCache:
        reference = self.positions.weight
        return KVCache(
            len(self.blocks),
            batch,
            self.num_heads,
            max_tokens or self.max_tokens,
            self.dim // self.num_heads,
            reference.device,
            reference.dtype,
        )

    def forward(self, tokens: torch.Tensor, cache: KVCache | None = None, routing: list[Routing] | None = None) -> torch.Tensor:
        """Outputs (B, L, dim) of the tokens after `cache`'s; T2MIR blocks append their `Routing` to `routing`."""
        start = cache.length if cache is not None else 0
        length = tokens.shape[1]
        if start + length > (cache.max_tokens if cache is not None else self.max_tokens):
            raise ValueError(f"context of {start + length} tokens is longer than the model's {self.max_tokens}")
        x = self.embedding_dropout(tokens + self.positions(torch.arange(start, start + length, device=tokens.device)))
        for layer, block in enumerate(self.blocks):
            x = block(x, cache=cache, layer=layer, routing=routing)
        if cache is not None:
            cache.length += length
        return self.norm(x)

    def follow_task_routers(self) -> None:
        """After an optimiser step: each T2MIR block's momentum task router follows the trained one."""
        for layer in self.modules():
            if isinstance(layer, T2MIRFeedForward):
                layer.follow_task_router()


def warmup_cosine(warmup_steps: int, cosine_steps: int):
    """Learning-rate factor per update: linear warm-up, then cosine to 0 at `cosine_steps` (or constant if 0)."""

    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        if cosine_steps <= warmup_steps:
            return 1.0
        progress = min(1.0, (step - warmup_steps) / (cosine_steps - warmup_steps))
        return 0.5 * (1.0 + math.cos(math.pi * progress))

    return factor
