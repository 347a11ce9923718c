"""Conservative Q-Learning (Kumar et al. 2020, "Conservative Q-Learning for Offline Reinforcement Learning").

Continuous actions follow CORL's `algorithms/offline/cql.py` (SAC + CQL(H)); per update:

    critic   L_Q  = sum_i E[(Q_i(s,a) - y)^2] + cql_alpha * sum_i E_s[T logsumexp_a' Q_i(s,a')/T - Q_i(s,a)]
             y    = r + gamma (1 - terminal) min_j Q'_j(s', a'),  a' ~ pi(.|s')   (- alpha log pi(a'|s') if
                    backup_entropy; the best of n_actions draws if cql_max_target_backup)
             the logsumexp over a' is importance sampled: n_actions draws each from Unif[-1,1]^A (log density
             A log 0.5), pi(.|s) and pi(.|s'), every one evaluated at s, minus its log density.
             Lagrangian (cql_lagrange): cql_alpha * alpha' * (gap - cql_target_action_gap), and alpha' >= 0
             ascends that same term, so the gap is held near the target.
    actor    L_pi = E[alpha log pi(a~|s) - min_i Q_i(s,a~)]   (E[alpha log pi(a~|s) - log pi(a|s)] for bc_steps)
    alpha    L_a  = -E[log alpha * (log pi(a~|s) + target_entropy)],  target_entropy = -|A|
    targets  Q'  <- (1 - tau) Q' + tau Q  every target_update_period updates.

Discrete actions: a QR-DQN critic (Dabney et al. 2018, quantile Huber loss, target action = argmax of the
target network's mean) plus CQL(H) on Q = the mean of the quantiles, as in the CQL paper's Atari runs and
d3rlpy's DiscreteCQL:  L = L_QR + discrete_cql_alpha * E[logsumexp_a Q(s,a) - Q(s,a_data)].

Every loss of an update is computed from the parameters before the update (as CORL does), they touch disjoint
parameters, so one backward pass serves them all; the twin critics run as one batched ensemble, and the
data, random, current-policy and next-policy actions go through them in a single forward pass. The update's
noise is drawn for the whole batch before the losses (in the order they use it), so micro-batches
(`TrainConfig.micro_batch`) each take their rows' share of the same draws.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from offbench.baselines.base import SINGLE_AND_MULTI_TASK, DatasetSpec, MicroBatching, accumulate_backward
from offbench.baselines.nets import fused_adam, mlp, part
from offbench.baselines.q_learning import (
    NUM_CRITICS,
    DataTransform,
    EnsembleMLP,
    action_kind,
    frozen,
    polyak_update,
    reward_scale,
    seeded_generator,
    target_copy,
)
from offbench.errors import OffbenchError
from offbench.evaluation.policy import MarkovPolicy, PolicyOptions
from offbench.records import ranged

LOG_STD_MIN, LOG_STD_MAX = -20.0, 2.0  # CORL's TanhGaussianPolicy clamp
CRITIC_BLOCK_ROWS = 768  # rows per block of the critics' pass: within 2 % of the best for 2 x 128 and 3 x 256 (CPU)
OUTPUT_GAIN = 1e-2  # CORL's init_module_weights: last layer initialised with gain 1e-2


@dataclass
class CQLConfig:
    """Defaults: CORL's CQL for D4RL locomotion (TrainConfig of algorithms/offline/cql.py and
    configs/offline/cql/<env>/medium_v2.yaml); baselines/cql/default.toml records the source."""

    discount: float = ranged(0.99, ge=0, le=1)
    policy_lr: float = ranged(3e-5, gt=0)  # also the entropy temperature's learning rate, as in CORL
    critic_lr: float = ranged(3e-4, gt=0)  # also alpha' (Lagrangian) learning rate, as in CORL
    tau: float = ranged(5e-3, gt=0, le=1)  # Polyak rate of the target critics (CORL soft_target_update_rate)
    target_update_period: int = ranged(1, ge=1)
    hidden_dim: int = ranged(256, ge=1)
    critic_hidden_layers: int = ranged(3, ge=0)  # CORL q_n_hidden_layers (5 in its AntMaze configs)
    actor_hidden_layers: int = ranged(3, ge=0)  # fixed at 3 in CORL's TanhGaussianPolicy
    orthogonal_init: bool = True  # the critics' hidden layers (CORL's actor keeps PyTorch's default init)
    normalize_observations: bool = True  # dataset mean / (std + 1e-3), as CORL's `normalize`
    normalize_reward: bool = False  # rewards * max_episode_length / return range (True in CORL's hopper configs)
    reward_scale: float = 1.0  # then * reward_scale + reward_bias
    reward_bias: float = 0.0
    alpha_multiplier: float = ranged(1.0, ge=0)
    automatic_entropy_tuning: bool = True
    backup_entropy: bool = False
    log_std_multiplier: float = 1.0  # CORL policy_log_std_multiplier (a learnt scalar, like the offset)
    log_std_offset: float = -1.0
    bc_steps: int = ranged(0, ge=0)  # first updates train the actor by behaviour cloning
    cql_n_actions: int = ranged(10, ge=1)
    cql_importance_sample: bool = True
    cql_lagrange: bool = False
    cql_target_action_gap: float = -1.0
    cql_temp: float = ranged(1.0, gt=0)
    cql_alpha: float = ranged(10.0, ge=0)
    cql_max_target_backup: bool = False
    cql_clip_diff_min: float | None = None  # None: no clipping (CORL's -inf / inf; run.json is strict JSON)
    cql_clip_diff_max: float | None = None
    # discrete actions (QR-DQN + CQL): 200 quantiles as QR-DQN (Dabney et al. 2018) and the CQL paper's Atari
    # runs; weight 1.0 as d3rlpy's DiscreteCQLConfig.alpha. The rest (lr = critic_lr, tau, ...) is shared.
    n_quantiles: int = ranged(200, ge=1)
    discrete_cql_alpha: float = ranged(1.0, ge=0)


class TanhGaussianActor(nn.Module):
    """CORL's TanhGaussianPolicy: an MLP gives mean and log std; log std = multiplier * raw + offset, both learnt.
    CORL initialises it with init_module_weights(base_network) without its orthogonal flag: PyTorch's default for
    the hidden layers and Xavier with gain 1e-2 for the output layer."""

    def __init__(self, obs_dim: int, act_dim: int, config: CQLConfig):
        super().__init__()
        hidden = [config.hidden_dim] * config.actor_hidden_layers
        self.net = mlp(obs_dim, 2 * act_dim, hidden, orthogonal=False, output_gain=OUTPUT_GAIN)
        self.log_std_multiplier = nn.Parameter(torch.tensor(config.log_std_multiplier))
        self.log_std_offset = nn.Parameter(torch.tensor(config.log_std_offset))

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mean, raw_log_std = self.net(obs).chunk(2, dim=-1)
        log_std = (self.log_std_multiplier * raw_log_std + self.log_std_offset).clamp(LOG_STD_MIN, LOG_STD_MAX)
        return mean, log_std


def tanh_log_det(z: torch.Tensor) -> torch.Tensor:
    """log |d tanh(z) / dz| = 2 (log 2 - z - softplus(-2z)), summed over the action (torch's TanhTransform)."""
    return (2.0 * (math.log(2.0) - z - F.softplus(-2.0 * z))).sum(-1)


def sample_tanh_gaussian(mean: torch.Tensor, log_std: torch.Tensor, eps: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Reparameterised a = tanh(mean + std * eps) and log pi(a) from standard normal `eps`: (B, A) for one draw per
    row, or (B, n, A) for n draws per row: (B, n, A), (B, n)."""
    if eps.dim() == 3:
        mean, log_std = mean.unsqueeze(1), log_std.unsqueeze(1)
    z = mean + log_std.exp() * eps
    gaussian_log_prob = (-0.5 * eps.pow(2) - log_std - 0.5 * math.log(2 * math.pi)).sum(-1)
    return torch.tanh(z), gaussian_log_prob - tanh_log_det(z)


def tanh_gaussian_log_prob(mean: torch.Tensor, log_std: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
    """log pi(a|s) of given actions in (-1, 1) (clipped off the bounds, where atanh is infinite)."""
    z = torch.atanh(actions.clamp(-1 + 1e-6, 1 - 1e-6))
    gaussian = (-0.5 * ((z - mean) / log_std.exp()).pow(2) - log_std - 0.5 * math.log(2 * math.pi)).sum(-1)
    return gaussian - tanh_log_det(z)


class CQL(MicroBatching):
    """CQL baseline: SAC-based for Box actions, QR-DQN-based for Discrete actions (chosen from the dataset)."""

    name = "cql"
    Config = CQLConfig
    summary = "Conservative Q-Learning (Kumar et al. 2020): SAC-based for continuous actions, QR-DQN-based for discrete"
    tiny_config = {"hidden_dim": 16, "critic_hidden_layers": 1, "actor_hidden_layers": 1, "n_quantiles": 4, "cql_n_actions": 2}
    sampler = "transitions"
    action_kinds = ("continuous", "discrete")
    evaluation_protocols = SINGLE_AND_MULTI_TASK
    return_conditioned = False

    def __init__(self, config: CQLConfig, spec: DatasetSpec, device: str | torch.device = "cpu"):
        self.config, self.spec, self.device = config, spec, torch.device(device)
        self.discrete = action_kind(spec, "cql") == "discrete"
        if self.discrete:
            continuous_only = {
                "cql_lagrange": config.cql_lagrange,
                "bc_steps": config.bc_steps > 0,
                "cql_max_target_backup": config.cql_max_target_backup,
                "backup_entropy": config.backup_entropy,
            }
            used = [name for name, on in continuous_only.items() if on]
            if used:
                raise OffbenchError(f"cql: {', '.join(used)} apply to continuous actions only; this dataset has {spec.action_space}")
        self.generator = seeded_generator(self.device)
        self.step = 0
        scale = reward_scale(spec, "cql", config.normalize_reward, config.reward_scale)
        transform = DataTransform(spec, config.normalize_observations, scale, config.reward_bias)
        obs_dim = transform.input_dim
        hidden = [config.hidden_dim] * config.critic_hidden_layers
        if self.discrete:
            quantiles = mlp(obs_dim, spec.action_dim * config.n_quantiles, hidden, config.orthogonal_init, OUTPUT_GAIN)
            self.nets = nn.ModuleDict({"transform": transform, "critic": quantiles})
            self.nets["target_critic"] = target_copy(quantiles)
            midpoints = (torch.arange(config.n_quantiles, dtype=torch.float32) + 0.5) / config.n_quantiles
            self.quantile_midpoints = midpoints.to(self.device)
        else:
            critic = EnsembleMLP(obs_dim + spec.action_dim, 1, hidden, NUM_CRITICS, config.orthogonal_init, OUTPUT_GAIN)
            self.nets = nn.ModuleDict(
                {
                    "transform": transform,
                    "actor": TanhGaussianActor(obs_dim, spec.action_dim, config),
                    "critic": critic,
                    "target_critic": target_copy(critic),
                    "log_alpha": _Scalar(0.0),  # CORL: Scalar(0.0)
                    "log_alpha_prime": _Scalar(1.0),  # CORL: Scalar(1.0)
                }
            )
            self.target_entropy = -float(spec.action_dim)
        self.nets.to(self.device)
        # One Adam with a learning rate per group: the same per-parameter updates as an optimizer per network (CORL),
        # in one call. Critic lr for the critics and alpha' (Lagrangian), policy lr for the actor and temperature.
        critic_group = {"params": list(self.nets["critic"].parameters()), "lr": config.critic_lr}
        groups = [critic_group]
        if not self.discrete:
            policy_group = {"params": list(self.nets["actor"].parameters()), "lr": config.policy_lr}
            groups.append(policy_group)
            if config.automatic_entropy_tuning:
                policy_group["params"].append(self.nets["log_alpha"].value)
            if config.cql_lagrange:
                critic_group["params"].append(self.nets["log_alpha_prime"].value)
        self.optimizer = torch.optim.Adam(groups, fused=fused_adam(self.device))

    # ------------------------------------------------------------------------------------------ updates
    def update(self, batch: dict[str, torch.Tensor]) -> dict[str, float]:
        self.step += 1
        if not self.discrete:
            batch = {**batch, **self._noise(len(batch["observations"]))}
        self.optimizer.zero_grad(set_to_none=True)
        losses = accumulate_backward(self._losses, batch, self.micro_batch)  # disjoint parameters: one pass serves every loss
        self.optimizer.step()
        if self.step % self.config.target_update_period == 0:
            polyak_update(self.nets["target_critic"], self.nets["critic"], self.config.tau)
        names = [k for k in losses if k != "loss"]
        return dict(zip(names, torch.stack([losses[k].detach().float() for k in names]).tolist()))

    def _noise(self, rows: int) -> dict[str, torch.Tensor]:
        """The random numbers of a continuous update for `rows` rows, drawn in the order the losses use them."""
        cfg, act_dim, device = self.config, self.spec.action_dim, self.device

        def normal(*shape: int) -> torch.Tensor:
            return torch.randn(shape, generator=self.generator, device=device)

        n = cfg.cql_n_actions
        return {
            "noise_policy": normal(rows, act_dim),
            "noise_target": normal(rows, n, act_dim) if cfg.cql_max_target_backup else normal(rows, act_dim),
            "noise_random": torch.rand((rows, n, act_dim), generator=self.generator, device=device).mul_(2).sub_(1),
            "noise_current": normal(rows, n, act_dim),
            "noise_next": normal(rows, n, act_dim),
        }

    def _losses(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        transitions = part(self.nets, "transform", DataTransform).transitions(batch)
        return self._discrete_losses(*transitions) if self.discrete else self._continuous_losses(*transitions, batch)

    def _continuous_losses(self, obs, actions, rewards, next_obs, not_done, noise: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        cfg, actor, critic = self.config, self.nets["actor"], part(self.nets, "critic", EnsembleMLP)
        n, act_dim = cfg.cql_n_actions, actions.shape[-1]

        # SAC actor and temperature
        mean, log_std = actor(obs)
        new_actions, log_pi = sample_tanh_gaussian(mean, log_std, noise["noise_policy"])
        log_alpha = part(self.nets, "log_alpha", _Scalar).value
        alpha = log_alpha.detach().exp() * cfg.alpha_multiplier
        alpha_loss = -(log_alpha * (log_pi.detach() + self.target_entropy)).mean()
        if self.step <= cfg.bc_steps:
            policy_objective = tanh_gaussian_log_prob(mean, log_std, actions)
        else:
            with frozen(critic):
                policy_objective = critic(torch.cat([obs, new_actions], -1)).min(0).values.squeeze(-1)
        policy_loss = (alpha * log_pi - policy_objective).mean()

        with torch.no_grad():
            next_mean, next_log_std = actor(next_obs)
            if cfg.cql_max_target_backup:
                target_actions, target_log_pi = sample_tanh_gaussian(next_mean, next_log_std, noise["noise_target"])
                target_all = self._critic_at(part(self.nets, "target_critic", EnsembleMLP), next_obs, target_actions).min(0).values
                target_q, best = target_all.max(-1)
                target_log_pi = target_log_pi.gather(-1, best.unsqueeze(-1)).squeeze(-1)
            else:
                target_actions, target_log_pi = sample_tanh_gaussian(next_mean, next_log_std, noise["noise_target"])
                target_input = torch.cat([next_obs, target_actions], -1)
                target_q = self.nets["target_critic"](target_input).min(0).values.squeeze(-1)
            if cfg.backup_entropy:
                target_q = target_q - alpha * target_log_pi
            td_target = rewards + not_done * cfg.discount * target_q
            random_actions = noise["noise_random"]
            current_actions, current_log_pi = sample_tanh_gaussian(mean.detach(), log_std.detach(), noise["noise_current"])
            next_actions, next_log_pi = sample_tanh_gaussian(next_mean, next_log_std, noise["noise_next"])

        # critics: data, random, current-policy and next-policy actions, all at s, in one pass -> (2, B, 1 + 3n)
        all_actions = torch.cat([actions.unsqueeze(1), random_actions, current_actions, next_actions], 1)
        q = self._critic_at(critic, obs, all_actions)
        q_data = q[..., 0]
        td_loss = (q_data - td_target).pow(2).mean(-1).sum()  # qf1_loss + qf2_loss
        q_random, q_current, q_next = q[..., 1:].split(n, dim=-1)
        if cfg.cql_importance_sample:
            random_log_density = act_dim * math.log(0.5)
            ood = torch.cat([q_random - random_log_density, q_next - next_log_pi, q_current - current_log_pi], -1)
        else:
            ood = torch.cat([q_random, q_data.unsqueeze(-1), q_next, q_current], -1)
        ood_value = torch.logsumexp(ood / cfg.cql_temp, dim=-1) * cfg.cql_temp
        diff = ood_value - q_data
        if cfg.cql_clip_diff_min is not None or cfg.cql_clip_diff_max is not None:
            diff = diff.clamp(cfg.cql_clip_diff_min, cfg.cql_clip_diff_max)
        gap = diff.mean(-1)  # per critic
        if cfg.cql_lagrange:
            alpha_prime = part(self.nets, "log_alpha_prime", _Scalar).value.exp().clamp(0.0, 1e6)
            conservative = alpha_prime.detach() * cfg.cql_alpha * (gap - cfg.cql_target_action_gap)
            alpha_prime_loss = -0.5 * (alpha_prime * cfg.cql_alpha * (gap.detach() - cfg.cql_target_action_gap)).sum()
        else:
            alpha_prime = alpha_prime_loss = torch.zeros((), device=obs.device)
            conservative = cfg.cql_alpha * gap
        critic_loss = td_loss + conservative.sum()

        loss = critic_loss + policy_loss + alpha_prime_loss
        if cfg.automatic_entropy_tuning:
            loss = loss + alpha_loss
        return {
            "loss": loss,
            "critic_loss": critic_loss,
            "td_loss": td_loss,
            "cql_gap": gap.mean(),
            "q_data": q_data.mean(),
            "policy_loss": policy_loss,
            "log_pi": log_pi.mean(),
            "alpha": alpha,
            "alpha_prime": alpha_prime,
        }

    @staticmethod
    def _critic_at(critic: EnsembleMLP, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """Q of several actions per state: obs (B, O), actions (B, k, A) -> (E, B, k), through the critics'
        blocked pass (EnsembleMLP.blocked: the bulk of an update)."""
        k = actions.shape[1]
        inputs = torch.cat([obs.unsqueeze(1).expand(-1, k, -1), actions], -1)
        return critic.blocked(inputs.reshape(obs.shape[0] * k, -1), CRITIC_BLOCK_ROWS).view(-1, obs.shape[0], k)

    def _discrete_losses(self, obs, actions, rewards, next_obs, not_done) -> dict[str, torch.Tensor]:
        cfg, rows = self.config, torch.arange(obs.shape[0], device=obs.device)
        quantiles = self.nets["critic"](obs).view(obs.shape[0], -1, cfg.n_quantiles)  # (B, |A|, N)
        data_quantiles = quantiles[rows, actions]  # (B, N)
        with torch.no_grad():
            next_quantiles = self.nets["target_critic"](next_obs).view(obs.shape[0], -1, cfg.n_quantiles)
            next_best = next_quantiles[rows, next_quantiles.mean(-1).argmax(-1)]
            target = rewards.unsqueeze(-1) + (not_done * cfg.discount).unsqueeze(-1) * next_best
        # quantile Huber loss (kappa = 1): sum over the predicted quantiles i, mean over target quantiles j
        errors = target.unsqueeze(1) - data_quantiles.unsqueeze(2)  # (B, i, j)
        huber = torch.where(errors.abs() <= 1.0, 0.5 * errors.pow(2), errors.abs() - 0.5)
        weight = (self.quantile_midpoints.view(1, -1, 1) - (errors.detach() < 0).float()).abs()
        qr_loss = (weight * huber).sum(1).mean(1).mean()
        q = quantiles.mean(-1)  # (B, |A|)
        q_data = q[rows, actions]
        gap = (torch.logsumexp(q, dim=-1) - q_data).mean()
        loss = qr_loss + cfg.discrete_cql_alpha * gap
        return {"loss": loss, "critic_loss": loss, "qr_loss": qr_loss, "cql_gap": gap, "q_data": q_data.mean()}

    # ------------------------------------------------------------------------------------------ acting
    def policy(self, options: PolicyOptions = PolicyOptions()) -> MarkovPolicy:
        """Greedy evaluation policy: tanh of the actor's mean, or argmax of mean Q over quantiles."""
        if not options.deterministic:
            raise OffbenchError("cql evaluates with its deterministic policy only (drop eval_deterministic=false)")
        return MarkovPolicy(self._act, self.spec.action_space, self.device, options)

    def _act(self, observations: torch.Tensor, task_ids: torch.Tensor | None = None) -> torch.Tensor:
        transform = part(self.nets, "transform", DataTransform)
        obs = transform.observations(observations, task_ids)
        if self.discrete:
            q = self.nets["critic"](obs).view(obs.shape[0], -1, self.config.n_quantiles).mean(-1)
            return q.argmax(-1)
        mean, _ = self.nets["actor"](obs)
        return transform.actions_from_unit(torch.tanh(mean))

    # ------------------------------------------------------------------------------------------ resume
    def state_dict(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "nets": self.nets.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "generator": self.generator.get_state(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.step = int(state["step"])
        self.nets.load_state_dict(state["nets"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.generator.set_state(state["generator"])


class _Scalar(nn.Module):
    """A learnt scalar as a module (CORL's Scalar), so it sits in the ModuleDict with the networks."""

    def __init__(self, init: float):
        super().__init__()
        self.value = nn.Parameter(torch.tensor(float(init)))
