"""How much memory one update takes, checked against what the machine has before a run directory is made.

    estimate = 1.25 x (16 P                           weights, gradients, Adam's two moments (fp32: 4 bytes each)
                       + M L (80 s d + q H s^2)       what autograd keeps per transformer layer
                       + M 24 s d                     embeddings, final norm, head, loss
                       + M 2 x largest                the largest one tensor of a row, twice (backward's temporaries)
                       + B 8 s (obs + 4))             the sampled batch
               + 32 MB                                the first update's own allocations

P parameters (counted on a model built on the meta device, so nothing is allocated), B the batch size, M the rows
of one backward pass (`micro_batch`, or B: activations scale with the micro-batch, the sampled batch is held
whole), s the tokens of one training sequence, d the transformer width, H heads, L layers: what the baseline's
`memory_shape(config)` states (AD: `context_steps`, or 3 `context_steps` - 2 in the "sar" layout; DPT:
`context_size` + 1; DT: 3 `segment_length` - 1; Prompt-DT / HarmoDT: 3 (`segment_length` + `prompt_length`)). 80 bytes per token and unit of width per layer is what
`torch.autograd.graph.saved_tensors_hooks` counts for offbench's pre-LayerNorm block in fp32 (20 numbers: LayerNorm
inputs, qkv, attention output, the 4d MLP twice, dropout masks); q = 16 bytes per attention weight where the
attention matrix is kept (softmax output, the dropped copy and its mask, measured 11.5, plus backward's copies):
DT's written-out attention always, AD's and DPT's `scaled_dot_product_attention` on CPU only with attention
dropout (without it the fused CPU kernel keeps no s x s matrix: measured 0), and never on CUDA (flash /
memory-efficient kernels). The 1.25 covers what the count misses (measured peaks reach 1.2x it: allocator,
backward's temporaries). Baselines without a `memory_shape` (BC, CQL, IQL, MOORE, plugins without one) get 16 P
plus a generous 128 bytes per row per Linear input and output feature: their activations are megabytes.

Measured against the growth of peak RSS over an update (benchmarks/studies/memory-estimate.md): the estimate
is 1.08-1.62x the measured peak on every config tried above 50 MB (2.1x on a 16 MB toy) and never below it: the
factor stated is 1 to 2, so a refused config needed at least about half the memory it was refused for. On CUDA the
same formula is an upper bound (bf16 activations under autocast), not measured. `OFFBENCH_SKIP_MEMORY_CHECK=1` turns the check off;
`OFFBENCH_MEMORY_LIMIT=8G` (bytes, or K/M/G/T) caps the memory the check counts on (a shared machine; tests).
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from offbench.baselines.base import micro_batch_refusal
from offbench.errors import OffbenchError

GB = 1024**3
ADAM_BYTES_PER_PARAMETER = 16  # weight, gradient, exp_avg, exp_avg_sq in fp32
LAYER_BYTES_PER_TOKEN_WIDTH = 80  # saved by one pre-LN block per token per unit of width (fp32, measured)
KEPT_ATTENTION_BYTES = 16  # per attention weight where the s x s matrix is kept (softmax out, dropped copy, mask; backward's copies)
OUTSIDE_BYTES_PER_TOKEN_WIDTH = 24  # embeddings, final LayerNorm, head and loss per token
MLP_BYTES_PER_ROW_FEATURE = 128  # non-transformer baselines: a bound per row per Linear input/output feature
MARGIN = 1.25  # measured peaks run up to 1.2x the counted bytes (allocator, backward's temporaries)
OVERHEAD = 32 * 1024**2  # the first update's own allocations (kernels' workspaces, allocator arenas)


@dataclass
class Estimate:
    fixed: float  # bytes that do not grow with the batch (parameters and optimiser state)
    per_row: float  # bytes per row of a backward pass (activations, transients)
    per_sample: float  # bytes per row of the sampled batch, held whole while its micro-batches run
    batch_size: int
    micro_batch: int | None  # rows per backward pass; None: the whole batch
    formula: str  # what was counted, in words

    @property
    def pass_rows(self) -> int:
        return min(self.micro_batch or self.batch_size, self.batch_size)

    @property
    def total(self) -> float:
        return self.fixed + self.per_row * self.pass_rows + self.per_sample * self.batch_size

    def largest_batch(self, limit: float) -> int:
        """The largest batch that fits `limit` bytes taken whole."""
        return max(0, int((limit - self.fixed) // (self.per_row + self.per_sample)))

    def largest_micro_batch(self, limit: float) -> int:
        """The largest micro-batch of this batch that fits `limit` bytes (at most the batch; 0: none does)."""
        return min(self.batch_size, max(0, int((limit - self.fixed - self.per_sample * self.batch_size) // self.per_row)))


def count_parameters(baseline_cls: type, config: Any, spec: Any) -> tuple[int, list[nn.Linear]]:
    """Trainable parameters and Linear layers of the baseline's networks, built on the meta device (no memory);
    on CPU where a baseline cannot be built on meta."""
    numpy_state = np.random.get_state()
    with torch.random.fork_rng(devices=[]):  # building draws nothing from the run's random streams
        try:
            with torch.device("meta"):
                baseline = baseline_cls(config.baseline, spec, torch.device("meta"))
        except Exception:  # noqa: BLE001 - a baseline that touches real data while building
            baseline = baseline_cls(config.baseline, spec, torch.device("cpu"))
        finally:
            np.random.set_state(numpy_state)
    modules = [v for v in vars(baseline).values() if isinstance(v, nn.Module)]
    seen: set[int] = set()
    params, linears = 0, []
    for module in modules:
        for p in module.parameters():
            if id(p) not in seen and p.requires_grad:
                seen.add(id(p))
                params += p.numel()
        linears += [m for m in module.modules() if isinstance(m, nn.Linear)]
    return params, linears


def estimate_update_bytes(baseline_cls: type, config: Any, spec: Any, device: str | torch.device = "cpu") -> Estimate:
    """Peak bytes of one update of `baseline_cls` under the resolved `config` (the module docstring's formula)."""
    device = torch.device(device)
    batch = config.train.batch_size
    micro_batch = config.train.micro_batch if isinstance(config.train.micro_batch, int) else None  # "auto": not chosen yet
    params, linears = count_parameters(baseline_cls, config, spec)
    fixed = MARGIN * ADAM_BYTES_PER_PARAMETER * params + OVERHEAD
    memory_shape = getattr(baseline_cls, "memory_shape", None)
    shape = memory_shape(config.baseline) if memory_shape is not None else None
    observation = math.prod(spec.observation_shape) if getattr(spec, "observation_shape", None) else 1
    rows = f"{batch} rows" + (f" in micro-batches of {micro_batch}" if micro_batch and micro_batch < batch else "")
    if shape is None:
        features = sum(m.in_features + m.out_features for m in linears)
        formula = f"16 x {params:,} parameters + 128 B x {rows} x {features:,} Linear features"
        return Estimate(
            fixed, MARGIN * MLP_BYTES_PER_ROW_FEATURE * features, MARGIN * 8 * (2 * observation + 8), batch, micro_batch, formula
        )
    s, d, layers, heads = shape.tokens, shape.width, shape.layers, shape.heads
    kept = shape.attention == "explicit" or (device.type == "cpu" and shape.attention_dropout > 0)
    q = KEPT_ATTENTION_BYTES if kept else 0
    layer = LAYER_BYTES_PER_TOKEN_WIDTH * s * d + q * heads * s * s
    largest = 4 * max(heads * s * s if kept else 0, 4 * s * d)  # bytes of the largest one tensor, per row
    per_row = layers * layer + OUTSIDE_BYTES_PER_TOKEN_WIDTH * s * d + 2 * largest
    formula = f"16 x {params:,} parameters + {rows} x ({layers} layers x (80 s d + {q} H s^2) + 24 s d + transient), s={s} d={d} H={heads}"
    return Estimate(fixed, MARGIN * per_row, MARGIN * 8 * s * (observation + 4), batch, micro_batch, formula)


def _meminfo_available() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return float(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _cgroup_available() -> float | None:
    """What the process's cgroup (v2) still allows, where it sets a limit."""
    try:
        root = Path("/sys/fs/cgroup")
        limit = (root / "memory.max").read_text().strip()
        if limit == "max":
            return None
        return float(limit) - float((root / "memory.current").read_text().strip())
    except (OSError, ValueError):
        return None


UNITS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}
SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:i?B)?\s*", re.IGNORECASE)


