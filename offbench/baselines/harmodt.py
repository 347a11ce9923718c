"""HarmoDT (Hu et al., ICML 2024, "HarmoDT: Harmony Multi-Task Decision Transformer for Offline RL"): a Prompt-DT
whose tasks each train and act in their own sparse subspace of the shared transformer weights, a binary mask per
task found by bi-level optimisation.

    masks    one per task over the transformer's weights (blocks and final LayerNorm; never the embeddings or the
             action head), density 1 - sparsity per layer by ERK (Erdos-Renyi-Kernel), drawn independently per task
    inner    iteration i trains task t = i mod T on a batch of t only: weights outside mask_t set to 0 for the
             forward, loss backward, gradient clipped (norm 0.25), gradient multiplied by mask_t, AdamW step, then
             the weights outside mask_t put back as they were (untouched by t's step)
    outer    every `mask_interval` iterations: per task the gradient g_t of its loss under its mask (clipped as
             above) and the harmony gradient gbar = mean_t (mask_t * g_t); per task, with k = the scheduled count,
               regrow the k inactive weights with the largest agreement gbar . g_t
               prune  the k active weights with the smallest score gamma * gbar . g_t + g_t^2   (gamma 10)
             k = int(eta_max + (eta_min - eta_max) (1 + cos(2 pi i / steps)) / 2): 0 -> eta_max -> 0 over training
    act      task t's rows are evaluated with mask_t

Checked line by line against charleshsc/HarmoDT (main.py: the round robin, `cosine_annealing`, the outer step;
prompt_dt/prompt_seq_trainer.py: `train_step_mix`, `update_gradient`; prompt_dt/fl_utils.py: `ERK_maskinit`,
`apply_mask_model`, `apply_mask_grad`, `load_original_parameters`, `mask_dead_harmo` (regrow), `mask_generate_harmo`
(prune, "fisher" mode)). Defaults there: embedding 256, 6 layers, 8 heads, dropout 0.1, K 20, prompt length 5,
batch 8, AdamW lr 1e-4 and weight decay 1e-4, 10k warm-up, sparsity 0.2, interval 500, eta 0 -> 100, gamma 10.

Where this differs from that code, and why:
- The official code builds masks over every parameter and only skips names containing "embed"/"predict" in the
  forward and the gradient; its regrow/prune top-k runs over the whole flattened model, so some moves land on
  embedding or head entries (where a mask only decides which entries a task's step may change). Here masks exist
  over the transformer's weights only, as the paper describes, and all k moves are inside them; the embeddings,
  prompt embeddings and action head are shared and updated by every task's step.
- Regrow scores: the official g_t is the gradient AFTER masking, which is exactly 0 on the task's inactive
  weights, so its agreement score gbar . g_t is 0 on every regrow candidate (transformer weights) and the choice
  falls to top-k's tie order. We score regrowth with the task's gradient before masking (same masked forward),
  which gives the agreement the paper describes; pruning uses the masked gradient, as the official code does.
- ERK keeps an exact number of active weights per layer (a random subset of round(density * n)); the official
  code draws each entry independently (Bernoulli), so its per-layer density is only approximately the target.
- The outer step uses each task's most recent batch (at most T - 1 iterations old under the round robin); the
  official code draws a fresh batch per task.
- Reported: the final checkpoint (the paper reports the best evaluation during training).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from offbench.baselines.base import DatasetSpec, accumulate_backward
from offbench.baselines.dt import real_steps
from offbench.baselines.prompt_dt import PromptDT, PromptDTConfig, PromptStates
from offbench.errors import OffbenchError
from offbench.records import ranged


@dataclass
class HarmoDTConfig(PromptDTConfig):
    embedding_dim: int = ranged(256, ge=1)
    num_layers: int = ranged(6, ge=1)
    num_heads: int = ranged(8, ge=1)
    steps: int = ranged(1_000_000, ge=1)  # iterations of training: the length of the mask-change schedule (HarmoDT max_iters)
    sparsity: float = ranged(0.2, ge=0, lt=1)  # fraction of each task's transformer weights outside its mask
    mask_interval: int = ranged(500, ge=1)  # iterations between outer (mask) updates
    max_change: int = ranged(100, ge=0)  # eta_max: weights regrown (and pruned) per task at the schedule's peak
    min_change: int = ranged(0, ge=0)  # eta_min
    harmony_weight: float = ranged(10.0, ge=0)  # gamma of the prune score


def erk_densities(shapes: dict[str, tuple[int, ...]], density: float) -> dict[str, float]:
    """Per-layer densities whose weighted mean is `density`, proportional to sum(shape) / prod(shape) (ERK), layers
    that would exceed 1 kept dense and the rest re-solved: fl_utils.ERK_maskinit with erk_power_scale 1."""
    dense: set[str] = set()
    while True:
        rhs, divisor, raw = 0.0, 0.0, {}
        for name, shape in shapes.items():
            n = float(np.prod(shape))
            if name in dense:
                rhs -= n * (1 - density)
            else:
                rhs += n * density
                raw[name] = float(np.sum(shape)) / n
                divisor += raw[name] * n
        epsilon = rhs / divisor
        largest = max(raw.values())
        if largest * epsilon <= 1:
            return {name: 1.0 if name in dense else epsilon * raw[name] for name in shapes}
        dense |= {name for name, value in raw.items() if value == largest}


def change_count(iteration: int, steps: int, low: int, high: int) -> int:
    """main.py's cosine_annealing(alpha = iteration / steps): low at the start and the end, high half-way."""
    return int(high + 0.5 * (low - high) * (1 + math.cos(2 * math.pi * iteration / steps)))


