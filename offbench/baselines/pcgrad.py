"""Gradient surgery (PCGrad, Yu et al. 2020, "Gradient Surgery for Multi-Task Learning"), as an optimiser option
of the multi-task baselines (`--set gradient=pcgrad`).

Per task t, g_t is the gradient of that task's loss (the mean over the batch rows of task t). Each g_t is
projected, in a random order over the other tasks j, onto the normal plane of every g_j it conflicts with:

    if g_t . g_j < 0:   g_t <- g_t - (g_t . g_j) / |g_j|^2 * g_j

(g_t keeps being updated through the loop; the g_j are the original gradients). The update averages the projected
gradients over tasks on the parameters every task's loss reaches and sums them on the others (task-specific
heads: each keeps its own task's full gradient), as MOORE's PCGrad (AhmedMagdyHendawy/MOORE moore/utils/pcgrad.py,
`reduction='mean'`) does. A task reaches a parameter where its gradient there is not all zero: MOORE's test,
"the gradient is not None", tells nothing here, since a MOORE network writes every head's rows into one output
tensor, so each head lies in every task's graph with a zero gradient from the other tasks. Agreeing gradients pass
unchanged, so without conflicts the step is the task-balanced mean gradient. Checked against the paper's Algorithm 1
and its official code (tianheyu927/PCGrad, PCGrad_tf.py): they sum over tasks on every parameter; the mean on
shared ones keeps the step size independent of the number of tasks. The random order comes from torch's
generator, so a seeded run is reproducible and resumes identically.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

import torch

from offbench.baselines.base import accumulate_backward, batch_rows
from offbench.errors import OffbenchError

GRADIENT_MODES = ("mean", "pcgrad")


def check_gradient_mode(mode: str, baseline: str, num_tasks: int) -> None:
    if mode not in GRADIENT_MODES:
        raise OffbenchError(f"{baseline}: gradient must be one of {', '.join(GRADIENT_MODES)}, not {mode!r}")
    if mode == "pcgrad" and num_tasks < 2:
        raise OffbenchError(f"{baseline}: gradient=pcgrad projects one task's gradient off another's; this dataset has one task")


def backward(
    loss_fn: Callable[[dict[str, torch.Tensor]], torch.Tensor],
    batch: dict[str, torch.Tensor],
    parameters,
    mode: str,
    micro_batch: int | None = None,
    units: Callable[[dict[str, torch.Tensor]], Any] = batch_rows,
) -> torch.Tensor:
    """The hook a baseline's update calls in place of `loss_fn(batch).backward()`: that (in micro-batches of
    `micro_batch` rows, `loss_fn` a mean over `units`: `accumulate_backward`), or with mode "pcgrad" the PCGrad
    gradient of the batch's per-task losses. Returns the loss to log (PCGrad: the mean of the task losses)."""
    if mode == "pcgrad":
        losses = task_losses(loss_fn, batch)
        pcgrad_backward(losses, parameters)
        return torch.stack([loss.detach() for loss in losses]).mean()
    return accumulate_backward(lambda part: {"loss": loss_fn(part)}, batch, micro_batch, units)["loss"]


def per_task_losses(losses: torch.Tensor, task_ids: torch.Tensor) -> list[torch.Tensor]:
    """The mean of the per-row `losses` over the rows of each task present in the batch (task-id order)."""
    return [losses[task_ids == t].mean() for t in torch.unique(task_ids)]


def task_losses(loss_fn: Callable[[dict[str, torch.Tensor]], torch.Tensor], batch: dict[str, torch.Tensor]) -> list[torch.Tensor]:
    """`loss_fn` (a baseline's batch loss) on each task's rows of `batch`, task-id order: the hook that gives any
    multi-task baseline PCGrad without a per-row loss. Every tensor of the batch is split by rows."""
    task_ids = batch["task_ids"]
    return [loss_fn({key: value[task_ids == t] for key, value in batch.items()}) for t in torch.unique(task_ids)]


def project_conflicting(gradients: torch.Tensor) -> torch.Tensor:
    """(T, P) task gradients -> (T, P) PCGrad-projected gradients (Algorithm 1, before the final reduction)."""
    projected = gradients.clone()
    squared_norms = (gradients * gradients).sum(1)
    for t in range(len(gradients)):
        others = [j for j in torch.randperm(len(gradients)).tolist() if j != t]
        for j in others:
            dot = projected[t] @ gradients[j]
            if dot < 0 and squared_norms[j] > 0:
                projected[t] -= dot / squared_norms[j] * gradients[j]
    return projected


def pcgrad_backward(task_losses: list[torch.Tensor], parameters: Iterable[torch.nn.Parameter]) -> None:
    """Set `.grad` of `parameters` from the PCGrad-projected gradients of `task_losses` (in place of
    `loss.backward()`): their mean on parameters every loss reaches (a gradient not all zero), their sum on the
    others; parameters outside every loss's graph get no gradient."""
    params = [p for p in parameters if p.requires_grad]
    rows = []
    in_graph, reached = torch.zeros(len(params), dtype=torch.bool), torch.zeros(len(params), dtype=torch.long)
    for i, loss in enumerate(task_losses):
        grads = torch.autograd.grad(loss, params, retain_graph=i < len(task_losses) - 1, allow_unused=True)
        in_graph |= torch.tensor([g is not None for g in grads])
        reached += torch.tensor([g is not None and bool(g.any()) for g in grads])
        rows.append(torch.cat([(torch.zeros_like(p) if g is None else g).reshape(-1) for p, g in zip(params, grads)]))
    projected = project_conflicting(torch.stack(rows))
    total, offset = projected.sum(0), 0
    for p, graph, count in zip(params, in_graph.tolist(), reached.tolist()):
        grad = total[offset : offset + p.numel()].view_as(p)
        offset += p.numel()
        if graph:
            p.grad = grad / len(task_losses) if count == len(task_losses) else grad.clone()
