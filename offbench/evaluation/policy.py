"""What evaluation asks of a trained baseline: a `Policy` for a batch of environments, built from one set of
`PolicyOptions` whatever the baseline (task ids, a target return, greedy or sampled actions).

Every baseline has `policy(options: PolicyOptions) -> Policy`. A baseline ignores the options it has no use
for (BC has no target return; AD infers its task from its context, not from `task_ids`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol, runtime_checkable

import gymnasium as gym
import numpy as np
import torch

from offbench.errors import OffbenchError


@dataclass(frozen=True)
class PolicyOptions:
    task_ids: np.ndarray | None = None  # (num_envs,) task id of each environment row: multi-task and in-context
    target_return: float | np.ndarray | None = None  # return-conditioned baselines: one number, or one per row
    deterministic: bool = True  # greedy / mean action; False samples from the policy's distribution
    row_labels: tuple[str, ...] | None = None  # what each row plays ("episode 3 (seed 10003)"): named in errors about a row
    num_actions: np.ndarray | None = None  # (num_envs,) actions of each row's environment (the first ones of the action
    # space), from in-context evaluation: a baseline for variable action spaces (`variable_actions = True`) acts on them


@runtime_checkable
class Policy(Protocol):
    """Acts in a batch of environments; stateful policies (DT, AD) keep their context here.

    The evaluator calls `reset(num_envs)` once, then per step `act(observations)` for every row and
    `observe(rewards, dones)`; `dones[i]` is True when row i's episode ended at that step (the next `act` sees
    the first observation of its next episode).

    Optional: `drop(keep)`, for evaluators whose rows end for good (`offbench.evaluation.live_rows.LiveRows`): the
    rows where `keep` is False are gone, and later calls carry only the kept rows, in order. A policy without it
    gets every row to the end."""

    def reset(self, num_envs: int) -> None: ...

    def act(self, observations: np.ndarray) -> np.ndarray: ...

    def observe(self, rewards: np.ndarray, dones: np.ndarray) -> None: ...


@runtime_checkable
class DroppingPolicy(Policy, Protocol):
    """A `Policy` with the optional `drop(keep)`: the rows where `keep` is False are gone for good."""

    def drop(self, keep: np.ndarray) -> None: ...


def discrete_action(logits: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """(B,) actions from (B, A) logits: the most likely, or with a `generator` a draw from their softmax (what every
    discrete baseline's sampled evaluation draws)."""
    if generator is None:
        return logits.argmax(dim=-1)
    return torch.multinomial(torch.softmax(logits, dim=-1), 1, generator=generator).squeeze(-1)


def check_sampling(baseline, options: PolicyOptions) -> None:
    """Sampled actions are draws from a discrete head's logits; a continuous head regresses the action, with nothing
    to draw from (one line, before any episode is played)."""
    if not options.deterministic and not baseline.spec.discrete:
        raise OffbenchError(
            f"{baseline.name} samples discrete actions only: its continuous head regresses the action (drop eval_deterministic=false)"
        )


def actions_to_numpy(actions: torch.Tensor, action_space: gym.Space) -> np.ndarray:
    """A batch of actions from a network as the environment wants them: a Box's shape and dtype, else int64 indices."""
    array = actions.detach().cpu().numpy()
    if isinstance(action_space, gym.spaces.Box):
        return array.reshape(len(array), *action_space.shape).astype(action_space.dtype)
    return array.astype(np.int64)


class MarkovPolicy:
    """The evaluation policy of every memoryless actor (BC, CQL, IQL, MOORE): `act(observations, task_ids)` maps a
    batch of observation tensors (and the rows' task ids, or None) to a batch of action tensors."""

    def __init__(
        self,
        act: Callable[[torch.Tensor, torch.Tensor | None], torch.Tensor],
        action_space: gym.Space,
        device: torch.device | str,
        options: PolicyOptions = PolicyOptions(),
    ):
        self._act, self._space, self._device = act, action_space, device
        self._task_ids = (
            None if options.task_ids is None else torch.as_tensor(np.asarray(options.task_ids), dtype=torch.long, device=device)
        )

    def reset(self, num_envs: int) -> None:
        if self._task_ids is not None and len(self._task_ids) != num_envs:
            raise ValueError(f"the policy was built for {len(self._task_ids)} task ids, reset with {num_envs} environments")

    @torch.inference_mode()
    def act(self, observations: np.ndarray) -> np.ndarray:
        obs = torch.tensor(np.asarray(observations), dtype=torch.float32, device=self._device)
        return actions_to_numpy(self._act(obs, self._task_ids), self._space)

    def observe(self, rewards: np.ndarray, dones: np.ndarray) -> None:
        pass  # nothing to remember between steps

    def drop(self, keep: np.ndarray) -> None:
        if self._task_ids is not None:
            self._task_ids = self._task_ids[torch.as_tensor(keep, device=self._device)]