class HarmoDT(PromptDT):
    name = "harmodt"
    Config = HarmoDTConfig
    summary = (
        "HarmoDT (Hu et al., ICML 2024): Prompt-DT with one ERK mask per task over the transformer's weights, bi-level "
        "training (round robin of one-task iterations under the task's mask; every 500 iterations masks regrown by "
        "agreement with the mean gradient and pruned by `gamma * gbar . g + g^2`)"
    )
    tiny_config = {
        "segment_length": 4,
        "prompt_length": 2,
        "prompt_pool": 2,
        "embedding_dim": 16,
        "num_layers": 2,
        "num_heads": 2,
        "warmup_steps": 10,
        "mask_interval": 10,
        "max_change": 20,
        "steps": 40,
    }
    one_task_per_batch = True  # the sampler's round robin: batch i holds task i mod T
    config: HarmoDTConfig  # PromptDT's __init__ keeps the config it is given, here a HarmoDTConfig

    def __init__(self, config: HarmoDTConfig, spec: DatasetSpec, device: str | torch.device = "cpu"):
        if config.gradient != "mean":
            raise OffbenchError("harmodt: gradient surgery does not apply (each iteration trains one task in its own subspace)")
        if not 0 <= config.sparsity < 1:
            raise OffbenchError(f"harmodt: sparsity must be in [0, 1), got {config.sparsity}")
        if config.mask_interval < 1 or config.steps < 1:
            raise OffbenchError("harmodt: mask_interval and steps must be at least 1")
        super().__init__(config, spec, device)
        self.masked = [(name, p) for name, p in self.model.named_parameters() if name.startswith(self.model.TRANSFORMER)]
        sizes = [p.numel() for _, p in self.masked]
        self.bounds = np.concatenate([[0], np.cumsum(sizes)]).tolist()
        densities = erk_densities({name: tuple(p.shape) for name, p in self.masked}, 1 - config.sparsity)
        masks = torch.zeros(spec.num_tasks, self.bounds[-1], dtype=torch.bool)
        for task in range(spec.num_tasks):
            for (name, p), lo in zip(self.masked, self.bounds[:-1]):
                active = round(densities[name] * p.numel())
                masks[task, lo + torch.randperm(p.numel())[:active]] = True
        self.masks = masks.to(self.device)  # (T, N): task t's mask over the flattened transformer weights
        self.iteration = 0
        self.recent_batches: dict[int, dict[str, torch.Tensor]] = {}  # each task's latest batch, for the outer step
        self._masked_weights: tuple[tuple[int, int], dict[str, torch.Tensor]] | None = None  # evaluation: see masked_weights

    # ---------------------------------------------------------------------------------------- masks
    def mask_views(self, task: int) -> list[torch.Tensor]:
        return [self.masks[task, lo:hi].view_as(p) for (_, p), lo, hi in zip(self.masked, self.bounds[:-1], self.bounds[1:])]

    @torch.no_grad()
    def apply_mask(self, task: int) -> list[torch.Tensor]:
        """Zero the weights outside task's mask (apply_mask_model); returns the weights as they were."""
        originals = [p.detach().clone() for _, p in self.masked]
        for (_, p), mask in zip(self.masked, self.mask_views(task)):
            p.mul_(mask)
        return originals

    @torch.no_grad()
    def restore(self, originals: list[torch.Tensor], keep_task: int | None = None) -> None:
        """Put the weights back; with keep_task, only those outside its mask (load_original_parameters)."""
        masks = self.mask_views(keep_task) if keep_task is not None else [None] * len(originals)
        for (_, p), original, mask in zip(self.masked, originals, masks):
            p.copy_(original if mask is None else torch.where(mask, p, original))

    def flat_gradient(self) -> torch.Tensor:
        return torch.cat([(torch.zeros_like(p) if p.grad is None else p.grad).reshape(-1) for _, p in self.masked])

    def batch_task(self, batch: dict[str, torch.Tensor]) -> int:
        tasks = torch.unique(batch["task_ids"])
        if len(tasks) != 1:
            raise ValueError("harmodt trains one task per batch (the sampler's one_task_per_batch)")
        return int(tasks[0])

    # ---------------------------------------------------------------------------------------- training
    def update(self, batch: dict[str, torch.Tensor]) -> dict[str, float]:
        self._masked_weights = None
        self.keep_task_prompts(batch)
        task = self.batch_task(batch)
        self.recent_batches[task] = batch
        self.model.train()
        originals = self.apply_mask(task)
        self.optimizer.zero_grad(set_to_none=True)
        loss = accumulate_backward(self.batch_loss, batch, self.micro_batch, real_steps)["loss"]
        self.clip_gradients()
        with torch.no_grad():
            for (_, p), mask in zip(self.masked, self.mask_views(task)):
                if p.grad is not None:
                    p.grad.mul_(mask)  # apply_mask_grad
        self.optimizer.step()
        self.restore(originals, keep_task=task)
        self.scheduler.step()
        self.iteration += 1
        scheduled = change_count(self.iteration - 1, self.config.steps, self.config.min_change, self.config.max_change)
        if self.iteration % self.config.mask_interval == 0:
            self.update_masks(scheduled)
        return {"action_loss": loss.item(), "learning_rate": float(self.scheduler.get_last_lr()[0]), "mask_change": float(scheduled)}

    def clip_gradients(self) -> None:
        """The official code's clip_grad_norm_; grad_clip = 0 turns it off, as in DT and Prompt-DT (a clip to norm 0
        would zero every gradient)."""
        if self.config.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.config.grad_clip)

    def task_gradient(self, task: int) -> torch.Tensor:
        """update_gradient: the gradient of task's loss under its mask, clipped, before masking (flattened)."""
        originals = self.apply_mask(task)
        self.optimizer.zero_grad(set_to_none=True)
        accumulate_backward(self.batch_loss, self.recent_batches[task], self.micro_batch, real_steps)
        self.clip_gradients()
        gradient = self.flat_gradient()
        self.restore(originals)
        self.optimizer.zero_grad(set_to_none=True)
        return gradient

    @torch.no_grad()
    def update_masks(self, count: int) -> None:
        """The outer step: per task, regrow `count` inactive weights and prune `count` active ones."""
        if count <= 0 or len(self.recent_batches) < self.spec.num_tasks:
            return
        with torch.enable_grad():
            dense = torch.stack([self.task_gradient(task) for task in range(self.spec.num_tasks)])  # (T, N)
        masked = dense * self.masks
        harmony = masked.mean(0)
        for task in range(self.spec.num_tasks):
            mask = self.masks[task]
            k = min(count, int(mask.sum()), int((~mask).sum()))
            regrow = torch.where(mask, float("-inf"), harmony * dense[task]).topk(k, largest=True).indices
            prune_score = self.config.harmony_weight * harmony * masked[task] + masked[task].pow(2)
            prune = torch.where(mask, prune_score, float("inf")).topk(k, largest=False).indices
            mask[regrow] = True
            mask[prune] = False

    # ---------------------------------------------------------------------------------------- acting
    def masked_weights(self) -> dict[str, torch.Tensor]:
        """The transformer's weights as each task sees them (times its mask), stacked over tasks (T, ...), for
        evaluation: computed once and kept until the weights change (an update or a load) or a mask does."""
        # the masks' identity and in-place version counter say whether they changed, without comparing a million
        # entries at every policy call (which cost ~5 % of HarmoDT's call)
        key = (id(self.masks), self.masks._version)
        cached = self._masked_weights
        if cached is None or cached[0] != key:
            stacked = {
                name: p.detach() * self.masks[:, lo:hi].view(-1, *p.shape)
                for (name, p), lo, hi in zip(self.masked, self.bounds[:-1], self.bounds[1:])
            }
            cached = self._masked_weights = (key, stacked)
        return cached[1]

    @torch.no_grad()
    def task_prompt_states(self) -> PromptStates:
        """Every task's evaluation prompt through the blocks under that task's mask (see PromptDT's)."""
        self.model.eval()
        prompts = self.scaled(self.task_prompts)
        per_task = []
        for task in range(self.spec.num_tasks):
            originals = self.apply_mask(task)
            try:
                per_task.append(self.model.prompt_states({key: value[task : task + 1] for key, value in prompts.items()}))
            finally:
                self.restore(originals)
        return [
            (torch.cat([states[block][0] for states in per_task]), torch.cat([states[block][1] for states in per_task]))
            for block in range(len(self.model.blocks))
        ]

    def act_rows(self, batch: dict[str, torch.Tensor], task_ids: torch.Tensor, prompt_states: PromptStates | None = None) -> torch.Tensor:
        """Every row through the network under its task's mask, all tasks in one pass: rows grouped by task (padded
        to the largest group with copies of a row, computed and dropped), each group's transformer weights its
        masked ones (`grouped_linear`: one batched product per layer), with its prompt states
        (`task_prompt_states()`, computed when not given)."""
        states = self.task_prompt_states() if prompt_states is None else prompt_states
        self.model.eval()
        tasks, group = torch.unique(task_ids, return_inverse=True)
        counts = torch.bincount(group, minlength=len(tasks))
        order = torch.argsort(group, stable=True)
        slot = torch.empty_like(group)
        slot[order] = torch.arange(len(group), device=group.device) - torch.repeat_interleave(counts.cumsum(0) - counts, counts)
        rows = torch.zeros(len(tasks), int(counts.max()), dtype=torch.long, device=group.device)
        rows[group, slot] = torch.arange(len(group), device=group.device)
        row_tasks = tasks.repeat_interleave(rows.shape[1])  # the task of each grouped row, group-major
        stacked = self.masked_weights()
        weights = stacked if len(tasks) == self.spec.num_tasks else {name: w[tasks] for name, w in stacked.items()}
        predicted = self.predict(
            {key: value[rows.flatten()] for key, value in batch.items()},
            {key: value[row_tasks] for key, value in self.task_prompts.items()},
            weights,
            newest_only=True,
            prompt_states=[(k[row_tasks], v[row_tasks]) for k, v in states],
        )[:, -1]
        return predicted.view(*rows.shape, -1)[group, slot]

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "masks": self.masks.clone(), "iteration": self.iteration, "recent_batches": self.recent_batches}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._masked_weights = None
        super().load_state_dict(state)
        if state["masks"].shape != self.masks.shape:
            raise ValueError(f"masks of shape {tuple(state['masks'].shape)}, this model needs {tuple(self.masks.shape)}")
        self.masks = state["masks"].to(self.device)
        self.iteration = int(state["iteration"])
        self.recent_batches = {int(t): {k: v.to(self.device) for k, v in b.items()} for t, b in state["recent_batches"].items()}