def memory_limit() -> float | None:
    """OFFBENCH_MEMORY_LIMIT in bytes (`8G`, `512M`, `1000000`), or None when it is not set."""
    text = os.environ.get("OFFBENCH_MEMORY_LIMIT", "")
    if not text:
        return None
    match = SIZE.fullmatch(text)
    if match is None:
        raise OffbenchError(f"OFFBENCH_MEMORY_LIMIT must be a size in bytes such as 8G, 512M or 1000000, got {text!r}")
    return float(match.group(1)) * UNITS[match.group(2).upper()]


def available_bytes(device: str | torch.device = "cpu") -> float | None:
    """Memory an update may still take: MemAvailable (and the cgroup's remaining limit, if lower) on CPU, free
    device memory on CUDA, OFFBENCH_MEMORY_LIMIT if lower; None where it cannot be told (no check then)."""
    device = torch.device(device)
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        measured = [float(free)]
    elif device.type == "cpu":
        measured = [v for v in (_meminfo_available(), _cgroup_available()) if v is not None]
    else:
        return None
    values = [v for v in (*measured, memory_limit()) if v is not None]
    return min(values) if values else None


def checked_limit(device: str | torch.device) -> float | None:
    """The bytes the memory check holds an update to; None when the check is off or the memory cannot be told."""
    if os.environ.get("OFFBENCH_SKIP_MEMORY_CHECK", "") not in ("", "0"):
        return None
    return available_bytes(device)


