"""Algorithm Distillation (Laskin et al. 2022): a causal transformer trained to predict the source RL
algorithm's next action from a window of its learning history that spans several episodes; at evaluation it
acts in new tasks with its own growing history as context and improves in context, without weight updates.

    loss = cross_entropy(pi(a_t | (s, a, r)_{t-T+1 .. t-1}, s_t), a_t)   over every t of a T-step window

Two token layouts (`token_layout`), the two the public reproductions use:
- "sar": three tokens per step, s_t, a_t, r_t; a_t is read from the s_t token (corl-team/ad-eps).
- "step": one token per step, the embeddings of s_t, a_{t-1} and r_{t-1} concatenated and projected (the
  XLand-100B AD baseline); a window's first token has a "no previous action" entry and reward 0. Three times
  shorter sequences, so much cheaper to train.
Token vectors of size `embedding_dim` are projected to the transformer width `hidden_dim` (ad-eps' emb2hid).

Evaluation (`ADPolicy`): every row's context is its own history since the evaluation began, across episode
ends. Once it outgrows `context_steps`, `eval_window` says what an action sees:
- "half" (default): the context restarts from its last `context_steps // 2` steps (one recomputation), so every
  action sees between half and all of the trained context; between restarts a key-value cache adds one step's
  tokens at a time, and a step's logits are exactly what a full recomputation of its window gives.
- "sliding": every action sees the last `context_steps` steps, the trained window length; the positions shift
  at every step, so once the context is full each step recomputes its window (the cache only helps before).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from offbench.baselines.base import TransformerShape
from offbench.baselines.incontext import (
    CausalTransformer,
    ObservationEmbedding,
    autocast,
    init_gpt_weights,
    logged_losses,
    t2mir_of,
    with_routing_losses,
)
from offbench.baselines.incontext_training import T2MIRFields, T2MIRTraining
from offbench.data.spec import DatasetSpec
from offbench.evaluation.policy import PolicyOptions, discrete_action
from offbench.records import ranged

TOKEN_LAYOUTS = ("sar", "step")


@dataclass
class ADConfig(T2MIRFields):
    token_layout: str = ranged(
        "sar", choices=("sar", "step")
    )  # "sar": three tokens per step (ad-eps); "step": one token per step (XLand AD)
    context_steps: int = ranged(80, ge=1)  # T: steps per training window, and the most an action sees at evaluation
    embedding_dim: int = ranged(64, ge=1)  # size of each token's embedding before the projection to hidden_dim
    hidden_dim: int = ranged(512, ge=1)
    num_layers: int = ranged(4, ge=1)
    num_heads: int = ranged(4, ge=1)
    attention_dropout: float = ranged(0.5, ge=0, lt=1)
    residual_dropout: float = ranged(0.1, ge=0, lt=1)
    embedding_dropout: float = ranged(0.3, ge=0, lt=1)
    learning_rate: float = ranged(3e-4, gt=0)
    betas: tuple[float, float] = ranged((0.9, 0.99), ge=0, lt=1)
    weight_decay: float = ranged(0.0, ge=0)
    warmup_steps: int = ranged(0, ge=0)  # linear warm-up
    cosine_steps: int = ranged(0, ge=0)  # cosine decay to 0 at this update (after the warm-up); 0: constant after warm-up
    grad_clip: float = ranged(1.0, ge=0)  # max gradient norm; 0 turns clipping off
    label_smoothing: float = ranged(0.0, ge=0, lt=1)
    compile: bool = False  # torch.compile the training forward pass
    kv_cache: bool = True  # evaluation: key-value cache (False: recompute the whole context every step)
    eval_window: str = ranged("half", choices=("half", "sliding"))  # evaluation past context_steps (module docstring)


class ADModel(nn.Module):
    def __init__(self, config: ADConfig, spec: DatasetSpec):
        super().__init__()
        if config.token_layout not in TOKEN_LAYOUTS:
            raise ValueError(f"token_layout must be one of {', '.join(TOKEN_LAYOUTS)}, got {config.token_layout!r}")
        self.layout, self.num_actions = config.token_layout, spec.action_dim
        emb = config.embedding_dim
        self.observation_embedding = ObservationEmbedding(spec, emb)
        self.action_embedding = nn.Embedding(spec.action_dim + 1, emb)  # last index: "no previous action"
        self.reward_embedding = nn.Linear(1, emb)
        per_token = 3 * emb if self.layout == "step" else emb
        self.project = nn.Linear(per_token, config.hidden_dim)
        self.max_tokens = self.tokens_for(config.context_steps)
        self.transformer = CausalTransformer(
            config.hidden_dim,
            config.num_layers,
            config.num_heads,
            self.max_tokens,
            config.attention_dropout,
            config.residual_dropout,
            config.embedding_dropout,
            t2mir_of(config, spec),
        )
        self.action_head = nn.Linear(config.hidden_dim, spec.action_dim)
        self.apply(init_gpt_weights)

    def tokens_for(self, steps: int) -> int:
        """Tokens of a `steps`-step window: s, a, r per step but the last step's a and r (nothing reads them)."""
        return steps if self.layout == "step" else 3 * steps - 2

    def embed(self, observations: torch.Tensor, actions: torch.Tensor, rewards: torch.Tensor) -> torch.Tensor:
        """(B, n) steps of one window -> (B, tokens_for(n), hidden) tokens; the last step's action and reward are unread."""
        batch, n = actions.shape
        states = self.observation_embedding(observations)
        if self.layout == "step":
            none = torch.full((batch, 1), self.num_actions, dtype=actions.dtype, device=actions.device)
            previous_actions = torch.cat([none, actions[:, :-1]], dim=1)
            previous_rewards = F.pad(rewards[:, :-1], (1, 0))
            parts = [states, self.action_embedding(previous_actions), self.reward_embedding(previous_rewards.unsqueeze(-1))]
            return self.project(torch.cat(parts, dim=-1))
        acts, rews = self.action_embedding(actions), self.reward_embedding(rewards.unsqueeze(-1))
        return self.project(torch.stack([states, acts, rews], dim=2).reshape(batch, 3 * n, -1)[:, : 3 * n - 2])

    def action_logits(self, outputs: torch.Tensor) -> torch.Tensor:
        """Transformer outputs -> logits of the actions of every step (read at the s_t tokens)."""
        return self.action_head(outputs if self.layout == "step" else outputs[:, 0::3])

    def forward(
        self, observations: torch.Tensor, actions: torch.Tensor, rewards: torch.Tensor, routing: list | None = None
    ) -> torch.Tensor:
        """(B, T) window -> (B, T, A) logits, step t's from the context up to s_t (T2MIR's routing into `routing`)."""
        return self.action_logits(self.transformer(self.embed(observations, actions, rewards), routing=routing))


