"""Decision-Pretrained Transformer (Lee et al. 2023, "Supervised Pretraining Can Learn In-Context Reinforcement
Learning"): given a query state and an in-context dataset of transitions from the same task, predict the
task's optimal action in the query state.

    loss = sum_j cross_entropy(pi(. | s_query, D_{1..j}), a*(s_query))   for every prefix j = 0 .. C

Tokens as in jon--lee/decision-pretrained-transformer (net.py): one token per transition, the concatenation
[s, one-hot a, s', r] through one Linear layer, with the query first as [s_query, 0, 0, 0]; a causal GPT
reads them, and the output at position j predicts from the query and the first j transitions, so one pass
trains every context length. Differences: the prefix with no transition (position 0) is trained as well
(the reference drops it), so the first action of an evaluation comes from a trained output; observations are
normalised with the dataset's statistics, or, when they are grids of categorical codes (XLand), embedded per
cell (offbench.baselines.incontext.observation_features); with `state_table` (off by default) a small integer grid's
states also get a learned vector each, for s, s' and the query.

Evaluation (`DPTPolicy`), online by default: the context is the row's own transitions from the episodes it has
finished in this evaluation (the last `context_size` of them; DPT's online protocol: the current episode does
not enter until it ends), the query is the current observation. Offline (`offline_episodes = k`): the first k
episodes act uniformly at random, their transitions (the last `context_size`) are the context from then on,
fixed, as DPT's offline evaluation conditions on a dataset from a uniform roll-in policy. The query comes
first, so every context token depends on it: each step recomputes the context (no key-value cache is possible
with this layout).
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
    MAX_TABLE_STATES,
    CausalTransformer,
    ObservationEmbedding,
    autocast,
    features_of,
    init_gpt_weights,
    logged_losses,
    observation_features,
    state_index_layout,
    t2mir_of,
    with_routing_losses,
)
from offbench.baselines.incontext_training import T2MIRFields, T2MIRTraining
from offbench.baselines.nets import flat_observation_dim
from offbench.data.samplers import CONTEXT_SAMPLINGS, DPT_LABELS
from offbench.data.spec import DatasetSpec
from offbench.errors import OffbenchError
from offbench.evaluation.policy import PolicyOptions, discrete_action
from offbench.records import ranged


@dataclass
class DPTConfig(T2MIRFields):
    context_size: int = ranged(100, ge=1)  # C: transitions in a training context, and the most an action sees at evaluation
    context_sampling: str = ranged("window", choices=CONTEXT_SAMPLINGS)  # "window": C consecutive steps of one history; "random": C steps
    #                     drawn i.i.d.; "shuffled": C distinct steps in a fresh random order per sample (exchangeable data)
    embedding_dim: int = ranged(32, ge=1)
    num_layers: int = ranged(4, ge=1)
    num_heads: int = ranged(1, ge=1)
    dropout: float = ranged(0.0, ge=0, lt=1)  # attention, residual and embedding dropout (GPT-2's three pdrops, one value in DPT)
    learning_rate: float = ranged(1e-4, gt=0)
    warmup_steps: int = ranged(0, ge=0)  # linear warm-up, then cosine decay to 0 at cosine_steps; both 0: constant (DPT's)
    cosine_steps: int = ranged(0, ge=0)
    weight_decay: float = ranged(1e-4, ge=0)
    grad_clip: float = ranged(0.0, ge=0)  # max gradient norm; 0 turns clipping off (DPT does not clip)
    label: str = ranged("optimal", choices=DPT_LABELS)  # "optimal": the query's optimal action (DPT's); "posterior": its
    #                     distribution given each prefix under the card's training tasks (same minimiser, less variance;
    #                     roll-in cards of tabular tasks only, offbench.generators.task_posterior)
    state_table: bool = False  # also a learned vector per state for s, s' and the query, added to the transition's
    #                     Linear embedding, where states are a small integer grid (Dark Room's (x, y)): which cells a
    #                     context visited becomes a sum of separable vectors, not a mean of coordinates
    compile: bool = False  # torch.compile the training forward pass
    offline_episodes: int = ranged(0, ge=0)  # evaluation: 0 = online; k > 0 = offline: the first k episodes act uniformly at random
    #                            and their transitions become a fixed context (DPT's uniform roll-in data)
    # T2MIR's fields are T2MIRFields'; these four take the reference's Dark Room DPT values instead of its AD's
    task_experts: int = ranged(8, ge=1)  # T2MIR: task-wise experts (the reference's Dark Room DPT: 8)
    expert_hidden: int = ranged(64, ge=1)  # T2MIR: hidden units of one expert (the reference: twice the width)
    balance_weight: float = ranged(0.01, ge=0)  # T2MIR: weight of the token router's load-balancing term
    contrastive_weight: float = ranged(0.001, ge=0)  # T2MIR: weight of the task router's contrastive loss


class DPTModel(nn.Module):
    def __init__(self, config: DPTConfig, spec: DatasetSpec):
        super().__init__()
        self.num_actions = spec.action_dim
        self.codes, self.normalize, self.feature_dim = observation_features(spec)
        self.embed_transition = nn.Linear(2 * self.feature_dim + spec.action_dim + 1, config.embedding_dim)
        self.transformer = CausalTransformer(
            config.embedding_dim,
            config.num_layers,
            config.num_heads,
            config.context_size + 1,
            config.dropout,
            config.dropout,
            config.dropout,
            t2mir_of(config, spec),
        )
        self.action_head = nn.Linear(config.embedding_dim, spec.action_dim)
        self.state_table = self.next_state_table = None
        if config.state_table:  # AD's per-state embedding, one for s (and the query) and one for s'
            if state_index_layout(spec) is None:
                raise OffbenchError(
                    f"state_table needs observations that are a small integer grid (at most {MAX_TABLE_STATES} "
                    f"states); this dataset's are {spec.observation_space}"
                )
            self.state_table = ObservationEmbedding(spec, config.embedding_dim)
            self.next_state_table = ObservationEmbedding(spec, config.embedding_dim)
        self.apply(init_gpt_weights)

    def features(self, observations: torch.Tensor) -> torch.Tensor:
        return features_of(self.codes, self.normalize, observations)

    def forward(self, query, observations, actions, rewards, next_observations, routing: list | None = None) -> torch.Tensor:
        """query (B, *obs), context (B, C, ...) -> (B, C + 1, A) logits; position j has seen j transitions (T2MIR's
        routing into `routing`)."""
        transitions = torch.cat(
            [
                self.features(observations),
                F.one_hot(actions, self.num_actions).to(rewards.dtype),
                self.features(next_observations),
                rewards.unsqueeze(-1),
            ],
            dim=-1,
        )
        query_token = F.pad(self.features(query), (0, transitions.shape[-1] - self.feature_dim))
        tokens = self.embed_transition(torch.cat([query_token.unsqueeze(1), transitions], dim=1))
        if self.state_table is not None and self.next_state_table is not None:  # both or neither
            # the query is [s_query, 0, 0, 0]: its state goes through s's table
            states = torch.cat([query.unsqueeze(1), observations], dim=1)
            next_states = F.pad(self.next_state_table(next_observations), (0, 0, 1, 0))  # none for the query
            tokens = tokens + self.state_table(states) + next_states
        return self.action_head(self.transformer(tokens, routing=routing))


class DecisionPretrainedTransformer(T2MIRTraining[DPTConfig, DPTModel]):
    name = "dpt"
    Config = DPTConfig
    summary = (
        "Decision-Pretrained Transformer (Lee et al. 2023): predicts the task's optimal action for a query state from a"
        " context of the task's transitions"
    )
    tiny_config = {"context_size": 30, "embedding_dim": 16, "num_layers": 1}
    sampler = "dpt"
    action_kinds = ("discrete",)
    evaluation_protocols = ("in-context",)
    return_conditioned = False
    evaluation_seed = 0  # seeds the sampled actions of its policies; a run sets its own seed (offbench/training/trainer.py)

    def __init__(self, config: DPTConfig, spec: DatasetSpec, device: str | torch.device = "cpu"):
        self.config, self.spec, self.device = config, spec, torch.device(device)
        self.model = DPTModel(config, spec).to(self.device)
        self.train_forward = torch.compile(self.model) if config.compile else self.model
        self.set_optimiser()

    @classmethod
    def memory_shape(cls, config: DPTConfig) -> TransformerShape:
        """The query and C transitions, a token each; fused attention (one dropout for attention and the rest)."""
        return TransformerShape(config.context_size + 1, config.embedding_dim, config.num_layers, config.num_heads, "sdpa", config.dropout)

    def sampler_options(self) -> dict[str, Any]:
        return {
            "context_size": self.config.context_size,
            "context": self.config.context_sampling,
            "label": self.config.label,
            **self.config.pair_option(),
        }

    def losses(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Cross-entropy of every prefix's prediction over `batch`, and the accuracy of the full context's greedy action;
        with T2MIR, its routing terms too."""
        routing = [] if self.config.moe == "t2mir" else None
        with autocast(self.device):
            logits = self.train_forward(
                batch["query_observations"],
                batch["context_observations"],
                batch["context_actions"],
                batch["context_rewards"],
                batch["context_next_observations"],
                routing,
            )
            loss = F.cross_entropy(logits.flatten(0, 1).float(), self.prefix_labels(batch, logits.shape[1]).flatten(0, 1))
        values = {"loss": loss, "full_context_accuracy": (logits[:, -1].argmax(-1) == batch["optimal_actions"]).float().mean()}
        return values if routing is None else with_routing_losses(values, routing, batch.get("task_ids"), self.config)

    def labelled_prefixes(self, batch: dict[str, torch.Tensor]) -> int:
        """What the loss averages over: the prefixes whose label is not left out (-100; see prefix_labels)."""
        labels = self.prefix_labels(batch, batch["context_actions"].shape[1] + 1)
        return labels.shape[0] * labels.shape[1] if labels.is_floating_point() else int((labels != -100).sum())

    def update(self, batch: dict[str, torch.Tensor]) -> dict[str, float]:
        logged = self.step(batch, self.labelled_prefixes)
        return {
            **logged_losses(logged),
            "full_context_accuracy": logged["full_context_accuracy"].item(),
            "learning_rate": self.learning_rate(),
        }

    def prefix_labels(self, batch: dict[str, torch.Tensor], prefixes: int) -> torch.Tensor:
        """(B, prefixes) labels: the optimal action for every prefix, so one pass trains every context length, or
        with `label = "posterior"` (B, prefixes, A) its distribution given each prefix. A label of -100 leaves its
        prefix out (benchmarks/studies/dpt_label_ablation.py trains other labels through this)."""
        if "optimal_action_probabilities" in batch:
            return batch["optimal_action_probabilities"][:, :prefixes]
        return batch["optimal_actions"][:, None].expand(-1, prefixes)

    def policy(self, options: PolicyOptions) -> DPTPolicy:
        return DPTPolicy(self, deterministic=options.deterministic)


