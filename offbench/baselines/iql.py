"""Implicit Q-Learning (Kostrikov et al. 2021, "Offline Reinforcement Learning with Implicit Q-Learning").

Follows CORL's `algorithms/offline/iql.py`; per update, every loss from the parameters before the update:

    value   L_V  = E[|expectile - 1(u < 0)| u^2],  u = min_i Q'_i(s,a) - V(s)     (expectile regression)
    critic  L_Q  = mean_i E[(Q_i(s,a) - (r + gamma (1 - terminal) V(s')))^2]
    actor   L_pi = E[min(exp(beta u), exp_adv_max) * -log pi(a|s)]                  (advantage-weighted BC)
            (squared error instead of -log pi with deterministic_actor; cross-entropy for discrete actions)
    targets Q'  <- (1 - tau) Q' + tau Q;  the actor's learning rate follows a cosine schedule over `steps`.

Continuous actions: a Gaussian actor with a tanh mean and a state-independent log std (CORL's GaussianPolicy).
Discrete actions: the critics output one value per action and the actor is categorical (argmax to act).
With normalize_reward, rewards are scaled by max_episode_length / (max return - min return) over the
dataset's episodes (CORL's modify_reward for locomotion, after the IQL paper); then * reward_scale + reward_bias.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from offbench.baselines.base import SINGLE_AND_MULTI_TASK, DatasetSpec, MicroBatching, accumulate_backward
from offbench.baselines.nets import mlp, part
from offbench.baselines.q_learning import (
    NUM_CRITICS,
    DataTransform,
    EnsembleMLP,
    action_kind,
    polyak_update,
    reward_scale,
    target_copy,
)
from offbench.errors import OffbenchError
from offbench.evaluation.policy import MarkovPolicy, PolicyOptions
from offbench.records import ranged

LOG_STD_MIN, LOG_STD_MAX = -20.0, 2.0  # CORL
SCHEDULES = ("cosine", "linear", "constant")


@dataclass
class IQLConfig:
    """Defaults: CORL's IQL for D4RL locomotion (TrainConfig of algorithms/offline/iql.py and
    configs/offline/iql/<env>/medium_v2.yaml); baselines/iql/default.toml records the source."""

    steps: int = ranged(1_000_000, ge=1)  # number of updates; the length of the actor's learning-rate schedule
    discount: float = ranged(0.99, ge=0, le=1)
    tau: float = ranged(5e-3, gt=0, le=1)  # Polyak rate of the target critics
    beta: float = ranged(3.0, ge=0)  # inverse temperature of the advantage weights
    expectile: float = ranged(0.7, gt=0, lt=1)  # CORL iql_tau
    exp_adv_max: float = ranged(100.0, gt=0)  # CORL EXP_ADV_MAX
    deterministic_actor: bool = False  # CORL iql_deterministic
    normalize_observations: bool = True
    normalize_reward: bool = False  # True in CORL's hopper configs
    reward_scale: float = 1.0  # applied after normalize_reward
    reward_bias: float = 0.0
    value_lr: float = ranged(3e-4, gt=0)
    critic_lr: float = ranged(3e-4, gt=0)
    actor_lr: float = ranged(3e-4, gt=0)
    actor_lr_schedule: str = ranged("cosine", choices=SCHEDULES)  # CORL: CosineAnnealingLR(actor_optimizer, max_timesteps)
    hidden_dim: int = ranged(256, ge=1)
    num_hidden_layers: int = ranged(2, ge=0)


class GaussianActor(nn.Module):
    """CORL's GaussianPolicy (tanh mean, learnt state-independent log std) or DeterministicPolicy."""

    def __init__(self, obs_dim: int, act_dim: int, hidden: list[int], deterministic: bool):
        super().__init__()
        self.net = nn.Sequential(mlp(obs_dim, act_dim, hidden), nn.Tanh())
        self.log_std = None if deterministic else nn.Parameter(torch.zeros(act_dim))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.net(obs)

    def negative_log_likelihood(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        mean = self.net(obs)
        if self.log_std is None:
            return (mean - actions).pow(2).sum(-1)
        log_std = self.log_std.clamp(LOG_STD_MIN, LOG_STD_MAX)
        return -(-0.5 * ((actions - mean) / log_std.exp()).pow(2) - log_std - 0.5 * math.log(2 * math.pi)).sum(-1)


class CategoricalActor(nn.Module):
    def __init__(self, obs_dim: int, n_actions: int, hidden: list[int]):
        super().__init__()
        self.net = mlp(obs_dim, n_actions, hidden)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.net(obs)  # logits

    def negative_log_likelihood(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(self.net(obs), actions, reduction="none")


def expectile_loss(diff: torch.Tensor, expectile: float) -> torch.Tensor:
    """CORL's asymmetric_l2_loss: E[|expectile - 1(diff < 0)| diff^2]."""
    return (torch.abs(expectile - (diff < 0).float()) * diff.pow(2)).mean()


class IQL(MicroBatching):
    """IQL baseline for Box (Gaussian actor) or Discrete (categorical actor) actions, chosen from the dataset."""

    name = "iql"
    Config = IQLConfig
    summary = (
        "Implicit Q-Learning (Kostrikov et al. 2021): expectile value regression, twin critics and an advantage-"
        "weighted actor, never querying actions outside the data"
    )
    tiny_config = {"hidden_dim": 16, "num_hidden_layers": 1}
    sampler = "transitions"
    action_kinds = ("continuous", "discrete")
    evaluation_protocols = SINGLE_AND_MULTI_TASK
    return_conditioned = False

    def __init__(self, config: IQLConfig, spec: DatasetSpec, device: str | torch.device = "cpu"):
        if config.actor_lr_schedule not in SCHEDULES:
            raise OffbenchError(f"iql: actor_lr_schedule must be one of {', '.join(SCHEDULES)}, not {config.actor_lr_schedule!r}")
        self.config, self.spec, self.device = config, spec, torch.device(device)
        self.discrete = action_kind(spec, "iql") == "discrete"
        if self.discrete and config.deterministic_actor:
            raise OffbenchError(f"iql: deterministic_actor applies to continuous actions only; this dataset has {spec.action_space}")
        self.step = 0
        scale = reward_scale(spec, "iql", config.normalize_reward, config.reward_scale)
        transform = DataTransform(spec, config.normalize_observations, scale, config.reward_bias)
        obs_dim = transform.input_dim
        hidden = [config.hidden_dim] * config.num_hidden_layers
        if self.discrete:  # Q(s, .) for every action at once
            critic = EnsembleMLP(obs_dim, spec.action_dim, hidden, NUM_CRITICS)
            actor: nn.Module = CategoricalActor(obs_dim, spec.action_dim, hidden)
        else:
            critic = EnsembleMLP(obs_dim + spec.action_dim, 1, hidden, NUM_CRITICS)
            actor = GaussianActor(obs_dim, spec.action_dim, hidden, config.deterministic_actor)
        self.nets = nn.ModuleDict(
            {
                "transform": transform,
                "value": mlp(obs_dim, 1, hidden),
                "critic": critic,
                "target_critic": target_copy(critic),
                "actor": actor,
            }
        ).to(self.device)
        self.optimizers = {
            "value": torch.optim.Adam(self.nets["value"].parameters(), lr=config.value_lr),
            "critic": torch.optim.Adam(self.nets["critic"].parameters(), lr=config.critic_lr),
            "actor": torch.optim.Adam(self.nets["actor"].parameters(), lr=config.actor_lr),
        }

    def _actor_lr_factor(self, done: int) -> float:
        """Multiplier of actor_lr after `done` updates: CORL's CosineAnnealingLR(T_max=steps, eta_min=0) in
        closed form (derived from the step count, so nothing extra to checkpoint)."""
        progress = min(done, self.config.steps) / self.config.steps
        if self.config.actor_lr_schedule == "cosine":
            return 0.5 * (1 + math.cos(math.pi * progress))
        if self.config.actor_lr_schedule == "linear":
            return 1.0 - progress
        return 1.0

    # ------------------------------------------------------------------------------------------ update
    def _q(self, critic: nn.Module, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """Q_i(s, a) of every critic: (2, B)."""
        if self.discrete:
            return critic(obs).gather(-1, actions.view(1, -1, 1).expand(2, -1, 1)).squeeze(-1)
        return critic(torch.cat([obs, actions], -1)).squeeze(-1)

    def losses(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The value, critic and actor losses (their sum: "loss") and the logged means of `batch`."""
        cfg = self.config
        obs, actions, rewards, next_obs, not_done = part(self.nets, "transform", DataTransform).transitions(batch)
        with torch.no_grad():
            target_q = self._q(self.nets["target_critic"], obs, actions).min(0).values
            next_v = self.nets["value"](next_obs).squeeze(-1)
            td_target = rewards + not_done * cfg.discount * next_v
        v = self.nets["value"](obs).squeeze(-1)
        advantage = target_q - v
        value_loss = expectile_loss(advantage, cfg.expectile)
        q = self._q(self.nets["critic"], obs, actions)
        critic_loss = (q - td_target).pow(2).mean(-1).mean()  # mean over the twin critics, as CORL
        weights = torch.exp(cfg.beta * advantage.detach()).clamp(max=cfg.exp_adv_max)
        actor = part(self.nets, "actor", (GaussianActor, CategoricalActor))
        actor_loss = (weights * actor.negative_log_likelihood(obs, actions)).mean()
        return {
            "loss": value_loss + critic_loss + actor_loss,
            "value_loss": value_loss,
            "critic_loss": critic_loss,
            "actor_loss": actor_loss,
            "advantage": advantage.mean(),
            "q_data": q.mean(),
            "adv_weight": weights.mean(),
        }

    def update(self, batch: dict[str, torch.Tensor]) -> dict[str, float]:
        self.step += 1
        for group in self.optimizers["actor"].param_groups:
            group["lr"] = self.config.actor_lr * self._actor_lr_factor(self.step - 1)
        for optimizer in self.optimizers.values():
            optimizer.zero_grad(set_to_none=True)
        logged = accumulate_backward(self.losses, batch, self.micro_batch)  # disjoint parameters: one pass serves all three
        for optimizer in self.optimizers.values():
            optimizer.step()
        polyak_update(self.nets["target_critic"], self.nets["critic"], self.config.tau)
        names = ["value_loss", "critic_loss", "actor_loss", "advantage", "q_data", "adv_weight"]
        return dict(zip(names, torch.stack([logged[name] for name in names]).tolist()))

    # ------------------------------------------------------------------------------------------ acting
    def policy(self, options: PolicyOptions = PolicyOptions()) -> MarkovPolicy:
        """Evaluation policy: the actor's mean (CORL's act in eval mode), or the most likely discrete action."""
        if not options.deterministic:
            raise OffbenchError("iql evaluates with its deterministic policy only (drop eval_deterministic=false)")
        return MarkovPolicy(self._act, self.spec.action_space, self.device, options)

    def _act(self, observations: torch.Tensor, task_ids: torch.Tensor | None = None) -> torch.Tensor:
        transform = part(self.nets, "transform", DataTransform)
        out = self.nets["actor"](transform.observations(observations, task_ids))
        return out.argmax(-1) if self.discrete else transform.actions_from_unit(out.clamp(-1.0, 1.0))

    # ------------------------------------------------------------------------------------------ resume
    def state_dict(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "nets": self.nets.state_dict(),
            "optimizers": {name: opt.state_dict() for name, opt in self.optimizers.items()},
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.step = int(state["step"])
        self.nets.load_state_dict(state["nets"])
        for name, opt in self.optimizers.items():
            opt.load_state_dict(state["optimizers"][name])
