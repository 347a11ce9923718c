"""Policies that are not offbench baselines, played under a dataset card's protocol exactly as a baseline is.

`offbench.evaluate(policy, dataset)` and `offbench.track(...).evaluate(step, policy)` accept:

    an object with `policy(options: PolicyOptions) -> Policy`   what every baseline has (full control: task ids,
                                                                  target returns, greedy or sampled actions)
    a `Policy` (reset / act / observe)                           played as given; on multi-task and in-context
                                                                  cards a `reset(num_envs, task_ids=...)` that takes
                                                                  the keyword gets the rows' task ids
    a plain callable `observations -> actions`                   a Markov policy; on multi-task cards it is called
                                                                  as `fn(observations, task_ids)`

Whatever comes in is seen through `CheckedPolicy`: an exception, or actions of the wrong shape or dtype, outside
the action space or not finite, stop the evaluation with a one-line OffbenchError naming the row's episode and
step (no run directory is written for a failed evaluation).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Callable

import gymnasium as gym
import numpy as np

from offbench.errors import OffbenchError
from offbench.evaluation.policy import DroppingPolicy, Policy, PolicyOptions

ActionSpace = gym.spaces.Discrete | gym.spaces.Box  # the spaces whose actions `CheckedPolicy` can check


def method_name_of(policy: Any) -> str:
    """A default name for a policy's method: its function or class name."""
    name = getattr(policy, "__name__", None) or type(policy).__name__
    return name if name != "<lambda>" else "lambda-policy"


class CheckedPolicy:
    """A user's policy, with every call checked (see the module docstring). Counts steps per row (and episodes per
    row in context) only to name where something went wrong."""

    def __init__(self, policy: Policy, action_space: ActionSpace, name: str, options: PolicyOptions, in_context: bool):
        self.policy, self.space, self.name = policy, action_space, name
        self.task_ids = options.task_ids
        self.labels = list(options.row_labels or ())  # made up at reset unless one per row was given
        self.in_context = in_context
        self._pass_task_ids = self.task_ids is not None and _takes_keyword(policy.reset, "task_ids")

    def reset(self, num_envs: int) -> None:
        if len(self.labels) != num_envs:
            self.labels = [f"row {i}" for i in range(num_envs)]
        self.steps = np.zeros(num_envs, dtype=np.int64)
        self.episodes = np.zeros(num_envs, dtype=np.int64)
        reset: Callable[..., None] = self.policy.reset  # takes task_ids when _pass_task_ids (its signature says so)
        self._call("reset", lambda: reset(num_envs, task_ids=np.asarray(self.task_ids)) if self._pass_task_ids else reset(num_envs))

    def act(self, observations: np.ndarray) -> np.ndarray:
        actions = self._call("act", lambda: self.policy.act(observations))
        return self._checked(actions, len(observations))

    def observe(self, rewards: np.ndarray, dones: np.ndarray) -> None:
        self._call("observe", lambda: self.policy.observe(rewards, dones))
        self.steps += 1
        done = np.asarray(dones, dtype=bool)
        self.episodes += done
        self.steps[done] = 0

    def _where(self, row: int) -> str:
        episode = f", in-context episode {self.episodes[row]}" if self.in_context else ""
        return f"{self.labels[row]}{episode}, step {self.steps[row]}"

    def _call(self, what: str, call: Callable[[], Any]) -> Any:
        try:
            return call()
        except OffbenchError:
            raise
        except Exception as exc:  # noqa: BLE001 - any failure of user code is reported the same way, in one line
            rows = len(self.labels)
            where = f" at {self._where(0)}" + (f" (and {rows - 1} more rows)" if rows > 1 else "") if what != "reset" and rows else ""
            message = str(exc).splitlines()[0][:200] if str(exc) else ""
            raise OffbenchError(f"policy {self.name!r}: {what}() raised {exc.__class__.__name__}: {message}{where}") from None

    def _checked(self, actions: Any, rows: int) -> np.ndarray:
        try:
            array = np.asarray(actions)
        except Exception:  # noqa: BLE001 - ragged lists and the like
            raise OffbenchError(f"policy {self.name!r}: act() returned {type(actions).__name__}, not an array of actions") from None
        space = self.space
        discrete = isinstance(space, gym.spaces.Discrete)
        shape = (rows,) if discrete else (rows, *space.shape)
        if discrete and not np.issubdtype(array.dtype, np.integer):
            raise OffbenchError(
                f"policy {self.name!r}: act() returned dtype {array.dtype} at {self._where(0)}; {space} takes integer actions"
            )
        if not discrete and not (np.issubdtype(array.dtype, np.floating) or np.issubdtype(array.dtype, np.integer)):
            raise OffbenchError(f"policy {self.name!r}: act() returned dtype {array.dtype} at {self._where(0)}; {space} takes numbers")
        if array.shape != shape:
            raise OffbenchError(
                f"policy {self.name!r}: act() returned shape {array.shape} at {self._where(0)}; "
                f"expected {shape} (one action per row for {space})"
            )
        flat = array.reshape(rows, -1).astype(np.float64)
        bad = ~np.isfinite(flat).all(axis=1)
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            raise OffbenchError(f"policy {self.name!r}: act() returned {array[row]} (not finite) at {self._where(row)}")
        if discrete:
            outside = (array < space.start) | (array >= space.start + space.n)
        else:
            low, high = space.low.reshape(1, -1), space.high.reshape(1, -1)
            outside = ((flat < low) | (flat > high)).any(axis=1)
        if outside.any():
            row = int(np.flatnonzero(outside)[0])
            raise OffbenchError(f"policy {self.name!r}: action {array[row]} at {self._where(row)} is outside the action space {space}")
        return array.astype(np.int64) if discrete else array.astype(space.dtype)


