"""MOORE (Hendawy et al., ICLR 2024, "Multi-Task Reinforcement Learning with Mixture of Orthogonal Experts") as the
torso of two offline multi-task learners: behaviour cloning (`moore-bc`) and IQL (`moore-iql`).

The network, checked against AhmedMagdyHendawy/MOORE (moore/utils/mixture_layers.py, moore/utils/networks_sac.py
and run/metaworld/run_metaworld_mt10_mhsac_mt_moore.sh):

    h_1..h_k = expert_i(x)                 k copies of one MLP torso (ReLU between layers, linear last layer)
    u_1..u_k = GramSchmidt(h_1..h_k)       per sample: u_1 = h_1/|h_1|, u_i = (h_i - sum_j<i (h_i.u_j) u_j) / |.|
    w        = W one_hot(task)             a bias-free Linear(num_tasks -> k): the task's mixing weights
    z        = tanh(sum_i w_i u_i)         ("agg_activation Linear Tanh": nothing before mixing, tanh after)
    output   = head_task(z)                one linear output head per task

`orthogonal = false` drops the Gram-Schmidt step: the plain mixture of experts of the paper's ablation. Expert
counts as published (MT10 4, MT50 6, MiniGrid MT3/MT5/MT7 2/3/4) are in baselines/moore-*/<dataset>.toml.

What differs from the paper, plainly: MOORE was published for ONLINE RL (multi-head SAC on Meta-World, PPO on
MiniGrid). Here the same network is trained OFFLINE on a fixed dataset: `moore-bc` regresses the dataset's
actions (MSE, or cross-entropy for discrete actions), `moore-iql` is Implicit Q-Learning (Kostrikov et al. 2021)
with a MOORE torso in every network (value, twin critics, actor). IQL rather than CQL because IQL never queries
the critics on actions outside the dataset (CQL's sampled actions would go through k experts, k times the cost of
the costliest part of a CQL update on CPU), its actor is advantage-weighted BC, i.e. the `moore-bc` objective with
per-sample weights, so the two rows isolate what the critic adds, and DaCe-DT re-reports a multi-task IQL (MTIQL)
on MT50 to compare with. Layer initialisation is PyTorch's default (MOORE uses Xavier uniform); the actor's log
std is one learnt vector per task (MOORE's SAC predicts it from the features); no entropy term (offline).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from offbench.baselines import pcgrad
from offbench.baselines.base import DatasetSpec, MicroBatching, accumulate_backward, multi_task_spec
from offbench.baselines.bc import BC
from offbench.baselines.iql import LOG_STD_MAX, LOG_STD_MIN, SCHEDULES
from offbench.baselines.nets import BoundedActions, ObservationNormalizer, flat_observation_dim, part
from offbench.baselines.pcgrad import GRADIENT_MODES
from offbench.baselines.q_learning import DataTransform, EnsembleMLP, action_kind, polyak_update, reward_scale, target_copy
from offbench.errors import OffbenchError
from offbench.evaluation.policy import MarkovPolicy, PolicyOptions
from offbench.records import ranged


def gram_schmidt(h: torch.Tensor) -> torch.Tensor:
    """(B, k, d) expert outputs -> (B, k, d) orthonormal per sample (classical Gram-Schmidt, as MOORE's
    OrthogonalLayer1D: each vector minus its projections on the basis so far, then normalised)."""
    basis = [h[:, 0] / h[:, 0].norm(dim=-1, keepdim=True)]
    for i in range(1, h.shape[1]):
        previous = torch.stack(basis, dim=1)  # (B, i, d)
        v = h[:, i] - torch.einsum("bj,bjd->bd", torch.einsum("bd,bjd->bj", h[:, i], previous), previous)
        basis.append(v / v.norm(dim=-1, keepdim=True))
    return torch.stack(basis, dim=1)


class MooreNetwork(nn.Module):
    """k experts -> (orthogonalised) task-weighted mixture -> tanh -> the task's own output head."""

    def __init__(self, in_dim: int, out_dim: int, expert_dims: list[int], num_experts: int, num_tasks: int, orthogonal: bool):
        super().__init__()
        if not expert_dims:
            raise OffbenchError("moore: expert_dims needs at least one layer width")
        if orthogonal and num_experts > expert_dims[-1]:
            raise OffbenchError(f"moore: {num_experts} orthogonal experts need features of at least that width, not {expert_dims[-1]}")
        self.orthogonal = orthogonal
        self.experts = EnsembleMLP(in_dim, expert_dims[-1], expert_dims[:-1], num_experts)
        self.task_encoder = nn.Linear(num_tasks, num_experts, bias=False)
        nn.init.xavier_uniform_(self.task_encoder.weight)  # as MOORE
        self.out_dim = out_dim
        self.heads = nn.ModuleList(nn.Linear(expert_dims[-1], out_dim) for _ in range(num_tasks))

    def features(self, x: torch.Tensor, task_ids: torch.Tensor) -> torch.Tensor:
        """(B, in), (B,) -> the mixed representation z (B, d)."""
        h = self.experts(x).transpose(0, 1)  # (B, k, d)
        if self.orthogonal:
            h = gram_schmidt(h)
        weights = self.task_encoder.weight.t()[task_ids]  # == task_encoder(one_hot(task_ids)), (B, k)
        return torch.tanh(torch.einsum("bk,bkd->bd", weights, h))

    def forward(self, x: torch.Tensor, task_ids: torch.Tensor) -> torch.Tensor:
        z = self.features(x, task_ids)
        out = z.new_empty(len(z), self.out_dim)
        for task in torch.unique(task_ids).tolist():  # each task's rows through its own head
            rows = task_ids == task
            out[rows] = self.heads[task](z[rows])
        return out


