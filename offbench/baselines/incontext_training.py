"""What Algorithm Distillation, DPT and Headless-AD share as baselines around their networks (those:
offbench.baselines.incontext): the training of one transformer on their losses (AdamW, a warm-up and cosine schedule,
clipping, T2MIR's momentum routers following each step, the checkpointed parts), and AD's and DPT's T2MIR Config
fields."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

import torch
from torch import nn

from offbench.baselines.base import MicroBatching, accumulate_backward, batch_rows
from offbench.baselines.incontext import CausalTransformer, routing_batch_coupling, warmup_cosine
from offbench.baselines.nets import fused_adam, load_part_states, part_states
from offbench.records import ranged


@dataclass
class T2MIRFields:
    """T2MIR's Config fields (docs/in-context-rl.md). The defaults are the reference's Dark Room AD; DPTConfig
    redeclares the four its Dark Room DPT sets otherwise. As a dataclass base they come before the Config's own
    fields in `dataclasses.fields` (and so in a printed config)."""

    moe: str = ranged(
        "none", choices=("none", "t2mir")
    )  # "t2mir": T2MIR's token- and task-wise experts in the last blocks (docs/in-context-rl.md)
    moe_layers: int = ranged(1, ge=1)  # T2MIR: how many of the last blocks get experts (the reference: the last one)
    num_experts: int = ranged(6, ge=1)  # T2MIR: token-wise experts
    task_experts: int = ranged(12, ge=1)  # T2MIR: task-wise experts (the reference's Dark Room AD: 12)
    top_k: int = ranged(2, ge=1)  # T2MIR: experts per token in each mixture
    expert_hidden: int = ranged(1024, ge=1)  # T2MIR: hidden units of one expert (the reference: twice the width)
    balance_weight: float = ranged(0.1, ge=0)  # T2MIR: weight of the token router's load-balancing term
    contrastive_weight: float = ranged(0.01, ge=0)  # T2MIR: weight of the task router's contrastive loss
    router_momentum: float = ranged(0.005, gt=0, le=1)  # T2MIR: EMA rate of the task router's momentum copy (keys)
    task_pairs: bool = False  # draw batches in same-task pairs of rows, every row's positive for the contrastive loss
    #                           (the reference's batches; the samplers' task_pairs option)

    def pair_option(self) -> dict[str, bool]:
        """The sampler option `task_pairs` asks for; none when off, so a sampler without it (XLand's in place) serves."""
        return {"task_pairs": True} if self.task_pairs else {}


class TrainedConfig(Protocol):
    """The Config fields the training reads (AD's, DPT's and Headless-AD's have them all)."""

    learning_rate: float
    weight_decay: float
    warmup_steps: int
    cosine_steps: int
    grad_clip: float


class TransformerModel(Protocol):
    """The model the training steps: a module whose blocks are one CausalTransformer (ADModel, DPTModel, HeadlessADModel)."""

    transformer: CausalTransformer

    def parameters(self, recurse: bool = True) -> Iterator[nn.Parameter]: ...

    def train(self, mode: bool = True) -> Any: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state_dict: Any) -> Any: ...


ConfigT = TypeVar("ConfigT", bound=TrainedConfig)
ModelT = TypeVar("ModelT", bound=TransformerModel)


class TransformerTraining(MicroBatching, Generic[ConfigT, ModelT]):
    """A baseline that trains `model` on its `losses` (a dict with the mean "loss" and what else to log). A subclass
    sets `config`, `device` and `model`, then calls `set_optimiser`."""

    config: ConfigT
    device: torch.device
    model: ModelT

    @abstractmethod
    def losses(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The training pass on `batch`: "loss" (a mean over what `step`'s `units` counts) and values to log."""

    def set_optimiser(self, betas: tuple[float, float] = (0.9, 0.999)) -> None:
        """AdamW over the model's parameters, its rate under `warmup_cosine` (linear warm-up, then cosine decay)."""
        config = self.config
        self.optimizer = torch.optim.AdamW(
            self.model.parameters(), lr=config.learning_rate, betas=betas, weight_decay=config.weight_decay, fused=fused_adam(self.device)
        )
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, warmup_cosine(config.warmup_steps, config.cosine_steps))

    def step(self, batch: dict[str, torch.Tensor], units: Callable[[dict[str, Any]], Any] = batch_rows) -> dict[str, torch.Tensor]:
        """One update on `batch` (in micro-batches if asked; `units`: what the loss is a mean over); returns what
        `losses` gave, for the whole batch."""
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        logged = accumulate_backward(self.losses, batch, self.micro_batch, units)
        if self.config.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.config.grad_clip)
        self.optimizer.step()
        self.model.transformer.follow_task_routers()
        self.scheduler.step()
        return logged

    def learning_rate(self) -> float:
        return float(self.scheduler.get_last_lr()[0])

    def state_dict(self) -> dict[str, Any]:
        return part_states(model=self.model, optimizer=self.optimizer, scheduler=self.scheduler)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        load_part_states(state, model=self.model, optimizer=self.optimizer, scheduler=self.scheduler)


class T2MIRTraining(TransformerTraining[ConfigT, ModelT]):
    """The training of a model that may have T2MIR's layers (AD, DPT): their routing terms tie a batch's rows."""

    @classmethod
    def batch_coupling(cls, config: Any) -> str | None:
        return routing_batch_coupling(config)
