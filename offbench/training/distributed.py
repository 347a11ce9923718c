"""Data-parallel training of one run: `offbench run baseline ... --nproc N`, or the same command under torchrun.

Each of the N processes (ranks) holds the whole model. Every rank draws the same global batch of
`batch_size` rows from the run's sampler seed and trains on its own contiguous shard of it
(`batch_size / N` rows); gradients are averaged across ranks as backward produces them (before any
clipping or optimiser step, so a baseline's update code runs unchanged), and the logged losses are the
means over ranks. With losses that are means over the batch, a step is then the step of one process on
the whole global batch, up to float rounding: the loss curve of an N-process run equals the 1-process
curve within float tolerance. Randomness inside an update (dropout, sampled actions) is drawn per rank
from a rank-specific torch seed (rank 0 keeps the run's seed), so ranks do not repeat each other's noise.

Rank 0 alone writes the run directory (run.json, metrics, evaluations, checkpoints, summary) and
evaluates; the checkpoint holds every rank's RNG states, so a resume (with the same N) continues each
rank exactly. Back-ends: gloo on CPU, NCCL on CUDA (rank r uses cuda:<local rank>).

A sampler draws the full global batch on every rank and keeps its shard: exact for every sampler kind
without changing them, at the cost of gathering N times the rows each rank trains on (cheap beside an
update; the samplers do not split drawing from gathering).
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from typing import Any, cast

import torch

from offbench.baselines.base import micro_batches
from offbench.errors import OffbenchError
from offbench.utils import die_with_parent

RANK_SEED_STRIDE = 1_000_003  # rank r's torch seed: seed + r * stride (a prime, so seeds of nearby runs do not collide)


class SingleProcess:
    """The default: one process, nothing shared (every hook is the identity)."""

    rank, world_size, is_main = 0, 1, True

    def prepare(self, baseline, sampler, seed: int):
        return sampler

    def mean(self, losses: dict[str, float]) -> dict[str, float]:
        return losses

    def gather_rng(self, states: dict[str, Any]) -> dict[str, Any]:
        return states

    def own_rng(self, states: dict[str, Any]) -> dict[str, Any]:
        return states

    def barrier(self) -> None:
        pass


class ShardedSampler:
    """The global batch drawn as one process would, cut to this rank's rows (state: the inner sampler's)."""

    def __init__(self, inner, rank: int, world_size: int):
        if inner.batch_size % world_size:
            raise OffbenchError(f"config: batch_size {inner.batch_size} must be divisible by the {world_size} processes")
        self.inner, self.rank, self.world_size = inner, rank, world_size
        self.batch_size = inner.batch_size // world_size

    def sample(self) -> dict[str, Any]:
        return micro_batches(self.inner.sample(), self.batch_size)[self.rank]

    def state_dict(self) -> dict[str, Any]:
        return self.inner.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.inner.load_state_dict(state)


def optimizers(baseline) -> list[torch.optim.Optimizer]:
    """The torch optimisers among the baseline's attributes, held directly or in a dict, list or tuple (IQL and
    MOORE-IQL keep one per network in a dict), so the seam needs nothing declared by a baseline."""
    found = []
    for value in vars(baseline).values():
        held = value.values() if isinstance(value, dict) else value if isinstance(value, (list, tuple)) else [value]
        found += [item for item in held if isinstance(item, torch.optim.Optimizer)]
    return found


def trained_parameters(baseline) -> list[torch.nn.Parameter]:
    """Every parameter an optimiser of the baseline updates, each once."""
    seen: dict[int, torch.nn.Parameter] = {}
    for optimizer in optimizers(baseline):
        for group in optimizer.param_groups:
            for param in group["params"]:
                seen.setdefault(id(param), param)
    if not seen:
        raise OffbenchError(
            f"baseline '{baseline.name}' keeps no torch optimiser among its attributes (directly, or in a dict, list or tuple): "
            "data-parallel training cannot find its parameters"
        )
    return list(seen.values())


def shared_tensors(baseline) -> list[torch.Tensor]:
    """What every rank must hold as rank 0 does: the parameters and buffers of the baseline's modules, and trained
    parameters kept outside any module (MOORE-IQL's log std), each once."""
    modules = [value for value in vars(baseline).values() if isinstance(value, torch.nn.Module)]
    tensors = [tensor for module in modules for tensor in [*module.parameters(), *module.buffers()]] + trained_parameters(baseline)
    return list({id(tensor): tensor for tensor in tensors}.values())


class DataParallel(SingleProcess):
    """One rank of a torch.distributed process group (see the module docstring)."""

    def __init__(self, rank: int, world_size: int, local_rank: int):
        self.rank, self.world_size, self.local_rank = rank, world_size, local_rank
        self.is_main = rank == 0

    def prepare(self, baseline, sampler, seed: int):
        """Same weights everywhere (rank 0's), gradient averaging hooks, this rank's shard and torch seed."""
        import torch.distributed as dist

        with torch.no_grad():
            for tensor in shared_tensors(baseline):
                dist.broadcast(tensor.data, src=0)
        for param in trained_parameters(baseline):
            param.register_post_accumulate_grad_hook(self._average_gradient)
        if self.rank:
            torch.manual_seed(seed + self.rank * RANK_SEED_STRIDE)
        return ShardedSampler(sampler, self.rank, self.world_size)

    def _average_gradient(self, param: torch.nn.Parameter) -> None:
        # Averaging is linear, so a gradient accumulated over several backward passes of one update is
        # averaged correctly however often this runs before the optimiser step.
        import torch.distributed as dist

        grad = cast(torch.Tensor, param.grad)  # a post-accumulate-grad hook runs once the gradient is there
        dist.all_reduce(grad, op=dist.ReduceOp.SUM)
        grad.div_(self.world_size)

    def mean(self, losses: dict[str, float]) -> dict[str, float]:
        import torch.distributed as dist

        keys = sorted(losses)
        values = torch.tensor([float(losses[k]) for k in keys], dtype=torch.float64)
        dist.all_reduce(values, op=dist.ReduceOp.SUM)
        return {k: float(v) / self.world_size for k, v in zip(keys, values.tolist())}

    def gather_rng(self, states: dict[str, Any]) -> dict[str, Any]:
        """Rank 0's states with every other rank's under "ranks" (a collective: every rank calls it)."""
        import torch.distributed as dist

        gathered: list[Any] = [None] * self.world_size
        dist.all_gather_object(gathered, states)
        return {**gathered[0], "ranks": gathered[1:]}

    def own_rng(self, states: dict[str, Any]) -> dict[str, Any]:
        ranks = states.get("ranks")
        if ranks is None or len(ranks) != self.world_size - 1:
            raise OffbenchError(
                f"checkpoint holds RNG states for {1 + len(ranks or [])} process(es), not {self.world_size}: resume with the same --nproc"
            )
        return states if self.rank == 0 else ranks[self.rank - 1]

    def barrier(self) -> None:
        import torch.distributed as dist

        dist.barrier()

    def share(self, value: Any) -> Any:
        """Rank 0's `value` on every rank."""
        import torch.distributed as dist

        box = [value]
        dist.broadcast_object_list(box, src=0)
        return box[0]


@dataclass(frozen=True)
class Launch:
    rank: int
    world_size: int
    local_rank: int


def launched() -> Launch | None:
    """The torchrun environment of this process, or None outside torchrun (or with one process)."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return None
    return Launch(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ.get("LOCAL_RANK", os.environ["RANK"])))


def join(launch: Launch, device: str) -> tuple[DataParallel, str]:
    """Join the process group (gloo on CPU, NCCL on CUDA); returns the rank's context and its device."""
    import datetime

    import torch.distributed as dist

    die_with_parent()  # torchrun starts ranks in their own sessions: they must not outlive it
    if os.getppid() == 1:
        raise SystemExit("the launcher is gone")
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise OffbenchError(f"--device {device}: CUDA is not available on this machine")
        device, backend = f"cuda:{launch.local_rank}", "nccl"
        torch.cuda.set_device(launch.local_rank)
    else:
        backend = "gloo"
    if not dist.is_initialized():
        dist.init_process_group(backend, rank=launch.rank, world_size=launch.world_size, timeout=datetime.timedelta(hours=2))
    return DataParallel(launch.rank, launch.world_size, launch.local_rank), device


def leave() -> None:
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()


def relaunch(nproc: int, argv: list[str]) -> int:
    """Run `offbench ARGV` (without --nproc) as `nproc` processes on this machine under torchrun."""
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}", "-m", "offbench", *argv]
    try:
        return subprocess.run(command, preexec_fn=die_with_parent).returncode
    except KeyboardInterrupt:  # torchrun forwards the signal to the ranks, which stop at their last checkpoint
        return 130
