"""Headless-AD (Sinii et al., ICML 2024, "In-Context Reinforcement Learning for Variable Action Spaces"):
Algorithm Distillation without an action head, so that one model trained once acts in action spaces of other
sizes, orders and meanings.

Checked against corl-team/headless-ad (commit 08c773f): src/action_mapper.py (the random embeddings, the
similarity and the policy), src/bandit/algorithms/headless_ad.py (`loss_fn`, the training loop and
`evaluate_in_context`) and src/bandit/common/transformer.py (the token sequence).

- Every action is a random embedding: the embeddings of a sequence's A actions are the orthonormal rows of a
  random (A, d) matrix (`action_embeddings = "orthogonal"`, the paper's; "normal": i.i.d. N(0, 1) entries, its
  ablation), drawn afresh for every training sequence, so no action identity can be memorised; A <= d.
- The context starts with the *action-set prompt*: one token per available action (its embedding), then one token
  per step: the embeddings of s_t, a_{t-1} (a learned "no previous action" vector at a window's start, as the
  paper's learned padding token) and r_{t-1}, concatenated and projected (AD's "step" layout, offbench/baselines/ad.py).
- The model outputs an embedding p_t per step; the policy is softmax(p_t . e_a / temperature) over the embeddings
  e_a of the actions available now (dot-product similarity, the paper's `sim_measure = "dot"`).
- Loss: the contrastive loss, cross-entropy of the taken action against the other available actions of its
  sequence: -log softmax(p_t . e / temperature)[a_t].

Where this differs from the reference code:
- The prompt is a set, not a sequence: its tokens carry no position and attend to each other in both directions
  (history tokens attend to the whole prompt and causally to the history). The reference gives the prompt rotary
  positions under causal attention, so its policy depends on the order the actions are listed in; here permuting
  the available actions permutes the policy's probabilities the same way, exactly.
- Embeddings are drawn per sequence (one orthogonal matrix per batch row); the reference draws one matrix per batch.
- Unavailable actions are left out of the softmax (-inf) in the loss as in the policy; the reference's loss sets
  their similarity to 0 (so they stay in its denominator) while its policy leaves them out.
- One token per step instead of the reference's separate action and reward tokens (and (s, a, r) triples on
  grid worlds); learned positions, LayerNorm and GELU MLPs (offbench's shared `Block`) instead of rotary
  positions, RMSNorm and LLaMA MLPs.

Variable action spaces: a batch may carry `num_actions` (B,), the actions available in each row's sequence
(the first `num_actions[i]` indices; the `ad_windows` sampler adds it from a dataset's num_actions column, as
bandit histories of several arm counts have); without it every row has the dataset's `spec.action_dim`. The
policy acts with `PolicyOptions.num_actions` actions per row (in-context evaluation gives the environment's; by
default the dataset's), any number up to `embedding_dim`: it draws one set of embeddings per row at `reset`
(seeded with the run's seed, so evaluations repeat) and keeps it for the whole evaluation. `variable_actions = True`
tells the in-context protocol to accept held-out tasks with another action count than the data's. Evaluation sees the last `context_steps` steps of its
history (a sliding window, recomputed every step: the prompt's two-way attention leaves no causal cache to extend).

Training draws a batch's embeddings before any split into micro-batches (`TrainConfig.micro_batch`), and each
row's contrastive loss is over its own actions, so micro-batches add up to the whole batch's gradient.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from offbench.baselines.base import TransformerShape
from offbench.baselines.incontext import CausalTransformer, ObservationEmbedding, autocast, init_gpt_weights
from offbench.baselines.incontext_training import TransformerTraining
from offbench.data.spec import DatasetSpec
from offbench.errors import OffbenchError
from offbench.evaluation.policy import PolicyOptions
from offbench.records import ranged


@dataclass
class HeadlessADConfig:
    context_steps: int = ranged(100, ge=1, doc="steps per training window, and the most an action sees at evaluation")
    embedding_dim: int = ranged(
        64, ge=2, doc="size of the action embeddings (the most actions a row can have), the model's output and each token part"
    )
    hidden_dim: int = ranged(128, ge=1)
    num_layers: int = ranged(2, ge=1)
    num_heads: int = ranged(4, ge=1)
    attention_dropout: float = ranged(0.0, ge=0, lt=1)
    residual_dropout: float = ranged(0.0, ge=0, lt=1)
    embedding_dropout: float = ranged(0.0, ge=0, lt=1)
    temperature: float = ranged(1.0, gt=0, doc="tau: the policy is softmax(similarity / tau)")
    action_embeddings: str = ranged("orthogonal", choices=("orthogonal", "normal"), doc="distribution of the random action embeddings")
    learning_rate: float = ranged(3e-4, gt=0)
    betas: tuple[float, float] = ranged((0.9, 0.999), ge=0, lt=1)
    weight_decay: float = ranged(0.0, ge=0)
    warmup_steps: int = ranged(0, ge=0, doc="linear warm-up")
    cosine_steps: int = ranged(0, ge=0, doc="cosine decay to 0 at this update (after the warm-up); 0: constant after warm-up")
    grad_clip: float = ranged(1.0, ge=0, doc="max gradient norm; 0 turns clipping off")


def random_action_embeddings(
    rows: int, num_actions: int, dim: int, kind: str, device: torch.device, generator: torch.Generator | None = None
) -> torch.Tensor:
    """(rows, num_actions, dim) embeddings, a fresh draw per row: orthonormal rows of a random matrix (QR of a
    Gaussian one, signs fixed so the draw is uniform over such matrices), or i.i.d. N(0, 1) entries."""
    if num_actions > dim:
        raise ValueError(f"{num_actions} actions need embedding_dim at least {num_actions}, got {dim}")
    if kind == "normal":
        return torch.randn(rows, num_actions, dim, device=device, generator=generator)
    q, r = torch.linalg.qr(torch.randn(rows, dim, num_actions, device=device, generator=generator))
    return (q * torch.sign(torch.diagonal(r, dim1=-2, dim2=-1)).unsqueeze(-2)).transpose(1, 2)


def available_mask(num_actions: torch.Tensor, width: int) -> torch.Tensor:
    """(B, width) bool: True at the first num_actions[i] indices of row i."""
    return torch.arange(width, device=num_actions.device) < num_actions.unsqueeze(-1)


class HeadlessADModel(nn.Module):
    def __init__(self, config: HeadlessADConfig, spec: DatasetSpec):
        super().__init__()
        emb = config.embedding_dim
        self.observation_embedding = ObservationEmbedding(spec, emb)
        self.reward_embedding = nn.Linear(1, emb)
        self.no_action = nn.Parameter(torch.zeros(emb))
        self.project_step = nn.Linear(3 * emb, config.hidden_dim)
        self.project_action = nn.Linear(emb, config.hidden_dim)  # prompt tokens; its bias tells them from step tokens
        self.transformer = CausalTransformer(  # its positions number the steps only: the prompt has none
            config.hidden_dim,
            config.num_layers,
            config.num_heads,
            config.context_steps,
            config.attention_dropout,
            config.residual_dropout,
            config.embedding_dropout,
        )
        self.output = nn.Linear(config.hidden_dim, emb)
        self.temperature = config.temperature
        self.apply(init_gpt_weights)
        nn.init.normal_(self.no_action, std=0.02)

    def forward(
        self, observations: torch.Tensor, actions: torch.Tensor, rewards: torch.Tensor, embeddings: torch.Tensor, available: torch.Tensor
    ) -> torch.Tensor:
        """(B, T) steps of one window, (B, A, d) action embeddings and (B, A) availability -> (B, T, A) logits of
        every step's action (step t's from the prompt and the steps up to s_t); unavailable actions are -inf."""
        batch, steps = actions.shape
        taken = torch.gather(embeddings, 1, actions.unsqueeze(-1).expand(-1, -1, embeddings.shape[-1]))
        previous = torch.cat([self.no_action.expand(batch, 1, -1), taken[:, :-1]], dim=1)
        previous_rewards = F.pad(rewards[:, :-1], (1, 0)).unsqueeze(-1)
        parts = [self.observation_embedding(observations), previous, self.reward_embedding(previous_rewards)]
        step_tokens = self.project_step(torch.cat(parts, dim=-1)) + self.transformer.positions(torch.arange(steps, device=actions.device))
        tokens = self.transformer.embedding_dropout(torch.cat([self.project_action(embeddings), step_tokens], dim=1))
        bias = prompt_attention_bias(available, steps).to(tokens.dtype)
        for block in self.transformer.blocks:
            tokens = block(tokens, bias=bias)
        predicted = self.output(self.transformer.norm(tokens[:, embeddings.shape[1] :]))
        logits = torch.einsum("btd,bad->bta", predicted.float(), embeddings.float()) / self.temperature
        return logits.masked_fill(~available.unsqueeze(1), float("-inf"))


def prompt_attention_bias(available: torch.Tensor, steps: int) -> torch.Tensor:
    """(B, 1, A + T, A + T) attention bias: every token sees the available prompt tokens, a step token the steps up
    to itself; an unavailable prompt token sees only itself (its output is never read)."""
    batch, width = available.shape
    size = width + steps
    device = available.device
    allowed = torch.zeros(batch, size, size, dtype=torch.bool, device=device)
    allowed[:, :, :width] = available.unsqueeze(1)
    allowed[:, width:, width:] = torch.ones(steps, steps, dtype=torch.bool, device=device).tril()
    allowed[:, torch.arange(width), torch.arange(width)] = True
    zeros = torch.zeros(allowed.shape, device=device)
    return zeros.masked_fill(~allowed, float("-inf")).unsqueeze(1)


class HeadlessAD(TransformerTraining[HeadlessADConfig, HeadlessADModel]):
    name = "headless-ad"
    Config = HeadlessADConfig
    summary = (
        "Headless-AD (Sinii et al., ICML 2024): AD without an action head; each action is a random embedding drawn per "
        "sequence, the policy a softmax over the similarity of the predicted embedding to the available actions', so "
        "one model acts in action spaces of other sizes and orders"
    )
    tiny_config = {"context_steps": 20, "embedding_dim": 16, "hidden_dim": 16, "num_layers": 1, "num_heads": 2}
    sampler = "ad_windows"
    action_kinds = ("discrete",)
    evaluation_protocols = ("in-context",)
    return_conditioned = False
    variable_actions = True  # acts in action spaces of other sizes than the data's (evaluation/protocols.py, InContext.check)
    evaluation_seed = 0  # seeds its policies' action embeddings and sampled actions; a run sets its own seed (offbench/training/trainer.py)

    def __init__(self, config: HeadlessADConfig, spec: DatasetSpec, device: str | torch.device = "cpu"):
        if spec.discrete and spec.action_dim > config.embedding_dim:
            raise OffbenchError(
                f"headless-ad: the data has {spec.action_dim} actions, so embedding_dim must be at least {spec.action_dim}, got {config.embedding_dim}"
            )
        self.config, self.spec, self.device = config, spec, torch.device(device)
        self.model = HeadlessADModel(config, spec).to(self.device)
        self.set_optimiser(betas=(config.betas[0], config.betas[1]))

    @classmethod
    def memory_shape(cls, config: HeadlessADConfig) -> TransformerShape:
        """The action-set prompt and a token per step; the prompt holds at most embedding_dim actions, which the
        estimate takes (it sees the config, not the data). Attention written out (the prompt's bias)."""
        return TransformerShape(
            config.context_steps + config.embedding_dim,
            config.hidden_dim,
            config.num_layers,
            config.num_heads,
            "explicit",
            config.attention_dropout,
        )

    def sampler_options(self) -> dict[str, Any]:
        return {"window_length": self.config.context_steps}

    def embeddings_for(self, rows: int, generator: torch.Generator | None = None) -> torch.Tensor:
        """A fresh draw of (rows, spec.action_dim, d) action embeddings (training: from torch's global RNG)."""
        return random_action_embeddings(
            rows, self.spec.action_dim, self.config.embedding_dim, self.config.action_embeddings, self.device, generator
        )

    def losses(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The contrastive loss of every step's action against the other actions of its row (`batch` carries each
        row's `action_embeddings`), and the accuracy of the most similar action."""
        actions = batch["actions"]
        rows = len(actions)
        num_actions = batch.get("num_actions", torch.full((rows,), self.spec.action_dim, device=self.device))
        available = available_mask(num_actions, self.spec.action_dim)
        with autocast(self.device):
            logits = self.model(batch["observations"], actions, batch["rewards"], batch["action_embeddings"], available)
        loss = F.cross_entropy(logits.flatten(0, 1), actions.flatten())
        return {"loss": loss, "accuracy": (logits.argmax(-1) == actions).float().mean()}

    def update(self, batch: dict[str, torch.Tensor]) -> dict[str, float]:
        """One step; the embeddings are drawn for the whole batch before any split into micro-batches, so each row
        has the same ones however the batch is split (its loss is over its own actions only)."""
        logged = self.step({**batch, "action_embeddings": self.embeddings_for(len(batch["actions"]))})
        return {"contrastive_loss": logged["loss"].item(), "accuracy": logged["accuracy"].item(), "learning_rate": self.learning_rate()}

    def policy(self, options: PolicyOptions) -> HeadlessADPolicy:
        """A policy acting with `options.num_actions` available actions per row (by default the dataset's):
        actions 0 .. num_actions - 1 of each row."""
        return HeadlessADPolicy(self, self.spec.action_dim if options.num_actions is None else options.num_actions, options.deterministic)


class HeadlessADPolicy:
    """Acts in N environments with each row's own history as context (the last `context_steps` steps) and its own
    action embeddings, drawn at `reset` from a generator seeded there with the baseline's `evaluation_seed` (the
    run's seed; the sampled actions draw from it too), so an evaluation is reproducible, leaves the training RNG
    alone, and runs of other seeds draw other embeddings and actions. `embeddings` (N, A, d) may be replaced
    after `reset`; `last_probabilities` holds the (N, A) policy of the latest `act`."""

    def __init__(self, headless: HeadlessAD, num_actions: int | np.ndarray, deterministic: bool = True):
        self.headless, self.deterministic = headless, deterministic
        self.num_actions = np.asarray(num_actions, dtype=np.int64)
        if (self.num_actions < 1).any() or (self.num_actions > headless.config.embedding_dim).any():
            raise OffbenchError(
                f"headless-ad: every row needs between 1 and embedding_dim ({headless.config.embedding_dim}) actions, got {self.num_actions.tolist()}"
            )

    def reset(self, num_envs: int) -> None:
        config, device = self.headless.config, self.headless.device
        counts = torch.as_tensor(np.broadcast_to(self.num_actions, (num_envs,)).copy(), device=device)
        width = int(counts.max())
        self.available = available_mask(counts, width)
        self.generator = torch.Generator(device).manual_seed(self.headless.evaluation_seed)
        self.embeddings = random_action_embeddings(num_envs, width, config.embedding_dim, config.action_embeddings, device, self.generator)
        self.observations = torch.zeros(num_envs, 0, *self.headless.spec.observation_shape, device=device)
        self.actions = torch.zeros(num_envs, 0, dtype=torch.long, device=device)
        self.rewards = torch.zeros(num_envs, 0, device=device)
        self.last_probabilities: torch.Tensor | None = None

    @torch.no_grad()
    def act(self, observations: np.ndarray) -> np.ndarray:
        model, device = self.headless.model, self.headless.device
        model.eval()
        observation = torch.tensor(np.asarray(observations), dtype=torch.float32, device=device)
        self.observations = self.appended(self.observations, observation)
        self.actions = self.appended(self.actions, self.actions.new_zeros(len(observation)))
        self.rewards = self.appended(self.rewards, self.rewards.new_zeros(len(observation)))
        with autocast(device):
            logits = model(self.observations, self.actions, self.rewards, self.embeddings, self.available)[:, -1]
        probabilities = torch.softmax(logits.float(), dim=-1)
        self.last_probabilities = probabilities
        action = (
            probabilities.argmax(-1) if self.deterministic else torch.multinomial(probabilities, 1, generator=self.generator).squeeze(-1)
        )
        self.actions[:, -1] = action
        return action.cpu().numpy().astype(np.int64)

    def appended(self, buffer: torch.Tensor, step: torch.Tensor) -> torch.Tensor:
        """`buffer` (N, t, ...) with `step` (N, ...) after it, cut to the last `context_steps` steps."""
        return torch.cat([buffer, step.unsqueeze(1)], dim=1)[:, -self.headless.config.context_steps :]

    def observe(self, rewards: np.ndarray, dones: np.ndarray) -> None:
        """The step's reward joins the context; episode ends change nothing (the context crosses them)."""
        self.rewards[:, -1] = torch.tensor(np.asarray(rewards), dtype=torch.float32, device=self.headless.device)