def require_task_ids(baseline, options: PolicyOptions) -> None:
    if options.task_ids is None:
        raise ValueError(f"{baseline.name} acts with the task id of every env row (PolicyOptions.task_ids)")


def task_policy(baseline, options: PolicyOptions) -> MarkovPolicy:
    """The evaluation policy of a MOORE actor: greedy (mean action, or most likely discrete action) per row's task."""
    require_task_ids(baseline, options)
    if not options.deterministic:
        raise OffbenchError(f"{baseline.name} evaluates deterministically only (drop eval_deterministic=false)")
    return MarkovPolicy(baseline.act, baseline.spec.action_space, baseline.device, options)


# ---------------------------------------------------------------------------------------------- MOORE-BC
@dataclass
class MooreBCConfig:
    expert_dims: tuple[int, ...] = ranged((400, 400, 400), ge=1)  # MOORE's Meta-World torso (3 x 400)
    num_experts: int = ranged(4, ge=1)
    orthogonal: bool = True  # false: plain mixture of experts (the ablation)
    learning_rate: float = ranged(3e-4, gt=0)
    normalize_observations: bool = True
    gradient: str = ranged("mean", choices=GRADIENT_MODES)  # "pcgrad": gradient surgery over the tasks of each batch


class MooreActor(nn.Module):
    """BC's actor with a MOORE network: normalised observations -> per-task actions (bounded) or logits."""

    def __init__(self, config: MooreBCConfig, spec: DatasetSpec):
        super().__init__()
        self.normalize = ObservationNormalizer(spec, eps=1e-3, enabled=config.normalize_observations)
        self.net = MooreNetwork(
            flat_observation_dim(spec), spec.action_dim, list(config.expert_dims), config.num_experts, spec.num_tasks, config.orthogonal
        )
        self.bound = nn.Identity() if spec.discrete else BoundedActions(spec)

    def forward(self, observations: torch.Tensor, task_ids: torch.Tensor) -> torch.Tensor:
        return self.bound(self.net(self.normalize(observations), task_ids))


class MooreBC(BC):
    """Multi-task behaviour cloning with a MOORE torso: BC's loss, update and policy (offbench/baselines/bc.py)
    on MooreActor (MSE, or cross-entropy for discrete actions, to the dataset's actions)."""

    name = "moore-bc"
    Config = MooreBCConfig
    summary = (
        "MOORE (Hendawy et al., ICLR 2024) torso (Gram-Schmidt-orthogonalised experts, bias-free task mixing, tanh, one"
        " head per task) trained by behaviour cloning; `orthogonal=false` is the plain mixture of experts"
    )
    tiny_config = {"expert_dims": [16, 16], "num_experts": 3}
    Actor = MooreActor
    evaluation_protocols = ("multi-task",)

    def __init__(self, config: MooreBCConfig, spec: DatasetSpec, device: str | torch.device = "cpu"):
        multi_task_spec(spec, self.name)
        super().__init__(config, spec, device)

    def policy(self, options: PolicyOptions) -> MarkovPolicy:
        """BC's policy (greedy, or drawn from the softmax for discrete actions), each row through its task's head."""
        require_task_ids(self, options)
        return super().policy(options)


