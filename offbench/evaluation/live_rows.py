"""Evaluators that play each row's episode once (finished rows idle until the whole batch ends) ask the policy
only for the rows still running, when it can drop rows: a DT with finished rows in its batch would otherwise run
its transformer over them to the end. Kept free of torch: dataset collection steps behaviour policies through it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

import numpy as np

if TYPE_CHECKING:
    from offbench.evaluation.policy import Policy


class LiveRows:
    """A policy seen through the rows whose episodes are still running (see the module docstring); a policy
    without `drop` is asked for every row, as before."""

    def __init__(self, policy: Policy, num_envs: int):
        self.policy, self.rows = policy, np.arange(num_envs)
        self._drop: Callable[[np.ndarray], None] | None = getattr(policy, "drop", None)  # `Policy`'s optional drop
        policy.reset(num_envs)

    def act(self, observations: np.ndarray) -> np.ndarray:
        """Actions for every row (finished rows get zeros, which the evaluator ignores)."""
        actions = np.asarray(self.policy.act(observations[self.rows]))
        if len(self.rows) == len(observations):
            return actions
        every = np.zeros((len(observations), *actions.shape[1:]), dtype=actions.dtype)
        every[self.rows] = actions
        return every

    def observe(self, rewards: np.ndarray, dones: np.ndarray, running: np.ndarray) -> None:
        """The step's rewards and dones; `running` marks the rows that play on (the others are finished for good)."""
        self.policy.observe(rewards[self.rows], dones[self.rows])
        keep = running[self.rows]
        if self._drop is not None and not keep.all():
            self._drop(keep)
            self.rows = self.rows[keep]
