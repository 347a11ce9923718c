"""Pieces the Q-learning baselines (CQL, IQL) share: MLPs with CORL's initialisation, a vectorised critic
ensemble, the dataset transforms (observation normalisation, action bounds, reward scaling), Polyak
averaging. Each algorithm's loss stays in its own file."""

from __future__ import annotations

import copy
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from offbench.baselines.base import DatasetSpec
from offbench.baselines.nets import (
    ObservationNormalizer,
    action_bounds,
    flat_observation_dim,
    init_linear_,
    task_input_dim,
    with_task_onehot,
)
from offbench.errors import OffbenchError

NUM_CRITICS = 2  # twin critics, the minimum of the two in targets (clipped double Q), as CORL's CQL and IQL
OBSERVATION_STD_EPS = 1e-3  # CORL adds 1e-3 to the dataset's state std (compute_mean_std(..., eps=1e-3))


# ---------------------------------------------------------------------------------------------- networks
class EnsembleLinear(nn.Module):
    """`size` independent linear layers applied in one batched matmul: (E, M, in) -> (E, M, out)."""

    def __init__(self, in_dim: int, out_dim: int, size: int, orthogonal: bool, gain: float | None):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(size, in_dim, out_dim))
        self.bias = nn.Parameter(torch.empty(size, 1, out_dim))
        for member in range(size):  # each member initialised exactly like its nn.Linear twin
            init_linear_(self.weight.data[member].T, self.bias.data[member, 0], orthogonal, gain)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x (E, M, in), or (M, in) shared by the members -> (E, M, out)."""
        if self.weight.shape[-1] == 1:
            # one output (a critic's Q): multiply and sum. On CPU, bmm with a single output column, and the outer
            # and inner products of its backward, run ~7x slower than these elementwise ops (benchmarks/speed/README.md, "Training")
            return torch.mul(x, self.weight.transpose(1, 2)).sum(-1, keepdim=True).add_(self.bias)
        if x.dim() == 2:  # the same input for every member. Not matmul(x, weight): it folds the members into one mm
            x = x.expand(self.weight.shape[0], -1, -1)  # and returns a transposed view: every op after it ~10x slower
        return torch.baddbmm(self.bias, x, self.weight)


class EnsembleMLP(nn.Module):
    """E MLPs (twin critics and the like) evaluated together; forward(x (..., in)) -> (E, ..., out)."""

    def __init__(
        self,
        in_dim: int,
        out_dim: int,
        hidden_dims: Sequence[int],
        size: int,
        orthogonal: bool = False,
        output_gain: float | None = None,
    ):
        super().__init__()
        dims = [in_dim, *hidden_dims, out_dim]
        self.layers = nn.ModuleList(
            EnsembleLinear(dims[i], dims[i + 1], size, orthogonal, output_gain if i == len(dims) - 2 else None)
            for i in range(len(dims) - 1)
        )
        self._reused_buffers: dict[str, torch.Tensor] = {}  # blocked()'s work space; not state, not saved

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        lead = x.shape[:-1]
        h = x.reshape(-1, x.shape[-1])
        for i, layer in enumerate(self.layers):
            h = layer(h)
            if i < len(self.layers) - 1:
                h = torch.relu_(h)  # in place: on CPU a fresh (E, M, hidden) buffer per layer costs page faults
        return h.reshape(h.shape[0], *lead, h.shape[-1])

    def blocked(self, x: torch.Tensor, block_rows: int) -> torch.Tensor:
        """forward(x) for a large batch x (N, in) -> (E, N, out): the same values and gradients, computed in blocks
        of `block_rows` rows by a hand-written backward, into buffers this module keeps between calls.

        Why: this pass is most of a CQL update (31 actions per state). On CPU, blocks whose activations stay in
        cache run the matmuls and ReLUs markedly faster than one big batch, and fresh activation buffers on every
        update cost page faults (glibc hands large freed blocks back to the kernel); reused buffers do not. The
        buffers are saved for backward, so calling blocked() again before backward makes autograd refuse that
        backward (buffer modified in place) rather than use overwritten values."""
        params = [p for layer in self.layers for p in (layer.weight, layer.bias)]
        return _BlockedEnsemblePass.apply(x, self._reused_buffers, block_rows, *params)


def _reused(buffers: dict[str, torch.Tensor], name: str, numel: int, like: torch.Tensor) -> torch.Tensor:
    """A flat buffer of `numel` elements, kept in `buffers` and reallocated only to grow or change device/dtype."""
    buffer = buffers.get(name)
    if buffer is None or buffer.numel() < numel or buffer.dtype != like.dtype or buffer.device != like.device:
        buffer = buffers[name] = like.new_empty(numel)
    return buffer[:numel]


def _row_blocks(n: int, block_rows: int) -> list[tuple[int, int]]:
    """About `block_rows` rows each, split evenly (a small last block would cost a whole block's overhead)."""
    count = max(1, round(n / block_rows))
    bounds = [n * i // count for i in range(count + 1)]
    return list(zip(bounds[:-1], bounds[1:]))


def _block(flat: torch.Tensor, size: int, lo: int, hi: int, width: int) -> torch.Tensor:
    """Rows lo:hi of an (E, N, width) activation stored block after block in `flat`: a contiguous (E, hi-lo, width)."""
    return flat[size * lo * width : size * hi * width].view(size, hi - lo, width)


class _BlockedEnsemblePass(torch.autograd.Function):
    """EnsembleMLP.blocked. Each hidden layer's activations (after the ReLU, which is also what ReLU's gradient
    reads) go to one reused buffer, block after block; backward walks the same blocks, adds each block's weight
    and bias gradients in place, and passes the gradient between layers in two reused block-sized buffers."""

    @staticmethod
    def forward(ctx, x, buffers, block_rows, *params):
        weights, biases = params[0::2], params[1::2]
        size, n, blocks = weights[0].shape[0], x.shape[0], _row_blocks(x.shape[0], block_rows)
        hidden = [_reused(buffers, f"hidden{i}", size * n * w.shape[-1], x) for i, w in enumerate(weights[:-1])]
        output = x.new_empty(size, n, weights[-1].shape[-1])
        # one output column: matrix-vector products per member (no (E, rows, H) temporary, no slow bmm)
        columns = [(weights[-1][m, :, 0], biases[-1][m, 0]) for m in range(size)] if weights[-1].shape[-1] == 1 else []
        for lo, hi in blocks:
            h = x[lo:hi].expand(size, -1, -1)
            for w, b, flat in zip(weights[:-1], biases[:-1], hidden):
                h = torch.baddbmm(b, h, w, out=_block(flat, size, lo, hi, w.shape[-1])).relu_()
            if columns:
                out = output[:, lo:hi, 0]
                for member, (w, b) in enumerate(columns):
                    torch.addmv(b, h[member], w, out=out[member])
            else:
                output[:, lo:hi] = torch.baddbmm(biases[-1], h, weights[-1])
        ctx.buffers, ctx.blocks, ctx.n_layers = buffers, blocks, len(weights)
        ctx.save_for_backward(x, *params, *hidden)
        return output

    @staticmethod
    @torch.autograd.function.once_differentiable  # its in-place buffer arithmetic is not itself differentiable
    def backward(ctx, grad_output):
        x, *saved = ctx.saved_tensors
        weights, hidden = saved[0 : 2 * ctx.n_layers : 2], saved[2 * ctx.n_layers :]
        size, last = weights[0].shape[0], ctx.n_layers - 1
        transposed = [w.transpose(1, 2) for w in weights]
        params_grad = any(ctx.needs_input_grad[3:])  # False where the ensemble is frozen (an actor's loss)
        if params_grad:  # the output layer's bias gradient over all rows at once; the others block by block
            grad_w = [torch.zeros_like(w) for w in weights]
            grad_b = [*(x.new_zeros(size, 1, w.shape[-1]) for w in weights[:-1]), grad_output.sum(1, keepdim=True)]
        grad_x = torch.zeros_like(x) if ctx.needs_input_grad[0] else None
        rows = max(hi - lo for lo, hi in ctx.blocks)
        widest = max((w.shape[-1] for w in weights[:-1]), default=0)
        passing = [_reused(ctx.buffers, f"grad{i}", size * rows * widest, x) for i in range(2)]
        for lo, hi in reversed(ctx.blocks):  # the last blocks written are the likeliest still in cache
            grad = grad_output[:, lo:hi]  # d loss / d (this layer's output, before its ReLU)
            for layer in range(last, -1, -1):
                w = weights[layer]
                h = _block(hidden[layer - 1], size, lo, hi, w.shape[-2]) if layer else x[lo:hi].expand(size, -1, -1)
                if params_grad:
                    if layer < last:
                        grad_b[layer] += grad.sum(1, keepdim=True)
                    if w.shape[-1] == 1:  # one output column: a row-vector product (bmm's single-column path is slow)
                        grad_w[layer].transpose(1, 2).baddbmm_(grad.transpose(1, 2), h)
                    else:
                        grad_w[layer].baddbmm_(h.transpose(1, 2), grad)
                if layer == 0:
                    if grad_x is not None:
                        grad_x[lo:hi] += torch.bmm(grad, transposed[0]).sum(0)
                    break
                out = _block(passing[layer % 2], size, 0, hi - lo, w.shape[-2])
                if w.shape[-1] == 1:
                    torch.mul(grad, transposed[layer], out=out)
                else:
                    torch.bmm(grad, transposed[layer], out=out)
                # ReLU's gradient, in place: zero where the activation (this layer's input) is zero
                grad = torch.ops.aten.threshold_backward.grad_input(out, h, 0, grad_input=out)
        grads = [g for pair in zip(grad_w, grad_b) for g in pair] if params_grad else [None] * (2 * ctx.n_layers)
        return (grad_x, None, None, *grads)


def target_copy(module: nn.Module) -> nn.Module:
    """A copy for a target network: same weights, no gradients."""
    target = copy.deepcopy(module)
    target.requires_grad_(False)
    return target


@torch.no_grad()
def polyak_update(target: nn.Module, online: nn.Module, tau: float) -> None:
    """target <- (1 - tau) * target + tau * online."""
    for t, o in zip(target.parameters(), online.parameters()):
        t.lerp_(o, tau)


@contextmanager
def frozen(module: nn.Module) -> Iterator[None]:
    """No parameter gradients for `module` inside (gradients still flow to its inputs). Used where the
    actor's loss goes through the critic, so that one backward pass can serve every loss of an update."""
    params = [p for p in module.parameters() if p.requires_grad]
    for p in params:
        p.requires_grad_(False)
    try:
        yield
    finally:
        for p in params:
            p.requires_grad_(True)


# ---------------------------------------------------------------------------------------------- data
def action_kind(spec: DatasetSpec, baseline: str, discrete_ok: bool = True) -> str:
    """'discrete' or 'continuous'; a one-line OffbenchError for an action space the baseline cannot learn."""
    space = spec.action_space
    if isinstance(space, gym.spaces.Discrete):
        if not discrete_ok:
            raise OffbenchError(f"{baseline} needs continuous (Box) actions; this dataset has {space}")
        return "discrete"
    if isinstance(space, gym.spaces.Box):
        if not (np.all(np.isfinite(space.low)) and np.all(np.isfinite(space.high))):
            raise OffbenchError(f"{baseline} needs bounded Box actions (tanh policy); this dataset has {space}")
        return "continuous"
    raise OffbenchError(f"{baseline} needs Discrete or bounded Box actions; this dataset has {space}")


class DataTransform(nn.Module):
    """From dataset units to network units and back: observations (x - mean) / (std + 1e-3) as in CORL (with the
    task id's one-hot appended on multi-task data: `input_dim` wide), continuous actions affinely to [-1, 1]
    (the tanh range), rewards * scale + bias. Buffers, so they travel with state_dict() and .to(device)."""

    act_center: torch.Tensor  # continuous actions only
    act_half_range: torch.Tensor

    def __init__(self, spec: DatasetSpec, normalize_observations: bool, reward_scale: float, reward_bias: float):
        super().__init__()
        self.normalize = ObservationNormalizer(spec, eps=OBSERVATION_STD_EPS, enabled=normalize_observations)
        self.num_tasks = spec.num_tasks
        self.input_dim = flat_observation_dim(spec) + task_input_dim(spec)
        self.discrete = isinstance(spec.action_space, gym.spaces.Discrete)
        self.action_shape = tuple(spec.action_space.shape or ())
        if not self.discrete:
            low, high = (torch.as_tensor(bound, dtype=torch.float32) for bound in action_bounds(spec))
            self.register_buffer("act_center", (high + low) / 2)
            self.register_buffer("act_half_range", (high - low) / 2)
        self.reward_scale, self.reward_bias = reward_scale, reward_bias

    def observations(self, obs: torch.Tensor, task_ids: torch.Tensor | None = None) -> torch.Tensor:
        """(B, *obs) -> (B, input_dim) normalised float, the task's one-hot appended on multi-task data."""
        return with_task_onehot(self.normalize(obs), task_ids, self.num_tasks)

    def actions_to_unit(self, actions: torch.Tensor) -> torch.Tensor:
        return (actions.reshape(actions.shape[0], -1) - self.act_center) / self.act_half_range

    def actions_from_unit(self, unit: torch.Tensor) -> torch.Tensor:
        return (unit * self.act_half_range + self.act_center).reshape(unit.shape[0], *self.action_shape)

    def transitions(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """(obs, actions, rewards, next_obs, not_done) in network units; actions int64 if discrete."""
        actions = batch["actions"].long().reshape(-1) if self.discrete else self.actions_to_unit(batch["actions"])
        task_ids = batch.get("task_ids")  # s and s' belong to the same task
        return (
            self.observations(batch["observations"], task_ids),
            actions,
            batch["rewards"].float() * self.reward_scale + self.reward_bias,
            self.observations(batch["next_observations"], task_ids),
            1.0 - batch["terminals"].float(),  # timeouts are not terminals: they bootstrap
        )


def reward_scale(spec: DatasetSpec, baseline: str, normalize_reward: bool, scale: float) -> float:
    """`scale`, times max_episode_length / (max return - min return) over the dataset's episodes when
    `normalize_reward` (CORL's modify_reward for locomotion, after the IQL paper; CORL uses 1000 steps)."""
    if not normalize_reward:
        return scale
    if spec.return_range is None or spec.return_range[1] <= spec.return_range[0]:
        raise OffbenchError(
            f"{baseline}: normalize_reward needs episodes with different returns; this dataset's return range is {spec.return_range}"
        )
    low, high = spec.return_range
    return scale * spec.max_episode_length / (high - low)


def seeded_generator(device: torch.device | str) -> torch.Generator:
    """A generator of the baseline's own, seeded from the global torch RNG (which the trainer seeds), so its
    state can be saved with the baseline and a resumed run draws the same noise."""
    generator = torch.Generator(device=device)
    generator.manual_seed(int(torch.randint(0, 2**62, (1,)).item()))
    return generator