# ---------------------------------------------------------------------------------------------- MOORE-IQL
@dataclass
class MooreIQLConfig:
    """IQL's hyper-parameters (CORL's defaults, as offbench's iql) with MOORE networks in place of the MLPs."""

    steps: int = ranged(1_000_000, ge=1)  # number of updates; the length of the actor's learning-rate schedule
    discount: float = ranged(0.99, ge=0, le=1)
    tau: float = ranged(5e-3, gt=0, le=1)
    beta: float = 3.0
    expectile: float = ranged(0.7, gt=0, lt=1)
    exp_adv_max: float = 100.0
    normalize_observations: bool = True
    normalize_reward: bool = False
    reward_scale: float = 1.0
    reward_bias: float = 0.0
    value_lr: float = ranged(3e-4, gt=0)
    critic_lr: float = ranged(3e-4, gt=0)
    actor_lr: float = ranged(3e-4, gt=0)
    actor_lr_schedule: str = ranged("cosine", choices=SCHEDULES)
    expert_dims: tuple[int, ...] = ranged((400, 400, 400), ge=1)
    num_experts: int = ranged(4, ge=1)
    orthogonal: bool = True
    gradient: str = ranged("mean", choices=GRADIENT_MODES)


class MooreIQL(MicroBatching):
    """IQL whose value, twin critics and actor are MOORE networks (Gaussian actor, or categorical for discrete):

    value   L_V  = E[|expectile - 1(u < 0)| u^2],  u = min_i Q'_i(s,a,t) - V(s,t)
    critic  L_Q  = mean_i E[(Q_i(s,a,t) - (r + gamma (1 - terminal) V(s',t)))^2]
    actor   L_pi = E[min(exp(beta u), exp_adv_max) * -log pi(a|s,t)]
    """

    name = "moore-iql"
    Config = MooreIQLConfig
    summary = "IQL with MOORE networks (value, twin critics, actor)"
    tiny_config = {"expert_dims": [16, 16], "num_experts": 3}
    sampler = "transitions"
    action_kinds = ("continuous", "discrete")
    evaluation_protocols = ("multi-task",)
    return_conditioned = False

    def __init__(self, config: MooreIQLConfig, spec: DatasetSpec, device: str | torch.device = "cpu"):
        multi_task_spec(spec, self.name)
        pcgrad.check_gradient_mode(config.gradient, self.name, spec.num_tasks)
        if config.actor_lr_schedule not in SCHEDULES:
            raise OffbenchError(f"{self.name}: actor_lr_schedule must be one of {', '.join(SCHEDULES)}, not {config.actor_lr_schedule!r}")
        self.config, self.spec, self.device = config, spec, torch.device(device)
        self.discrete = action_kind(spec, self.name) == "discrete"
        self.step = 0
        scale = reward_scale(spec, self.name, config.normalize_reward, config.reward_scale)
        # the task enters MOORE through its mixing weights and heads, never as an input: no one-hot on the states
        transform = DataTransform(dataclasses.replace(spec, num_tasks=1), config.normalize_observations, scale, config.reward_bias)
        obs_dim, act_dim = transform.input_dim, spec.action_dim

        def moore(in_dim: int, out_dim: int) -> MooreNetwork:
            return MooreNetwork(in_dim, out_dim, list(config.expert_dims), config.num_experts, spec.num_tasks, config.orthogonal)

        critic_in, critic_out = (obs_dim, act_dim) if self.discrete else (obs_dim + act_dim, 1)
        critics = nn.ModuleList([moore(critic_in, critic_out), moore(critic_in, critic_out)])
        self.nets = nn.ModuleDict(
            {
                "transform": transform,
                "value": moore(obs_dim, 1),
                "critic": critics,
                "target_critic": target_copy(critics),
                "actor": moore(obs_dim, act_dim),
            }
        ).to(self.device)
        if not self.discrete:  # CORL's state-independent log std, one per task
            self.log_std = nn.Parameter(torch.zeros(spec.num_tasks, act_dim, device=self.device))
        actor_params = list(self.nets["actor"].parameters()) + ([] if self.discrete else [self.log_std])
        self.groups = {
            "value": list(self.nets["value"].parameters()),
            "critic": list(self.nets["critic"].parameters()),
            "actor": actor_params,
        }
        self.optimizers = {
            "value": torch.optim.Adam(self.groups["value"], lr=config.value_lr),
            "critic": torch.optim.Adam(self.groups["critic"], lr=config.critic_lr),
            "actor": torch.optim.Adam(self.groups["actor"], lr=config.actor_lr),
        }

    def _q(self, critics: nn.ModuleList, obs: torch.Tensor, actions: torch.Tensor, task_ids: torch.Tensor) -> torch.Tensor:
        """Q_i(s, a, t) of both critics: (2, B)."""
        if self.discrete:
            return torch.stack([c(obs, task_ids).gather(-1, actions.view(-1, 1)).squeeze(-1) for c in critics])
        return torch.stack([c(torch.cat([obs, actions], -1), task_ids).squeeze(-1) for c in critics])

    def _negative_log_likelihood(self, obs: torch.Tensor, actions: torch.Tensor, task_ids: torch.Tensor) -> torch.Tensor:
        out = self.nets["actor"](obs, task_ids)
        if self.discrete:
            return F.cross_entropy(out, actions, reduction="none")
        mean, log_std = torch.tanh(out), self.log_std[task_ids].clamp(LOG_STD_MIN, LOG_STD_MAX)
        return -(-0.5 * ((actions - mean) / log_std.exp()).pow(2) - log_std - 0.5 * math.log(2 * math.pi)).sum(-1)

    def row_losses(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Per row of `batch`: the value, critic and actor losses, the advantage, Q and advantage weight."""
        cfg = self.config
        task_ids = batch["task_ids"]
        obs, actions, rewards, next_obs, not_done = part(self.nets, "transform", DataTransform).transitions(batch)
        with torch.no_grad():
            target_q = self._q(part(self.nets, "target_critic", nn.ModuleList), obs, actions, task_ids).min(0).values
            td_target = rewards + not_done * cfg.discount * self.nets["value"](next_obs, task_ids).squeeze(-1)
        advantage = target_q - self.nets["value"](obs, task_ids).squeeze(-1)
        q = self._q(part(self.nets, "critic", nn.ModuleList), obs, actions, task_ids)
        weights = torch.exp(cfg.beta * advantage.detach()).clamp(max=cfg.exp_adv_max)
        return {
            "value_loss": torch.abs(cfg.expectile - (advantage < 0).float()) * advantage.pow(2),
            "critic_loss": (q - td_target).pow(2).mean(0),
            "actor_loss": weights * self._negative_log_likelihood(obs, actions, task_ids),
            "advantage": advantage,
            "q_data": q.mean(0),
            "adv_weight": weights,
        }

    def losses(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The batch means of `row_losses`, and the sum of the three losses ("loss", the mean gradient's)."""
        means = {name: per_row.mean() for name, per_row in self.row_losses(batch).items()}
        return {"loss": means["value_loss"] + means["critic_loss"] + means["actor_loss"], **means}

    def update(self, batch: dict[str, torch.Tensor]) -> dict[str, float]:
        cfg = self.config
        self.step += 1
        progress = min(self.step - 1, cfg.steps) / cfg.steps
        factor = {"cosine": 0.5 * (1 + math.cos(math.pi * progress)), "linear": 1.0 - progress, "constant": 1.0}[cfg.actor_lr_schedule]
        for group in self.optimizers["actor"].param_groups:
            group["lr"] = cfg.actor_lr * factor
        for optimizer in self.optimizers.values():
            optimizer.zero_grad(set_to_none=True)
        if cfg.gradient == "pcgrad":  # surgery per network: their parameters are disjoint
            rows = self.row_losses(batch)
            for name in ("value", "critic", "actor"):
                pcgrad.pcgrad_backward(pcgrad.per_task_losses(rows[f"{name}_loss"], batch["task_ids"]), self.groups[name])
            logged = {name: per_row.detach().mean() for name, per_row in rows.items()}
        else:
            logged = accumulate_backward(self.losses, batch, self.micro_batch)
        for optimizer in self.optimizers.values():
            optimizer.step()
        polyak_update(self.nets["target_critic"], self.nets["critic"], cfg.tau)
        names = ["value_loss", "critic_loss", "actor_loss", "advantage", "q_data", "adv_weight"]
        return dict(zip(names, torch.stack([logged[name] for name in names]).tolist()))

    def act(self, observations: torch.Tensor, task_ids: torch.Tensor) -> torch.Tensor:
        transform = part(self.nets, "transform", DataTransform)
        out = self.nets["actor"](transform.observations(observations), task_ids)
        return out.argmax(-1) if self.discrete else transform.actions_from_unit(torch.tanh(out))

    def policy(self, options: PolicyOptions) -> MarkovPolicy:
        return task_policy(self, options)

    def state_dict(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "nets": self.nets.state_dict(),
            "log_std": None if self.discrete else self.log_std.detach().clone(),
            "optimizers": {name: opt.state_dict() for name, opt in self.optimizers.items()},
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.step = int(state["step"])
        self.nets.load_state_dict(state["nets"])
        if not self.discrete:
            self.log_std.data.copy_(state["log_std"])
        for name, opt in self.optimizers.items():
            opt.load_state_dict(state["optimizers"][name])