class CheckedDroppingPolicy(CheckedPolicy):
    """A CheckedPolicy for a policy that can drop finished rows (`Policy.drop`): the evaluator then asks only for
    the rows still running, and so do the checks."""

    def __init__(self, policy: DroppingPolicy, action_space: ActionSpace, name: str, options: PolicyOptions, in_context: bool):
        super().__init__(policy, action_space, name, options, in_context)
        self._drop = policy.drop

    def drop(self, keep: np.ndarray) -> None:
        self._call("drop", lambda: self._drop(keep))
        keep = np.asarray(keep, dtype=bool)
        self.labels = [label for label, kept in zip(self.labels, keep) if kept]
        self.steps, self.episodes = self.steps[keep], self.episodes[keep]


class MarkovCallable:
    """A plain function `observations -> actions` (or `(observations, task_ids) -> actions` on multi-task cards)
    as a Policy: no memory between steps."""

    def __init__(self, act: Callable[..., Any], task_ids: np.ndarray | None):
        self._act, self.task_ids = act, task_ids

    def reset(self, num_envs: int) -> None:
        pass

    def act(self, observations: np.ndarray) -> Any:
        return self._act(observations) if self.task_ids is None else self._act(observations, self.task_ids)

    def observe(self, rewards: np.ndarray, dones: np.ndarray) -> None:
        pass

    def drop(self, keep: np.ndarray) -> None:
        if self.task_ids is not None:
            self.task_ids = self.task_ids[np.asarray(keep, dtype=bool)]


