"""Decision Transformer (Chen et al. 2021): a causal GPT over (return-to-go, state, action) tokens that
predicts each action from its state token; at evaluation it is conditioned on a target return.

Reference: CORL, algorithms/offline/dt.py and its D4RL configs (the numbers in baselines/dt/*.toml):
pre-LayerNorm blocks, learned timestep embedding added to every token, LayerNorm + dropout on the
embedded sequence, tanh action head scaled to the action bounds, MSE on real (unpadded) steps, AdamW
with linear warm-up, gradient clipping, returns-to-go multiplied by `reward_scale`, states normalised
with the dataset's mean and std + 1e-6. Discrete actions: actions enter through an embedding table,
the head gives logits trained with cross-entropy, and the policy acts greedily.

On a multi-task card it is MTDT: a learned embedding of the task id (a one-hot through a linear layer) is added
to every token, like the timestep embedding; evaluated per task with that task's target return (the best
episode return of the task in the data unless target_returns says otherwise).

Differences from CORL, on purpose: segments are LEFT-padded (offbench's sampler convention) so the
attention mask lets every token attend to itself (a padded query would otherwise have no key), and
the loss averages over real steps only (CORL multiplies by the mask and averages over all).

Work skipped because no output depends on it (the function and its gradients are unchanged, checked against the
full computation in tests/training/test_baselines.py): the last action token a_K (no token comes after it), and
in the last block everything but the keys and values at the R and a tokens (only the s tokens' outputs are read).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from offbench.baselines import pcgrad
from offbench.baselines.base import SINGLE_AND_MULTI_TASK, DatasetSpec, MicroBatching, TransformerShape
from offbench.baselines.incontext import init_gpt_weights
from offbench.baselines.nets import (
    Block,
    BoundedActions,
    Dropout,
    ObservationNormalizer,
    flat_observation_dim,
    fused_adam,
    load_part_states,
    part_states,
)
from offbench.evaluation.policy import PolicyOptions, actions_to_numpy, check_sampling, discrete_action
from offbench.records import ranged


@dataclass
class DTConfig:
    segment_length: int = ranged(20, ge=1)  # K: timesteps per training segment and evaluation context
    embedding_dim: int = ranged(128, ge=1)
    num_layers: int = ranged(3, ge=1)
    num_heads: int = ranged(1, ge=1)
    embedding_dropout: float = ranged(0.1, ge=0, lt=1)
    attention_dropout: float = ranged(0.1, ge=0, lt=1)
    residual_dropout: float = ranged(0.1, ge=0, lt=1)
    learning_rate: float = ranged(1e-4, gt=0)
    betas: tuple[float, float] = ranged((0.9, 0.999), ge=0, lt=1)
    weight_decay: float = ranged(1e-4, ge=0)
    warmup_steps: int = ranged(10_000, ge=0)
    grad_clip: float = ranged(0.25, ge=0)  # max gradient norm; 0 turns clipping off
    reward_scale: float = ranged(1e-3, gt=0)  # returns-to-go are multiplied by this before entering the network
    target_returns: tuple[float, ...] = ()  # evaluation targets (raw return); empty: the dataset's best episode return
    gradient: str = "mean"  # multi-task data: "pcgrad" for gradient surgery over the tasks of each batch


class DecisionTransformerModel(nn.Module):
    def __init__(self, config: DTConfig, spec: DatasetSpec):
        super().__init__()
        dim, self.discrete = config.embedding_dim, spec.discrete
        if dim % config.num_heads:
            raise ValueError(f"embedding_dim ({dim}) must be divisible by num_heads ({config.num_heads})")
        self.max_timestep = spec.max_episode_length
        self.normalize = ObservationNormalizer(spec, eps=1e-6)
        self.timestep_embedding = nn.Embedding(self.max_timestep, dim)
        self.state_embedding = nn.Linear(flat_observation_dim(spec), dim)
        self.action_embedding = nn.Embedding(spec.action_dim, dim) if spec.discrete else nn.Linear(spec.action_dim, dim)
        self.return_embedding = nn.Linear(1, dim)
        self.task_embedding = nn.Embedding(spec.num_tasks, dim) if spec.num_tasks > 1 else None
        self.embedding_norm, self.output_norm = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.embedding_dropout = Dropout(config.embedding_dropout)
        self.blocks = dt_blocks(config)
        self.action_head = nn.Linear(dim, spec.action_dim)
        self.bound = nn.Identity() if spec.discrete else BoundedActions(spec)
        self.apply(init_gpt_weights)

    def forward(self, observations, actions, returns_to_go, timesteps, mask, task_ids=None, newest_only: bool = False) -> torch.Tensor:
        """(B, K, ...) inputs, returns-to-go already scaled, task ids (B,) on multi-task data -> action predictions
        (B, K, A) or logits; (B, 1, A) for the newest step only with `newest_only` (acting needs no more)."""
        batch, k = mask.shape
        time = self.timestep_embedding(timesteps.clamp(0, self.max_timestep - 1))
        if self.task_embedding is not None:
            if task_ids is None:
                raise ValueError("multi-task data: the batch or the policy options must carry task_ids")
            time = time + self.task_embedding(task_ids.long()).unsqueeze(1)
        states = self.state_embedding(self.normalize(observations)) + time
        acts = self.action_embedding(actions.long() if self.discrete else actions.reshape(batch, k, -1)) + time
        returns = self.return_embedding(returns_to_go.unsqueeze(-1)) + time
        # R1 s1 a1 R2 s2 a2 ... R_K s_K: a_K would only be seen by tokens after it, and there are none
        tokens = torch.stack([returns, states, acts], dim=2).reshape(batch, 3 * k, -1)[:, :-1]
        x = self.embedding_dropout(self.embedding_norm(tokens))
        bias = self.attention_bias(mask)
        for block in self.blocks[:-1]:
            x = block(x, bias)
        # the loss reads the s_t tokens only, the policy the newest one (the last token, a_K being dropped)
        x = self.blocks[-1](x, bias, queries=slice(3 * k - 2, None) if newest_only else slice(1, None, 3))
        return self.bound(self.action_head(self.output_norm(x)))  # a_t predicted from the s_t token

    def attention_bias(self, mask: torch.Tensor) -> torch.Tensor:
        """(B, 1, L, L) for the interleaved tokens of steps `mask` (B, K) (see `causal_bias`)."""
        return causal_bias(mask.repeat_interleave(3, dim=1)[:, :-1])


def warmup_adamw(model: nn.Module, config: DTConfig, device: torch.device) -> tuple[torch.optim.AdamW, torch.optim.lr_scheduler.LambdaLR]:
    """The DT family's optimiser (DT, Prompt-DT, HarmoDT; CORL's): AdamW, its rate rising linearly over
    `warmup_steps` updates and constant after."""
    optimizer = torch.optim.AdamW(
        model.parameters(),
        lr=config.learning_rate,
        weight_decay=config.weight_decay,
        betas=(config.betas[0], config.betas[1]),
        fused=fused_adam(device),
    )
    warmup = max(1, config.warmup_steps)
    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min((step + 1) / warmup, 1.0))


def dt_blocks(config: DTConfig) -> nn.ModuleList:
    """The transformer blocks of a DT-family model (DT, Prompt-DT, HarmoDT)."""
    return nn.ModuleList(
        Block(config.embedding_dim, config.num_heads, config.attention_dropout, config.residual_dropout) for _ in range(config.num_layers)
    )


def causal_bias(real: torch.Tensor) -> torch.Tensor:
    """(B, 1, L, L) from which tokens are real (B, L): 0 where a query may attend to a key (causal, and the key is
    real or the query itself), -inf elsewhere."""
    length = real.shape[1]
    causal = torch.ones(length, length, dtype=torch.bool, device=real.device).tril()
    allowed = causal & (real[:, None, :] | torch.eye(length, dtype=torch.bool, device=real.device))
    return torch.zeros((), device=real.device).masked_fill(~allowed, float("-inf")).unsqueeze(1)


def real_steps(batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """What the DT family's losses average over: the segments' real (unpadded) steps."""
    return batch["mask"].sum()


class DecisionTransformer(MicroBatching):
    name = "dt"
    Config = DTConfig
    summary = (
        "Decision Transformer (Chen et al. 2021): a causal transformer over return-to-go, state and action tokens, "
        "acting towards a target return; MTDT on multi-task cards (a task embedding)"
    )
    tiny_config = {"segment_length": 5, "embedding_dim": 16, "num_layers": 1, "num_heads": 2, "warmup_steps": 10}
    sampler = "segments"
    action_kinds = ("continuous", "discrete")
    evaluation_protocols = SINGLE_AND_MULTI_TASK
    return_conditioned = True
    # seeds sampled discrete actions (eval_deterministic = false); a run sets its own seed (offbench/training/trainer.py)
    evaluation_seed = 0

    def __init__(self, config: DTConfig, spec: DatasetSpec, device: str | torch.device = "cpu"):
        pcgrad.check_gradient_mode(config.gradient, self.name, spec.num_tasks)
        self.config, self.spec, self.device = config, spec, torch.device(device)
        self.model = DecisionTransformerModel(config, spec).to(self.device)
        self.optimizer, self.scheduler = warmup_adamw(self.model, config, self.device)

    @classmethod
    def memory_shape(cls, config: DTConfig) -> TransformerShape:
        """R, s, a tokens of K steps but the last a; attention written out."""
        return TransformerShape(
            3 * config.segment_length - 1, config.embedding_dim, config.num_layers, config.num_heads, "explicit", config.attention_dropout
        )

    def sampler_options(self) -> dict[str, Any]:
        return {"segment_length": self.config.segment_length}

    def loss(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        mask = batch["mask"]
        predicted = self.model(
            batch["observations"],
            batch["actions"],
            batch["returns_to_go"] * self.config.reward_scale,
            batch["timesteps"],
            mask,
            batch.get("task_ids"),
        )
        if self.spec.discrete:
            return F.cross_entropy(predicted[mask], batch["actions"][mask].long())
        return F.mse_loss(predicted[mask], batch["actions"].reshape(predicted.shape)[mask])

    def update(self, batch: dict[str, torch.Tensor]) -> dict[str, float]:
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        loss = pcgrad.backward(self.loss, batch, self.model.parameters(), self.config.gradient, self.micro_batch, real_steps)
        if self.config.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.config.grad_clip)
        self.optimizer.step()
        self.scheduler.step()
        return {"action_loss": loss.item(), "learning_rate": float(self.scheduler.get_last_lr()[0])}

    def policy(self, options: PolicyOptions) -> DTPolicy:
        """Conditioned on `options.target_return` (one per row on multi-task data); discrete actions greedy, or drawn
        from the softmax of the logits with eval_deterministic = false (`DTPolicy`)."""
        if options.target_return is None:
            raise ValueError("dt acts towards a target return: PolicyOptions.target_return is required")
        check_sampling(self, options)
        return DTPolicy(self, options)

    def state_dict(self) -> dict[str, Any]:
        return part_states(model=self.model, optimizer=self.optimizer, scheduler=self.scheduler)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        load_part_states(state, model=self.model, optimizer=self.optimizer, scheduler=self.scheduler)


class SegmentBaseline(Protocol):
    """What DTPolicy reads of its baseline: DT's, or Prompt-DT's and HarmoDT's (whose configs extend DTConfig)."""

    spec: DatasetSpec
    device: torch.device
    evaluation_seed: int

    @property
    def config(self) -> DTConfig: ...

    @property
    def model(self) -> nn.Module: ...


