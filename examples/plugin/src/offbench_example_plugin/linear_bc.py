"""Linear behaviour cloning, an offbench baseline that lives outside offbench (the example of docs/plugins.md).

The policy maps the standardised observation (plus the task's one-hot on multi-task data) to an action through one
linear layer, or through one hidden ReLU layer when `hidden_dim > 0`. Continuous actions are regressed with MSE and
clipped into the action bounds when played; discrete actions are logits trained with cross-entropy and played
greedily. pyproject.toml registers the class:

    [project.entry-points."offbench.baselines"]
    linear-bc = "offbench_example_plugin.linear_bc:LinearBC"

and its standard configs are `configs/linear-bc/*.toml` beside this file.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from offbench.baselines.base import SINGLE_AND_MULTI_TASK, DatasetSpec
from offbench.errors import OffbenchError
from offbench.evaluation.policy import MarkovPolicy, PolicyOptions
from offbench.records import ranged


@dataclass
class LinearBCConfig:
    hidden_dim: int = ranged(0, ge=0)  # 0: a linear policy; otherwise one hidden ReLU layer this wide
    learning_rate: float = ranged(1e-3, gt=0)
    weight_decay: float = ranged(0.0, ge=0)


class LinearPolicyNet(nn.Module):
    """Observation (and task id) -> action (continuous) or logits (discrete)."""

    def __init__(self, config: LinearBCConfig, spec: DatasetSpec):
        super().__init__()
        observation_dim = int(np.prod(spec.observation_shape))
        mean = spec.observation_mean if spec.observation_mean is not None else np.zeros(observation_dim)
        std = spec.observation_std if spec.observation_std is not None else np.ones(observation_dim)
        # buffers, not constants: the dataset's statistics travel in the checkpoint with the weights
        self.register_buffer("observation_mean", torch.as_tensor(np.reshape(mean, -1), dtype=torch.float32))
        self.register_buffer("observation_scale", torch.as_tensor(np.reshape(std, -1) + 1e-3, dtype=torch.float32))
        self.num_tasks = spec.num_tasks
        inputs = observation_dim + (spec.num_tasks if spec.num_tasks > 1 else 0)
        if config.hidden_dim:
            self.body = nn.Sequential(nn.Linear(inputs, config.hidden_dim), nn.ReLU(), nn.Linear(config.hidden_dim, spec.action_dim))
        else:
            self.body = nn.Linear(inputs, spec.action_dim)

    def forward(self, observations: torch.Tensor, task_ids: torch.Tensor | None) -> torch.Tensor:
        features = (observations.flatten(1) - self.observation_mean) / self.observation_scale
        if self.num_tasks > 1:
            features = torch.cat([features, F.one_hot(task_ids.long(), self.num_tasks).to(features.dtype)], dim=-1)
        return self.body(features)


class LinearBC:
    name = "linear-bc"
    Config = LinearBCConfig
    sampler = "transitions"  # batches of (observations, actions, ...) drawn uniformly from the data
    action_kinds = ("continuous", "discrete")
    evaluation_protocols = SINGLE_AND_MULTI_TASK
    return_conditioned = False

    def __init__(self, config: LinearBCConfig, spec: DatasetSpec, device: str | torch.device = "cpu"):
        self.config, self.spec, self.device = config, spec, torch.device(device)
        self.net = LinearPolicyNet(config, spec).to(self.device)
        self.optimizer = torch.optim.Adam(self.net.parameters(), lr=config.learning_rate, weight_decay=config.weight_decay)
        if not spec.discrete:
            self.low = torch.as_tensor(spec.action_space.low, dtype=torch.float32, device=self.device).reshape(-1)
            self.high = torch.as_tensor(spec.action_space.high, dtype=torch.float32, device=self.device).reshape(-1)

    def update(self, batch: dict[str, torch.Tensor]) -> dict[str, float]:
        output = self.net(batch["observations"], batch.get("task_ids"))
        if self.spec.discrete:
            loss = F.cross_entropy(output, batch["actions"].long())
        else:
            loss = F.mse_loss(output, batch["actions"].reshape(output.shape))
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        return {"bc_loss": loss.item()}

    def act(self, observations: torch.Tensor, task_ids: torch.Tensor | None = None) -> torch.Tensor:
        output = self.net(observations, task_ids)
        return output.argmax(dim=-1) if self.spec.discrete else output.clamp(self.low, self.high)

    def policy(self, options: PolicyOptions = PolicyOptions()) -> MarkovPolicy:
        """The regressed action (greedy for discrete actions): there is no distribution to sample from."""
        if not options.deterministic:
            raise OffbenchError("linear-bc evaluates deterministically only (drop eval_deterministic=false)")
        return MarkovPolicy(self.act, self.spec.action_space, self.device, options)

    def state_dict(self) -> dict[str, Any]:
        return {"net": self.net.state_dict(), "optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.net.load_state_dict(state["net"])
        self.optimizer.load_state_dict(state["optimizer"])
