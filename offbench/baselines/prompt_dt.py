"""Prompt-DT (Xu et al., ICML 2022, "Prompting Decision Transformer for Few-Shot Policy Generalization"): a Decision
Transformer whose input sequence starts with a short trajectory prompt of the task, a few (R, s, a) steps cut from
one of that task's best episodes in the dataset, so one network tells the tasks apart without a task id.

    tokens  = [prompt: R*_1 s*_1 a*_1 ... R*_P s*_P a*_P] [segment: R_1 s_1 a_1 ... R_K s_K a_K]
    a_t     = head(GPT(tokens) at s_t)            MSE on real steps (cross-entropy for discrete actions)

The prompt has its own embeddings (return, state, action, timestep) and skips the embedding LayerNorm, as in
HarmoDT's Prompt-DT (charleshsc/HarmoDT prompt_dt/prompt_decision_transformer.py, itself from mxu34/Prompt-DT);
the blocks are offbench's DT blocks (pre-LayerNorm, as CORL's DT; HarmoDT uses GPT-2's, also pre-LayerNorm).
Prompts come from the `prompt_segments` sampler (offbench/data/samplers.py): in training each segment gets the
end of one of its task's `prompt_pool` best episodes, drawn at random; at evaluation each task uses its best
episode's. Defaults: Prompt-DT's Meta-World settings (K 20, prompt length 5, embedding 128, 3 layers, 1 head,
dropout 0.1, AdamW lr 1e-4, weight decay 1e-4, 10k warm-up steps, gradient clipping 0.25); see
baselines/prompt-dt/default.toml. Batches mix tasks (the sampler draws steps uniformly over the dataset).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import nn

from offbench.baselines.base import DatasetSpec, MicroBatching, TransformerShape, accumulate_backward, multi_task_spec
from offbench.baselines.dt import DTConfig, DTPolicy, causal_bias, dt_blocks, real_steps, warmup_adamw
from offbench.baselines.incontext import init_gpt_weights
from offbench.baselines.nets import (
    Block,
    BoundedActions,
    Dropout,
    ObservationNormalizer,
    flat_observation_dim,
    grouped_layer_norm,
    load_part_states,
    part_states,
)
from offbench.baselines.pcgrad import check_gradient_mode, pcgrad_backward, per_task_losses
from offbench.evaluation.policy import PolicyOptions, check_sampling
from offbench.records import ranged

PROMPT_KEYS = ("observations", "actions", "returns_to_go", "timesteps", "mask")
PromptStates = list[tuple[torch.Tensor, torch.Tensor]]  # per block: keys and values of the prompt's tokens


@dataclass
class PromptDTConfig(DTConfig):
    """DT's hyper-parameters (offbench/baselines/dt.py) and the prompt's."""

    prompt_length: int = ranged(5, ge=1)  # P: steps in a prompt
    prompt_pool: int = ranged(5, ge=1)  # a task's training prompts come from its this many best episodes


class TokenEmbedding(nn.Module):
    """(R, s, a) steps with their timesteps -> interleaved tokens (B, 3L, dim)."""

    def __init__(self, dim: int, spec: DatasetSpec):
        super().__init__()
        self.discrete, self.max_timestep = spec.discrete, spec.max_episode_length
        self.timestep = nn.Embedding(spec.max_episode_length, dim)
        self.state = nn.Linear(flat_observation_dim(spec), dim)
        self.action = nn.Embedding(spec.action_dim, dim) if spec.discrete else nn.Linear(spec.action_dim, dim)
        self.ret = nn.Linear(1, dim)

    def forward(self, states: torch.Tensor, actions: torch.Tensor, returns_to_go: torch.Tensor, timesteps: torch.Tensor) -> torch.Tensor:
        batch, length = timesteps.shape
        time = self.timestep(timesteps.clamp(0, self.max_timestep - 1))
        acts = self.action(actions.long() if self.discrete else actions.reshape(batch, length, -1))
        tokens = torch.stack([self.ret(returns_to_go.unsqueeze(-1)) + time, self.state(states) + time, acts + time], dim=2)
        return tokens.reshape(batch, 3 * length, -1)


class PromptDTModel(nn.Module):
    # parameter-name prefixes of the transformer proper (HarmoDT masks these and nothing else)
    TRANSFORMER = ("blocks.", "output_norm.")

    def __init__(self, config: PromptDTConfig, spec: DatasetSpec):
        super().__init__()
        dim = config.embedding_dim
        if dim % config.num_heads:
            raise ValueError(f"embedding_dim ({dim}) must be divisible by num_heads ({config.num_heads})")
        self.normalize = ObservationNormalizer(spec, eps=1e-6)
        self.embed, self.prompt_embed = TokenEmbedding(dim, spec), TokenEmbedding(dim, spec)
        self.embedding_norm, self.output_norm = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.embedding_dropout = Dropout(config.embedding_dropout)
        self.blocks = dt_blocks(config)
        self.action_head = nn.Linear(dim, spec.action_dim)
        self.bound = nn.Identity() if spec.discrete else BoundedActions(spec)
        self.apply(init_gpt_weights)  # as DT

    def forward(
        self,
        observations,
        actions,
        returns_to_go,
        timesteps,
        mask,
        prompt: dict[str, torch.Tensor],
        newest_only: bool = False,
        prompt_states: PromptStates | None = None,
    ) -> torch.Tensor:
        """(B, K, ...) segment and (B, P, ...) prompt, returns-to-go already scaled -> action predictions (B, K, A), or
        (B, 1, A) for the newest step only with `newest_only`. With `prompt_states` (`self.prompt_states(prompt)`,
        computed before) the prompt's tokens are not run again: the same predictions over a fifth fewer tokens."""
        segment = self.embedding_norm(self.embed(self.normalize(observations), actions, returns_to_go, timesteps))
        bias = causal_bias(torch.cat([prompt["mask"], mask], dim=1).repeat_interleave(3, dim=1))
        if prompt_states is None:
            prefix = self.prompt_tokens(prompt)
            x, pasts, segment_start = torch.cat([prefix, segment], dim=1), [None] * len(self.blocks), prefix.shape[1]
        else:  # the segment's tokens only, attending to the prompt's keys and values as well as to each other
            x, pasts, segment_start = segment, prompt_states, 0
            bias = bias[:, :, prompt_states[0][0].shape[1] :]
        x = self.embedding_dropout(x)
        for block, past in zip(self.blocks[:-1], pasts[:-1]):
            x = block(x, bias, past=past)
        length = x.shape[1]  # the segment's s_t tokens: every third from segment_start + 1; the newest is the last but one
        queries = slice(length - 2, length - 1) if newest_only else slice(segment_start + 1, None, 3)
        x = self.blocks[-1](x, bias, queries=queries, past=pasts[-1])
        return self.bound(self.action_head(grouped_layer_norm(x, self.output_norm)))

    def prompt_tokens(self, prompt: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.prompt_embed(self.normalize(prompt["observations"]), prompt["actions"], prompt["returns_to_go"], prompt["timesteps"])

    def prompt_states(self, prompt: dict[str, torch.Tensor]) -> PromptStates:
        """Every block's keys and values (B, 3P, dim) of the prompt's tokens. The prompt comes first under a causal
        mask, so they do not depend on the segment after it: an evaluation computes them once, not at every step."""
        x = self.embedding_dropout(self.prompt_tokens(prompt))
        bias = causal_bias(prompt["mask"].repeat_interleave(3, dim=1))
        states = []
        for i, block in enumerate(self.blocks):
            states.append(cast(Block, block).keys_values(x))  # dt_blocks holds Blocks
            if i < len(self.blocks) - 1:
                x = block(x, bias)
        return states


class PromptDT(MicroBatching):
    name = "prompt-dt"
    Config = PromptDTConfig
    summary = "Prompt-DT (Xu et al., ICML 2022): a DT whose sequence starts with a 5-step prompt cut from one of the task's best episodes"
    tiny_config = {
        "segment_length": 4,
        "prompt_length": 2,
        "prompt_pool": 2,
        "embedding_dim": 16,
        "num_layers": 1,
        "num_heads": 2,
        "warmup_steps": 10,
    }
    sampler = "prompt_segments"
    action_kinds = ("continuous", "discrete")
    evaluation_protocols = ("multi-task",)
    return_conditioned = True  # evaluated per target return (Config.target_returns; none: each task's best return)
    evaluation_seed = 0  # seeds sampled discrete actions (eval_deterministic = false); a run sets its own seed
    one_task_per_batch = False

    def __init__(self, config: PromptDTConfig, spec: DatasetSpec, device: str | torch.device = "cpu"):
        multi_task_spec(spec, self.name)
        check_gradient_mode(config.gradient, self.name, spec.num_tasks)
        self.config, self.spec, self.device = config, spec, torch.device(device)
        self.model = PromptDTModel(config, spec).to(self.device)
        self.optimizer, self.scheduler = warmup_adamw(self.model, config, self.device)
        # each task's evaluation prompt (its best episode's), copied from the batches and kept with the state; a task
        # no batch has held yet has an all-padding prompt (mask False: the model sees no prompt)
        t, p, device = spec.num_tasks, config.prompt_length, self.device
        self.task_prompts = {
            "observations": torch.zeros(t, p, *spec.observation_shape, device=device),
            "actions": torch.zeros(t, p, dtype=torch.long, device=device)
            if spec.discrete
            else torch.zeros(t, p, spec.action_dim, device=device),
            "returns_to_go": torch.zeros(t, p, device=device),
            "timesteps": torch.zeros(t, p, dtype=torch.long, device=device),
            "mask": torch.zeros(t, p, dtype=torch.bool, device=device),
        }

    @classmethod
    def memory_shape(cls, config: PromptDTConfig) -> TransformerShape:
        """R, s, a tokens of the prompt's P steps and the segment's K; attention written out."""
        return TransformerShape(
            3 * (config.segment_length + config.prompt_length),
            config.embedding_dim,
            config.num_layers,
            config.num_heads,
            "explicit",
            config.attention_dropout,
        )

    def sampler_options(self) -> dict[str, Any]:
        c = self.config
        return {
            "segment_length": c.segment_length,
            "prompt_length": c.prompt_length,
            "prompt_pool": c.prompt_pool,
            "one_task_per_batch": self.one_task_per_batch,
        }

    def predict(
        self,
        batch: dict[str, torch.Tensor],
        prompt: dict[str, torch.Tensor],
        weights: dict[str, torch.Tensor] | None = None,
        newest_only: bool = False,
        prompt_states: PromptStates | None = None,
    ) -> torch.Tensor:
        """The model's predictions for segments `batch` prompted by `prompt` (the newest step's only with
        `newest_only`; `prompt_states`: the prompt's, computed before); `weights` replace the model's own parameters
        of those names (HarmoDT's masked transformer)."""
        args = (
            batch["observations"],
            batch["actions"],
            batch["returns_to_go"] * self.config.reward_scale,
            batch["timesteps"],
            batch["mask"],
            self.scaled(prompt),
            newest_only,
            prompt_states,
        )
        return self.model(*args) if weights is None else torch.func.functional_call(self.model, weights, args)

    def scaled(self, prompt: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {**prompt, "returns_to_go": prompt["returns_to_go"] * self.config.reward_scale}

    def row_losses(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Each row's loss (the mean over its real steps)."""
        mask = batch["mask"]
        predicted = self.predict(batch, {key: batch["prompt_" + key] for key in PROMPT_KEYS})
        if self.spec.discrete:
            steps = F.cross_entropy(predicted.flatten(0, 1), batch["actions"].long().flatten(), reduction="none").view(mask.shape)
        else:
            steps = (predicted - batch["actions"].reshape(predicted.shape)).pow(2).mean(-1)
        return (steps * mask).sum(1) / mask.sum(1)

    def keep_task_prompts(self, batch: dict[str, torch.Tensor]) -> None:
        """Each task's evaluation prompt, from the rows of the tasks this batch holds."""
        for key, value in self.task_prompts.items():
            value[batch["task_ids"]] = batch["task_prompt_" + key].reshape(-1, *value.shape[1:]).to(value.dtype)

    def batch_loss(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The mean over the batch's real steps, as DT (each row's mean weighted by its real steps)."""
        return {"loss": (self.row_losses(batch) * batch["mask"].sum(1)).sum() / batch["mask"].sum()}

    def update(self, batch: dict[str, torch.Tensor]) -> dict[str, float]:
        """One step on the batch's loss: its mean over real steps (logged as action_loss), or with gradient=pcgrad
        the projected gradients of its tasks' losses (the mean of the rows' losses logged)."""
        self.keep_task_prompts(batch)
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        if self.config.gradient == "pcgrad":
            losses = self.row_losses(batch)
            pcgrad_backward(per_task_losses(losses, batch["task_ids"]), self.model.parameters())
            loss = losses.detach().mean()
        else:
            loss = accumulate_backward(self.batch_loss, batch, self.micro_batch, real_steps)["loss"]
        if self.config.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.config.grad_clip)
        self.optimizer.step()
        self.scheduler.step()
        return {"action_loss": loss.item(), "learning_rate": float(self.scheduler.get_last_lr()[0])}

    @torch.no_grad()
    def task_prompt_states(self) -> PromptStates:
        """Every task's evaluation prompt through the blocks (per block, keys and values (T, 3P, dim)): an evaluation
        computes them once (`PromptDTPolicy`), since the weights and prompts do not change while it runs."""
        self.model.eval()
        return self.model.prompt_states(self.scaled(self.task_prompts))

    def act_rows(self, batch: dict[str, torch.Tensor], task_ids: torch.Tensor, prompt_states: PromptStates | None = None) -> torch.Tensor:
        """Evaluation: the last step's prediction of every row, each row prompted with its task's prompt
        (`prompt_states`: `task_prompt_states()`, computed here when not given)."""
        states = self.task_prompt_states() if prompt_states is None else prompt_states
        self.model.eval()
        return self.predict(
            batch,
            {key: value[task_ids] for key, value in self.task_prompts.items()},
            newest_only=True,
            prompt_states=[(k[task_ids], v[task_ids]) for k, v in states],
        )[:, -1]

    def policy(self, options: PolicyOptions) -> PromptDTPolicy:
        """Conditioned on `options.target_return` (one per row), each row prompted by its task (`options.task_ids`)."""
        if options.task_ids is None or options.target_return is None:
            raise ValueError(f"{self.name} acts with the task id of every env row and a target return (PolicyOptions)")
        check_sampling(self, options)
        return PromptDTPolicy(self, options)

    def state_dict(self) -> dict[str, Any]:
        return {
            **part_states(model=self.model, optimizer=self.optimizer, scheduler=self.scheduler),
            "task_prompts": self.task_prompts,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        load_part_states(state, model=self.model, optimizer=self.optimizer, scheduler=self.scheduler)
        for key, value in self.task_prompts.items():
            value.copy_(state["task_prompts"][key])


class PromptDTPolicy(DTPolicy):
    """DT's evaluation policy (the last K steps of every env row, left-padded like training), each row prompted
    with its task's evaluation prompt through the baseline's `act_rows` (HarmoDT's applies the task's mask)."""

    dt: PromptDT

    def reset(self, num_envs: int) -> None:
        super().reset(num_envs)
        self.prompt_states = self.dt.task_prompt_states()

    def predict(self) -> torch.Tensor:
        task_ids = cast(torch.Tensor, self.task_ids)  # PromptDT.policy refuses options without task ids
        return self.dt.act_rows(self.context(), task_ids, self.prompt_states)