class ExternalMethod:
    """What a protocol evaluates (`policy(options) -> Policy`), built from a user's policy of any accepted kind."""

    def __init__(self, policy: Any, action_space: gym.Space, protocol: str, name: str | None = None):
        self.name = name or method_name_of(policy)
        if not isinstance(action_space, ActionSpace):
            raise OffbenchError(f"policy {self.name!r}: actions in {action_space} cannot be checked (a Discrete or Box action space can)")
        self.space, self.protocol = action_space, protocol
        if hasattr(policy, "policy") and callable(policy.policy):
            self.factory = policy.policy
        elif isinstance(policy, Policy):
            self.factory = lambda options: policy
        elif callable(policy):
            self.factory = lambda options: MarkovCallable(policy, options.task_ids if protocol == "multi-task" else None)
        else:
            raise OffbenchError(
                f"policy {self.name!r}: expected a Policy (reset / act / observe), an object with "
                f"policy(options), or a callable observations -> actions; got {type(policy).__name__}"
            )

    def policy(self, options: PolicyOptions) -> CheckedPolicy:
        inner = self.factory(options)
        if not isinstance(inner, Policy):
            raise OffbenchError(
                f"policy {self.name!r}: policy(options) returned {type(inner).__name__}, which has no reset / act / observe"
            )
        in_context = self.protocol == "in-context"
        if isinstance(inner, DroppingPolicy):
            return CheckedDroppingPolicy(inner, self.space, self.name, options, in_context)
        return CheckedPolicy(inner, self.space, self.name, options, in_context)


def _takes_keyword(function: Callable[..., Any], keyword: str) -> bool:
    try:
        parameters = inspect.signature(function).parameters
    except (TypeError, ValueError):
        return False
    return keyword in parameters or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())


@dataclass(frozen=True)
class EvaluationResult:
    """One evaluation under a card's protocol: the evaluations.jsonl lines it wrote (one per target return) and
    the headline metric the card's protocol picks (docs/run-directory.md, summary.json `score_metric`)."""

    dataset: str
    evaluation: dict[str, Any]  # the protocol's block (run.json `evaluation`): protocol, episodes, tasks, seeds...
    metric: str  # the headline field: normalized_score, success_rate, mean_return or regret
    records: tuple[dict[str, Any], ...]

    @property
    def protocol(self) -> str:
        return self.evaluation["protocol"]

    @property
    def score(self) -> float | None:
        """The headline metric of the (first) evaluation line."""
        return self.records[0].get(self.metric)

    @property
    def returns(self) -> list[float]:
        """Per-episode returns (single-task: every episode; multi-task: task-major; in-context: each task's last)."""
        return list(self.records[0]["returns"])

    @property
    def per_task(self) -> dict[str, dict[str, Any]] | None:
        """Multi-task: {task name: {task_id, returns, successes, mean_return, success_rate}}."""
        return self.records[0].get("per_task")

    @property
    def in_context_returns(self) -> list[float] | None:
        """In-context: the mean over tasks of each consecutive episode's return."""
        return self.records[0].get("in_context_returns")

    def to_frame(self):
        """One row per episode played (pandas): target_return, task, episode, return, plus length and success where
        the protocol records them per episode."""
        import pandas as pd

        rows = []
        for record in self.records:
            target = record.get("target_return")
            if record.get("per_task"):
                for task, block in record["per_task"].items():
                    successes = block.get("successes") or [None] * len(block["returns"])
                    rows += [
                        {"target_return": target, "task": task, "episode": i, "return": r, "success": s}
                        for i, (r, s) in enumerate(zip(block["returns"], successes))
                    ]
            elif record.get("task_returns") is not None:
                rows += [
                    {"target_return": target, "task": task, "episode": i, "return": r}
                    for task, returns in zip(self._task_names(), record["task_returns"])
                    for i, r in enumerate(returns)
                ]
            else:
                rows += [
                    {"target_return": target, "task": None, "episode": i, "return": r, "length": n}
                    for i, (r, n) in enumerate(zip(record["returns"], record["lengths"]))
                ]
        return pd.DataFrame(rows)

    def _task_names(self) -> list[str]:
        task_ids = self.evaluation.get("task_ids") or range(len(self.records[0]["task_returns"]))
        return [f"{self.evaluation.get('tasks', 'held-out')} task {i}" for i in task_ids]
