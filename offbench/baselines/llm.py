"""A language model playing bandits in context: the agent of offbench/agents/llm.py as a baseline with nothing to
train, so its runs are tracked, evaluated under the bandit cards' in-context protocol (the same held-out tasks and
regret as AD and DPT) and submitted like any other.

    offbench run baseline llm --dataset bandit-small --set endpoint="https://.../v1" --set model="..." \
        --set history="summary" --set hints=true

The key is read from the environment variable `api_key_env` names (default OPENAI_API_KEY) and never recorded. There
is no training: the standard config takes one update that does nothing, and the run is its evaluation. Answers are
cached by request in `cache` (default $OFFBENCH_HOME/llm-cache/responses.jsonl), so an interrupted evaluation resumes
and a finished one replays (`offbench submit --verify`) without new calls.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from offbench.agents.llm import LLMBanditPolicy, LLMConfig, demonstration_histories
from offbench.baselines.base import DatasetSpec
from offbench.errors import OffbenchError
from offbench.evaluation.policy import PolicyOptions
from offbench.paths import offbench_home
from offbench.records import ranged


@dataclass
class LLMBaselineConfig(LLMConfig):
    cache: str = ranged("", doc="response cache (JSON lines); empty: $OFFBENCH_HOME/llm-cache/responses.jsonl")


class LLM:
    name = "llm"
    Config = LLMBaselineConfig
    summary = "A language model asked which arm to pull through an OpenAI-compatible endpoint; nothing trained (bandit cards)"
    tiny_config = {"max_retries": 0, "timeout_s": 5.0, "concurrency": 2}  # the tests point `endpoint` at a local scripted server
    sampler = "transitions"
    action_kinds = ("discrete",)
    evaluation_protocols = ("in-context",)
    return_conditioned = False
    trains = False  # update() does nothing: the standard config takes one, and the run is its evaluation

    def __init__(self, config: LLMBaselineConfig, spec: DatasetSpec, device: str | torch.device = "cpu"):
        if spec.max_episode_length != 1:
            raise OffbenchError(f"llm plays bandits (one pull per episode); this dataset's episodes run to {spec.max_episode_length} steps")
        self.config, self.spec = config, spec
        self.cache_path = Path(config.cache).expanduser() if config.cache else offbench_home() / "llm-cache" / "responses.jsonl"
        self._demonstrations = None

    def update(self, batch: dict[str, torch.Tensor]) -> dict[str, float]:
        """Nothing to learn."""
        return {}

    def policy(self, options: PolicyOptions = PolicyOptions()) -> LLMBanditPolicy:
        if self._demonstrations is None:
            self._demonstrations = self._load_demonstrations()
        return LLMBanditPolicy(self.config, self.spec.action_dim, self.cache_path, self._demonstrations)

    def _load_demonstrations(self) -> list:
        if not self.config.demonstrations:
            return []
        if not self.config.demonstration_dataset:
            raise OffbenchError("llm: demonstrations > 0 needs demonstration_dataset (a bandit learning-history dataset id)")
        import offbench

        return demonstration_histories(
            offbench.load(self.config.demonstration_dataset), self.config.demonstrations, self.spec.action_dim, self.config.seed
        )

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """No state: the model is behind the endpoint."""
