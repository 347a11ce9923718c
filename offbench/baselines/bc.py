"""Behaviour cloning: an MLP actor regressed onto the dataset's actions (the reference row of every table).
On a multi-task card it is MTBC: the task id's one-hot is appended to the normalised observation.

Reference: CORL, algorithms/offline/any_percent_bc.py (Actor 2 x 256 ReLU + tanh * max_action, Adam
3e-4, batch 256, MSE, states normalised with eps 1e-3), trained on all the data (CORL's "BC"; its
"BC-10%" keeps only the best trajectories and is not offered here). Discrete actions: the same MLP
gives logits, trained with cross-entropy, acting greedily.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import torch
import torch.nn.functional as F
from torch import nn

from offbench.baselines import pcgrad
from offbench.baselines.base import SINGLE_AND_MULTI_TASK, DatasetSpec, MicroBatching
from offbench.baselines.nets import BoundedActions, ObservationNormalizer, flat_observation_dim, mlp, task_input_dim, with_task_onehot
from offbench.evaluation.policy import MarkovPolicy, PolicyOptions, check_sampling, discrete_action
from offbench.records import ranged


@dataclass
class BCConfig:
    hidden_dim: int = ranged(256, ge=1)
    num_layers: int = ranged(2, ge=0)
    learning_rate: float = ranged(3e-4, gt=0)
    normalize_observations: bool = True
    gradient: str = "mean"  # multi-task data: "pcgrad" for gradient surgery over the tasks of each batch (MTBC+PCGrad)


class BCTrainingConfig(Protocol):
    """What BC's own code reads of a config; its Actor reads the rest (BCConfig, or MOORE-BC's MooreBCConfig)."""

    learning_rate: float
    gradient: str


class Actor(nn.Module):
    def __init__(self, config: BCConfig, spec: DatasetSpec):
        super().__init__()
        self.normalize = ObservationNormalizer(spec, eps=1e-3, enabled=config.normalize_observations)
        self.num_tasks = spec.num_tasks
        self.net = mlp(flat_observation_dim(spec) + task_input_dim(spec), spec.action_dim, [config.hidden_dim] * config.num_layers)
        self.bound = nn.Identity() if spec.discrete else BoundedActions(spec)

    def forward(self, observations: torch.Tensor, task_ids: torch.Tensor | None = None) -> torch.Tensor:
        """Actions (continuous) or logits (discrete)."""
        return self.bound(self.net(with_task_onehot(self.normalize(observations), task_ids, self.num_tasks)))


class BC(MicroBatching):
    name = "bc"
    # the network, built from the baseline's own Config; a subclass (MOORE-BC) brings its own with the same
    # forward(observations, task_ids)
    Actor: Callable[[Any, DatasetSpec], nn.Module] = Actor
    Config = BCConfig
    summary = (
        "Behaviour cloning: an MLP actor regressed onto the dataset's actions; MTBC on multi-task cards (the task's one-hot as an input)"
    )
    tiny_config = {"hidden_dim": 32, "num_layers": 2}
    sampler = "transitions"
    action_kinds = ("continuous", "discrete")
    evaluation_protocols = SINGLE_AND_MULTI_TASK
    return_conditioned = False
    # seeds sampled discrete actions (eval_deterministic = false); a run sets its own seed (offbench/training/trainer.py)
    evaluation_seed = 0

    def __init__(self, config: BCTrainingConfig, spec: DatasetSpec, device: str | torch.device = "cpu"):
        pcgrad.check_gradient_mode(config.gradient, self.name, spec.num_tasks)
        self.config, self.spec, self.device = config, spec, torch.device(device)
        self.actor = self.Actor(config, spec).to(self.device)
        self.optimizer = torch.optim.Adam(self.actor.parameters(), lr=config.learning_rate)

    def loss(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        output = self.actor(batch["observations"], batch.get("task_ids"))
        if self.spec.discrete:
            return F.cross_entropy(output, batch["actions"].long())
        return F.mse_loss(output, batch["actions"].reshape(output.shape))

    def update(self, batch: dict[str, torch.Tensor]) -> dict[str, float]:
        self.actor.train()
        self.optimizer.zero_grad(set_to_none=True)
        loss = pcgrad.backward(self.loss, batch, self.actor.parameters(), self.config.gradient, self.micro_batch)
        self.optimizer.step()
        return {"actor_loss": loss.item()}

    def act(
        self, observations: torch.Tensor, task_ids: torch.Tensor | None = None, generator: torch.Generator | None = None
    ) -> torch.Tensor:
        """The actor's action: its output for continuous actions; for discrete ones the most likely action, or with a
        `generator` one drawn from the softmax of the logits."""
        self.actor.eval()
        output = self.actor(observations, task_ids)
        return discrete_action(output, generator) if self.spec.discrete else output

    def policy(self, options: PolicyOptions = PolicyOptions()) -> MarkovPolicy:
        """Greedy by default. With eval_deterministic = false a discrete action is drawn from the imitated distribution
        (the softmax its cross-entropy fits), from a generator seeded with the run's seed: a sampling behaviour
        policy's most likely action can loop where its draws did not (MiniGrid's PPO data). A continuous actor
        regresses the mean action, so it has no distribution to draw from."""
        check_sampling(self, options)
        if options.deterministic:
            return MarkovPolicy(self.act, self.spec.action_space, self.device, options)
        generator = torch.Generator(self.device).manual_seed(self.evaluation_seed)
        return MarkovPolicy(functools.partial(self.act, generator=generator), self.spec.action_space, self.device, options)

    def state_dict(self) -> dict[str, Any]:
        return {"actor": self.actor.state_dict(), "optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.actor.load_state_dict(state["actor"])
        self.optimizer.load_state_dict(state["optimizer"])