class AlgorithmDistillation(T2MIRTraining[ADConfig, ADModel]):
    name = "ad"
    Config = ADConfig
    summary = (
        "Algorithm Distillation (Laskin et al. 2022): a causal transformer over a window of the source algorithm's "
        "learning history, which improves in context on new tasks"
    )
    tiny_config = {"token_layout": "step", "context_steps": 30, "embedding_dim": 8, "hidden_dim": 16, "num_layers": 1, "num_heads": 2}
    sampler = "ad_windows"
    action_kinds = ("discrete",)
    evaluation_protocols = ("in-context",)
    return_conditioned = False
    evaluation_seed = 0  # seeds the sampled actions of its policies; a run sets its own seed (offbench/training/trainer.py)

    def __init__(self, config: ADConfig, spec: DatasetSpec, device: str | torch.device = "cpu"):
        self.config, self.spec, self.device = config, spec, torch.device(device)
        self.model = ADModel(config, spec).to(self.device)
        self.train_forward = torch.compile(self.model) if config.compile else self.model
        self.set_optimiser(betas=(config.betas[0], config.betas[1]))

    @classmethod
    def memory_shape(cls, config: ADConfig) -> TransformerShape:
        """A window's tokens (one per step, or s, a, r per step but the last a, r); fused attention."""
        tokens = config.context_steps if config.token_layout == "step" else 3 * config.context_steps - 2
        return TransformerShape(tokens, config.hidden_dim, config.num_layers, config.num_heads, "sdpa", config.attention_dropout)

    def sampler_options(self) -> dict[str, Any]:
        return {"window_length": self.config.context_steps, **self.config.pair_option()}

    def losses(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Cross-entropy of every step's action over the windows of `batch`, and the accuracy of the greedy action;
        with T2MIR, its routing terms too."""
        actions = batch["actions"]
        routing = [] if self.config.moe == "t2mir" else None
        with autocast(self.device):
            logits = self.train_forward(batch["observations"], actions, batch["rewards"], routing)
            loss = F.cross_entropy(logits.flatten(0, 1).float(), actions.flatten(), label_smoothing=self.config.label_smoothing)
        values = {"loss": loss, "accuracy": (logits.argmax(-1) == actions).float().mean()}
        return values if routing is None else with_routing_losses(values, routing, batch.get("task_ids"), self.config)

    def update(self, batch: dict[str, torch.Tensor]) -> dict[str, float]:
        logged = self.step(batch)
        return {**logged_losses(logged), "accuracy": logged["accuracy"].item(), "learning_rate": self.learning_rate()}

    def policy(self, options: PolicyOptions) -> ADPolicy:
        return ADPolicy(self, deterministic=options.deterministic)


class ADPolicy:
    """Acts in N tasks at once with each row's own history as context (see the module docstring); `last_logits`
    holds the logits of the latest `act`. Sampled actions (deterministic=False) draw from a generator seeded at
    `reset` with the baseline's `evaluation_seed` (the run's seed), so an evaluation is reproducible, leaves the
    training RNG alone, and runs of other seeds sample other actions."""

    def __init__(self, ad: AlgorithmDistillation, deterministic: bool = True):
        self.ad, self.deterministic, self.kv_cache, self.window = ad, deterministic, ad.config.kv_cache, ad.config.eval_window
        self.model: ADModel = ad.model

    def reset(self, num_envs: int) -> None:
        steps, device = self.ad.config.context_steps, self.ad.device
        self.observations = torch.zeros(num_envs, steps, *self.ad.spec.observation_shape, device=device)
        self.actions = torch.zeros(num_envs, steps, dtype=torch.long, device=device)
        self.rewards = torch.zeros(num_envs, steps, device=device)
        self.count = 0  # steps in the current context, the acting step included once act() has run
        self.cache = self.model.transformer.new_cache(num_envs, self.model.max_tokens) if self.kv_cache else None
        self.generator = torch.Generator(device).manual_seed(self.ad.evaluation_seed)
        self.last_logits: torch.Tensor | None = None

    @torch.no_grad()
    def act(self, observations: np.ndarray) -> np.ndarray:
        self.model.eval()
        steps = self.ad.config.context_steps
        restart = self.count == steps
        if restart:  # keep the last half (or all but the oldest step) of the context, recompute it
            keep = steps // 2 if self.window == "half" else steps - 1
            for buffer in (self.observations, self.actions, self.rewards):
                buffer[:, :keep] = buffer[:, steps - keep :].clone()
            self.count = keep
        self.observations[:, self.count] = torch.tensor(np.asarray(observations), dtype=torch.float32, device=self.ad.device)
        self.count += 1
        window = (self.observations[:, : self.count], self.actions[:, : self.count], self.rewards[:, : self.count])
        with autocast(self.ad.device):
            if self.cache is None or restart or self.count == 1:
                if self.cache is not None:
                    self.cache.clear()
                outputs = self.model.transformer(self.model.embed(*window), self.cache)
            else:  # only the tokens this step adds: s_t (and a_{t-1}, r_{t-1} in the sar layout)
                tail = [part[:, -2:] for part in window]
                new = self.model.embed(*tail)[:, -(self.model.tokens_for(2) - self.model.tokens_for(1)) :]
                outputs = self.model.transformer(new, self.cache)
            logits = self.model.action_head(outputs[:, -1]).float()
        self.last_logits = logits
        action = discrete_action(logits, None if self.deterministic else self.generator)
        self.actions[:, self.count - 1] = action
        return action.cpu().numpy().astype(np.int64)

    def observe(self, rewards: np.ndarray, dones: np.ndarray) -> None:
        """The step's reward joins the context; episode ends change nothing (AD's context crosses them)."""
        self.rewards[:, self.count - 1] = torch.tensor(np.asarray(rewards), dtype=torch.float32, device=self.ad.device)