class DTPolicy:
    """Acts in N environments at once, keeping each one's last K (R, s, a) steps, left-padded like training. Discrete
    actions are the most likely ones, or with `options.deterministic` False draws from the softmax of the logits
    (the imitated distribution; a sampling behaviour policy's most likely action can loop where its draws did not),
    from a generator seeded with the run's seed."""

    CONTEXT = ("observations", "actions", "returns_to_go", "timesteps", "mask")  # (N, K, ...) buffers, the model's inputs

    def __init__(self, dt: SegmentBaseline, options: PolicyOptions):
        self.dt, self.target_return = dt, options.target_return
        self.generator = None if options.deterministic else torch.Generator(dt.device).manual_seed(dt.evaluation_seed)
        self.task_ids = (
            None if options.task_ids is None else torch.as_tensor(np.asarray(options.task_ids), dtype=torch.long, device=dt.device)
        )

    def reset(self, num_envs: int) -> None:
        k, spec, device = self.dt.config.segment_length, self.dt.spec, self.dt.device
        action_shape = () if spec.discrete else (spec.action_dim,)
        self.observations = torch.zeros(num_envs, k, *spec.observation_shape, device=device)
        self.actions = torch.zeros(num_envs, k, *action_shape, dtype=torch.long if spec.discrete else torch.float32, device=device)
        self.returns_to_go = torch.zeros(num_envs, k, device=device)
        self.timesteps = torch.zeros(num_envs, k, dtype=torch.long, device=device)
        self.mask = torch.zeros(num_envs, k, dtype=torch.bool, device=device)
        target = torch.as_tensor(np.asarray(self.target_return, dtype=np.float32), device=device)
        self.remaining = target.expand(num_envs).clone()  # raw return still to collect, per row
        self.step = torch.zeros(num_envs, dtype=torch.long, device=device)

    @torch.no_grad()
    def act(self, observations: np.ndarray) -> np.ndarray:
        for buffer in (getattr(self, name) for name in self.CONTEXT):
            buffer.copy_(buffer.roll(-1, dims=1))  # drop the oldest step; the newest goes last
        self.observations[:, -1] = torch.tensor(np.asarray(observations), dtype=torch.float32, device=self.dt.device)
        self.actions[:, -1] = 0  # placeholder: the state token that predicts it comes first, so it is never seen
        self.returns_to_go[:, -1] = self.remaining
        self.timesteps[:, -1] = self.step
        self.mask[:, -1] = True
        output = self.predict()
        action = discrete_action(output, self.generator) if self.dt.spec.discrete else output
        self.actions[:, -1] = action
        return actions_to_numpy(action, self.dt.spec.action_space)

    def context(self) -> dict[str, torch.Tensor]:
        """Every row's last K steps, without the leading steps that are padding in every row (early in the episodes):
        masked keys add nothing to attention, so the prediction is the same and costs less."""
        start = int(self.mask.any(0).int().argmax())  # left padding: the first step some row has
        return {name: getattr(self, name)[:, start:] for name in self.CONTEXT}

    def predict(self) -> torch.Tensor:
        """The network's output for every row's newest step (B, A): actions, or logits."""
        self.dt.model.eval()
        c = self.context()
        return self.dt.model(
            c["observations"],
            c["actions"],
            c["returns_to_go"] * self.dt.config.reward_scale,
            c["timesteps"],
            c["mask"],
            self.task_ids,
            newest_only=True,
        )[:, -1]

    def observe(self, rewards: np.ndarray, dones: np.ndarray) -> None:
        self.remaining -= torch.tensor(np.asarray(rewards), dtype=torch.float32, device=self.dt.device)
        self.step += 1

    def drop(self, keep: np.ndarray) -> None:
        """Forget the rows whose episodes are over (`Policy.drop`): no more passes over their contexts."""
        rows = torch.as_tensor(keep, device=self.dt.device)
        for name in (*self.CONTEXT, "remaining", "step"):
            setattr(self, name, getattr(self, name)[rows])
        if self.task_ids is not None:
            self.task_ids = self.task_ids[rows]