def auto_micro_batch(baseline_cls: type, config: Any, spec: Any, device: str | torch.device = "cpu") -> int:
    """What `micro_batch = "auto"` becomes: the largest micro-batch whose update fits the memory available; the
    whole batch where it fits, where the baseline cannot split it (offbench.baselines.base.micro_batch_refusal),
    or where the memory cannot be told. Where not even one row fits, 1 (which the check then refuses)."""
    batch = config.train.batch_size
    limit = checked_limit(device)
    if limit is None or micro_batch_refusal(baseline_cls, config.baseline) is not None:
        return batch
    return max(
        1,
        estimate_update_bytes(
            baseline_cls, replace(config, train=replace(config.train, micro_batch=None)), spec, device
        ).largest_micro_batch(limit),
    )


def check_update_memory(
    baseline_cls: type, config: Any, spec: Any, device: str | torch.device = "cpu", dataset_id: str | None = None
) -> Estimate | None:
    """Refuse, in one line, a config whose update does not fit the memory available (before anything is written),
    naming a batch size that fits and, for a baseline that can split its batch, a micro-batch that does."""
    limit = checked_limit(device)
    if limit is None:
        return None
    estimate = estimate_update_bytes(baseline_cls, config, spec, device)
    if estimate.total <= limit:
        return estimate
    name = getattr(baseline_cls, "name", baseline_cls.__name__)
    fits = estimate.largest_batch(limit)
    advice = f"--set batch_size={fits} fits" if fits >= 1 else "a smaller model is needed"
    micro = estimate.largest_micro_batch(limit)
    split = (
        f", split it (--set micro_batch={micro} fits, or micro_batch=auto)"
        if micro >= 1 and micro_batch_refusal(baseline_cls, config.baseline) is None
        else ""
    )
    cpu_file = cpu_config_hint(name, dataset_id)
    rows = f"batch {estimate.batch_size}" + (
        f" in micro-batches of {estimate.pass_rows}" if estimate.pass_rows < estimate.batch_size else ""
    )
    raise OffbenchError(
        f"{name}: one update of this config needs about {estimate.total / GB:.1f} GB ({rows}; "
        f"benchmarks/studies/memory-estimate.md) but {limit / GB:.1f} GB is available on {torch.device(device).type}: "
        f"use a smaller batch ({advice}){split}{cpu_file}, or OFFBENCH_SKIP_MEMORY_CHECK=1 to try anyway"
    )


def cpu_config_hint(name: str, dataset_id: str | None) -> str:
    """', or --config FILE' naming the CPU-sized standard file for this dataset, where there is one."""
    try:
        from offbench.training.config import standard_config_path

        path = standard_config_path(name, dataset_id)
    except Exception:  # noqa: BLE001 - a hint only
        return ""
    if path is None or path.name == "default.toml":
        return ""
    try:
        shown = path.relative_to(Path.cwd())
    except ValueError:
        shown = path
    return f", or the CPU-sized config (--config {shown})"