class DPTPolicy:
    """Online in-context policy: query = current observation, context = the row's finished episodes' transitions
    (the most recent `context_size`), right-padded where rows differ (each row's output is read at its last real
    position, which padding after it cannot affect). Buffers are small NumPy arrays; a forward pass per step.

    s' of a step is the next act()'s observation; the policy never sees the final observation of an episode
    (the next act() brings the reset observation), so an episode's last transition uses its own s as s'."""

    def __init__(self, dpt: DecisionPretrainedTransformer, deterministic: bool = True):
        self.dpt, self.deterministic = dpt, deterministic
        self.model: DPTModel = dpt.model

    def reset(self, num_envs: int) -> None:
        spec, size = self.dpt.spec, self.dpt.config.context_size
        width = 2 * flat_observation_dim(spec) + 2  # s, a, s', r of one transition, flat
        self.context = np.zeros((num_envs, size, width), np.float32)
        self.context_length = np.zeros(num_envs, np.int64)
        self.pending = np.zeros((num_envs, spec.max_episode_length, width), np.float32)  # this episode's transitions
        self.pending_length = np.zeros(num_envs, np.int64)
        self.episodes_done = np.zeros(num_envs, np.int64)
        self.rows = np.arange(num_envs)
        self.generator = torch.Generator(self.dpt.device).manual_seed(self.dpt.evaluation_seed)

    def _tensors(self, transitions: np.ndarray) -> tuple[torch.Tensor, ...]:
        """(N, C, width) -> observations, actions, rewards, next observations as the model takes them."""
        obs_dim = flat_observation_dim(self.dpt.spec)
        shape = transitions.shape[:2] + tuple(self.dpt.spec.observation_shape)
        t = torch.as_tensor(transitions, device=self.dpt.device)
        return (t[..., :obs_dim].reshape(shape), t[..., obs_dim].long(), t[..., -1], t[..., obs_dim + 1 : 2 * obs_dim + 1].reshape(shape))

    @torch.no_grad()
    def act(self, observations: np.ndarray) -> np.ndarray:
        self.model.eval()
        flat = np.asarray(observations, np.float32).reshape(len(self.rows), -1)
        obs_dim = flat.shape[1]
        going = self.pending_length > 0  # s' of the previous step of an episode that goes on
        self.pending[self.rows[going], self.pending_length[going] - 1, obs_dim + 1 : 2 * obs_dim + 1] = flat[going]
        longest = int(self.context_length.max())
        query = torch.tensor(flat, device=self.dpt.device).reshape(len(flat), *self.dpt.spec.observation_shape)
        with autocast(self.dpt.device):
            logits = self.model(query, *self._tensors(self.context[:, :longest]))
        logits = logits[torch.as_tensor(self.rows), torch.as_tensor(self.context_length)].float()
        self.last_logits = logits
        action = discrete_action(logits, None if self.deterministic else self.generator)
        actions = action.cpu().numpy().astype(np.int64)
        collecting = self.episodes_done < self.dpt.config.offline_episodes
        if collecting.any():  # offline: the context-collecting episodes act uniformly at random
            uniform = torch.randint(self.dpt.spec.action_dim, (len(actions),), generator=self.generator, device=self.dpt.device)
            actions = np.where(collecting, uniform.cpu().numpy(), actions)
        if self.pending_length.max() == self.pending.shape[1]:  # an episode longer than the data's (a card's own time limit)
            self.pending = np.concatenate([self.pending, np.zeros_like(self.pending)], axis=1)
        step = self.pending[self.rows, self.pending_length]
        step[:, :obs_dim], step[:, obs_dim], step[:, obs_dim + 1 : 2 * obs_dim + 1] = flat, actions, flat
        self.pending[self.rows, self.pending_length] = step
        return actions

    def observe(self, rewards: np.ndarray, dones: np.ndarray) -> None:
        self.pending[self.rows, self.pending_length, -1] = rewards
        self.pending_length += 1
        size = self.dpt.config.context_size
        dones = np.asarray(dones)
        offline = self.dpt.config.offline_episodes
        joins = dones & ((offline == 0) | (self.episodes_done < offline))  # offline: only the collecting episodes
        self.episodes_done += dones
        self.pending_length[dones & ~joins] = 0
        for row in np.flatnonzero(joins):  # the finished episode joins the context, oldest dropped
            joined = np.concatenate([self.context[row, : self.context_length[row]], self.pending[row, : self.pending_length[row]]])[-size:]
            self.context[row, : len(joined)] = joined
            self.context_length[row] = len(joined)
            self.pending_length[row] = 0
