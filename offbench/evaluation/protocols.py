"""Evaluation protocols: how a trained baseline is scored on the data it learnt from. The trainer only delegates.

A protocol is chosen by the dataset card's `kind` (`PROTOCOL_FOR_KIND`) and built from an `EvaluationSetup`:

    single-task   one environment, `episodes` seeded episodes (D4RL / Minari / pendulum cards)
    multi-task    every task of the card's suite, `episodes` per task, all tasks' episodes batched into one
                  policy call per step; success and return per task and their means (Meta-World, MiniGrid)
    in-context    the card's held-out tasks (or its validation or training tasks), all in one batched environment,
                  `episodes` consecutive episodes per task with the policy's context kept across them (AD, DPT)

Each one checks what it needs before training (`check`), says what run.json's `evaluation` block records
(`describe`, an `EvaluationSettings`) and evaluates (`evaluate`: evaluations.jsonl lines, each an `EvaluationRecord`
as `to_dict` writes it); docs/run-directory.md lists their fields.
Seeds: evaluation episode i of a run with seed s resets with `evaluation_seed(s, i)`, disjoint from every seed
used for training or data generation; the multi-task suite hashes the task name into it as well
(`offbench.envs.multitask.episode_seed`), and the in-context batch is seeded with `evaluation_seed(s, 0)`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Callable, Protocol

import numpy as np

from offbench.errors import OffbenchError
from offbench.evaluation.policy import PolicyOptions
from offbench.evaluation.results import EvaluationRecord, EvaluationSettings, TaskScores, score_metric
from offbench.evaluation.rollout import EPISODE_SEEDS_RULE, evaluation_record, evaluation_seed, run_episodes
from offbench.records import to_dict

if TYPE_CHECKING:
    import gymnasium as gym

    from offbench.data.cards import DatasetCard
    from offbench.data.spec import DatasetSpec

PROTOCOL_FOR_KIND = {"offline": "single-task", "multi-task": "multi-task", "learning-history": "in-context"}
TASK_SPLITS = ("held-out", "train", "validation")  # boards report held-out; variants are chosen on validation


@dataclass(frozen=True)
class EvaluationSetup:
    """What every protocol is built from: the card, the run's seed and the evaluation settings of its config."""

    card: DatasetCard | None
    seed: int
    episodes: int  # single-task: episodes; multi-task: episodes per task; in-context: consecutive episodes per task
    every_steps: int
    target_returns: tuple[float | None, ...] = (None,)  # one evaluation per target; (None,) unless return-conditioned
    task_target_returns: tuple[float, ...] | None = None  # multi-task, return-conditioned, no target given: per task
    deterministic: bool = True
    tasks: str = "held-out"  # in-context only: which split of the card's tasks (TASK_SPLITS)

    @property
    def env_spec(self) -> dict[str, Any] | None:
        return (to_dict(self.card.env) if self.card is not None else {}) or None

    def settings(self, name: str, **protocol_fields: Any) -> EvaluationSettings:
        """run.json's `evaluation` block: these settings and the protocol's own fields."""
        targets = [target for target in self.target_returns if target is not None]  # none: (None,), not return-conditioned
        return EvaluationSettings(
            protocol=name,
            episodes=self.episodes,
            every_steps=self.every_steps,
            target_returns=targets or None,
            deterministic=self.deterministic,
            env=self.env_spec,
            **protocol_fields,
        )


class EvaluationProtocol(Protocol):
    name: str

    def check(self, spec: DatasetSpec, baseline_cls: type | None = None) -> None:
        """Before training: the environment builds and matches the data (one-line OffbenchError otherwise), or
        acts on another number of actions for a `baseline_cls` that declares `variable_actions = True` (in context)."""
        ...

    def describe(self) -> EvaluationSettings:
        """run.json's `evaluation` block."""
        ...

    def evaluate(self, baseline: Any, step: int) -> list[dict[str, Any]]:
        """Evaluate `baseline` (anything with `policy(PolicyOptions) -> Policy`); evaluations.jsonl lines as written."""
        ...

    def score_metric(self, evaluations: list[dict[str, Any]]) -> str:
        """The headline field of its evaluation lines (summary.json `score_metric`)."""
        ...


def protocol_name(card: DatasetCard | None) -> str:
    """The protocol a card's kind calls for (single-task for a file without a card)."""
    if card is None:
        return PROTOCOL_FOR_KIND["offline"]
    if card.kind not in PROTOCOL_FOR_KIND:
        raise OffbenchError(
            f"dataset card {card.id}: kind '{card.kind}' has no evaluation protocol (known kinds: {', '.join(PROTOCOL_FOR_KIND)})"
        )
    return PROTOCOL_FOR_KIND[card.kind]


def build_protocol(setup: EvaluationSetup) -> EvaluationProtocol:
    name = protocol_name(setup.card)
    if setup.tasks != "held-out" and name != "in-context":
        where = setup.card.id if setup.card is not None else "this dataset file"
        raise OffbenchError(f"{where}: the {setup.tasks} tasks are an in-context split (eval_tasks); this dataset is evaluated {name}")
    return PROTOCOLS[name](setup)


def _check_shapes(dataset_id: str, env_id: str, pairs: list[tuple[str, tuple[int, ...] | None, tuple[int, ...] | None]]) -> None:
    for what, env_shape, data_shape in pairs:
        if data_shape is not None and env_shape != data_shape:
            raise OffbenchError(f"{dataset_id}: the dataset's {what} shape {data_shape} differs from {env_id}'s {env_shape}")


def _shape_of(space: gym.Space | None) -> tuple[int, ...] | None:
    """A space's shape; None, nothing to compare, where the dataset records no space."""
    return space.shape if space is not None else None


def _space_shape(space) -> tuple:
    return (int(space.n),) if hasattr(space, "n") else tuple(space.shape)


def _needs_env(setup: EvaluationSetup) -> tuple[DatasetCard, dict[str, Any]]:
    """The card and its [env] table, which every protocol evaluates in."""
    card, env = setup.card, setup.env_spec
    if card is None or env is None:
        where = card.id if card is not None else "this dataset file"
        raise OffbenchError(f"{where}: no dataset card with an [env] to evaluate in (use a registered id, or --set eval_episodes=0)")
    return card, env


# ---------------------------------------------------------------------------------------------- single-task
class SingleTask:
    """Today's D4RL-style protocol: `episodes` seeded episodes in the card's one environment, per target return."""

    name = "single-task"

    def __init__(self, setup: EvaluationSetup):
        self.setup = setup

    def check(self, spec: DatasetSpec, baseline_cls: type | None = None) -> None:
        from offbench.envs.factory import make_env

        card, env_spec = _needs_env(self.setup)
        env = make_env(env_spec)
        try:
            _check_shapes(
                card.id,
                env_spec["id"],
                [
                    ("observation", env.observation_space.shape, _shape_of(spec.observation_space)),
                    ("action", _space_shape(env.action_space), _space_shape(spec.action_space)),
                ],
            )
        finally:
            env.close()

    def describe(self) -> EvaluationSettings:
        return self.setup.settings(self.name, episode_seeds=EPISODE_SEEDS_RULE)

    def evaluate(self, baseline: Any, step: int) -> list[dict[str, Any]]:
        from offbench.envs.factory import make_env

        setup = self.setup
        _, env_spec = _needs_env(setup)
        seeds = [evaluation_seed(setup.seed, i) for i in range(setup.episodes)]
        records = []
        for target in setup.target_returns:
            labels = tuple(f"episode {i} (seed {seed})" for i, seed in enumerate(seeds))
            policy = baseline.policy(PolicyOptions(target_return=target, deterministic=setup.deterministic, row_labels=labels))
            results = run_episodes(policy, lambda: make_env(env_spec), seeds)
            records.append(to_dict(evaluation_record(step, results, setup.card, target)))
        return records

    def score_metric(self, evaluations: list[dict[str, Any]]) -> str:
        card = self.setup.card
        return score_metric(evaluations, card is not None and card.ref_min_score is not None and card.ref_max_score is not None)


# ---------------------------------------------------------------------------------------------- multi-task
class MultiTask:
    """Every task of the card's suite, `episodes` per task, all episodes of a round in one policy call per step.
    The line's `mean_return` and `success_rate` are means over tasks (each task weighs the same)."""

    name = "multi-task"

    MAX_LANES = 512  # episodes stepped side by side (one policy call covers them all)

    def __init__(self, setup: EvaluationSetup):
        from offbench.envs.multitask import task_names

        self.setup = setup
        self.tasks = task_names(_needs_env(setup)[1]) if setup.env_spec else []

    def check(self, spec: DatasetSpec, baseline_cls: type | None = None) -> None:
        from offbench.envs.factory import make_env

        card, env_spec = _needs_env(self.setup)
        if len(self.tasks) != spec.num_tasks:
            raise OffbenchError(f"{card.id}: the card's suite has {len(self.tasks)} tasks but the data's task ids name {spec.num_tasks}")
        env = make_env(env_spec, 0)
        try:
            _check_shapes(
                card.id,
                f"{env_spec['id']} task {self.tasks[0]}",
                [
                    ("observation", env.observation_space.shape, _shape_of(spec.observation_space)),
                    ("action", _space_shape(env.action_space), _space_shape(spec.action_space)),
                ],
            )
        finally:
            env.close()

    def describe(self) -> EvaluationSettings:
        setup = self.setup
        return setup.settings(
            self.name,
            tasks=self.tasks,
            task_target_returns=None if setup.task_target_returns is None else list(setup.task_target_returns),
            episode_seeds=f"offbench.envs.multitask.episode_seed({EPISODE_SEEDS_RULE.replace(' + episode', '')}, task name, episode)",
        )

    def evaluate(self, baseline: Any, step: int) -> list[dict[str, Any]]:
        from offbench.evaluation.lanes import evaluate_tasks

        setup = self.setup
        _, env_spec = _needs_env(setup)
        records = []
        for target in setup.target_returns:

            def policy_for(lanes, _envs, target=target):
                task_ids = np.array([lane.task_id for lane in lanes], dtype=np.int64)
                row_target = target
                if target is None and setup.task_target_returns is not None:
                    row_target = np.asarray(setup.task_target_returns, dtype=np.float64)[task_ids]
                labels = tuple(f"task {self.tasks[lane.task_id]} episode {lane.episode} (seed {lane.seed})" for lane in lanes)
                return baseline.policy(
                    PolicyOptions(task_ids=task_ids, target_return=row_target, deterministic=setup.deterministic, row_labels=labels)
                )

            lanes = setup.episodes * len(self.tasks)
            episodes = evaluate_tasks(
                env_spec, policy_for, setup.episodes, evaluation_seed(setup.seed, 0), max_envs=min(lanes, self.MAX_LANES)
            )
            records.append(to_dict(self.record(step, episodes, target)))
        return records

    def record(self, step: int, episodes, target: float | None) -> EvaluationRecord:
        per_task = {}
        for task_id, name in enumerate(self.tasks):
            rows = episodes[episodes["task_id"] == task_id]
            per_task[name] = TaskScores(
                task_id=task_id,
                returns=[float(r) for r in rows["return"]],
                successes=[bool(s) for s in rows["success"]],
                mean_return=float(rows["return"].mean()),
                success_rate=float(rows["success"].mean()),
            )
        return EvaluationRecord(
            step=step,
            returns=[float(r) for r in episodes["return"]],
            lengths=[int(n) for n in episodes["length"]],
            mean_return=float(np.mean([t.mean_return for t in per_task.values()])),
            success_rate=float(np.mean([t.success_rate for t in per_task.values()])),
            target_return=target,
            per_task=per_task,
        )

    def score_metric(self, evaluations: list[dict[str, Any]]) -> str:
        return "success_rate"


# ---------------------------------------------------------------------------------------------- in-context
@dataclass
class InContextResults:
    returns: np.ndarray  # (tasks, episodes)
    expected_returns: np.ndarray  # (tasks, episodes): the environment's expectation of each return (bandits: arm means)
    lengths: np.ndarray  # (tasks, episodes)
    optimal_expected_returns: np.ndarray | None = None  # (tasks, episodes): the best expected return of each episode's
    # own steps, where the environment says it per step (`optimal_expected_rewards`: contextual bandits); else None


def run_in_context(policy, env, episodes: int) -> InContextResults:
    """`episodes` consecutive episodes on every row of a batched environment, one policy context per row kept
    across episode ends (the policy sees dones and the next episode's first observation). A row that finished
    its episodes goes on stepping with the others until all have, unrecorded. An environment whose best expected
    reward changes from step to step (a contextual bandit's with each context) says it before each step through
    `optimal_expected_rewards()`; it is summed per episode as the expected rewards are."""
    n = env.num_envs
    step_optimum = getattr(env, "optimal_expected_rewards", None)
    optimal = np.zeros((n, episodes))  # returned only where the environment says its per-step optimum
    rows = np.arange(n)
    returns, expected = np.zeros((n, episodes)), np.zeros((n, episodes))
    lengths = np.zeros((n, episodes), dtype=np.int64)
    episode = np.zeros(n, dtype=np.int64)
    observations = env.reset()
    policy.reset(n)
    while (episode < episodes).any():
        actions = np.asarray(policy.act(observations))
        best = step_optimum() if step_optimum is not None else None
        observations, rewards, terminated, truncated = env.step(actions)
        done = np.asarray(terminated) | np.asarray(truncated)
        live = episode < episodes
        r, e = rows[live], episode[live]
        returns[r, e] += rewards[live]
        expected[r, e] += env.expected_rewards(r, actions[live], rewards[live])
        if best is not None:
            optimal[r, e] += best[live]
        lengths[r, e] += 1
        policy.observe(rewards, done)
        episode += done
        if done.any():
            observations = env.reset(done)
    return InContextResults(returns, expected, lengths, optimal if step_optimum is not None else None)


class InContext:
    """The card's held-out tasks (or its validation or training tasks), all in one batched environment, `episodes` consecutive
    episodes per task with the policy's context kept across them. `regret` sums the optimal return minus the
    expected return over all episodes (bandits: the pseudo-regret of the pulls; contextual bandits: each pull's
    own optimum, max_a theta_a . x_t, minus the pulled arm's theta . x_t); it is the headline metric
    where episodes are single pulls (bandits), the last episode's return elsewhere."""

    name = "in-context"

    def __init__(self, setup: EvaluationSetup):
        if setup.tasks not in TASK_SPLITS:
            raise OffbenchError(f"--tasks must be one of {', '.join(TASK_SPLITS)}, got {setup.tasks!r}")
        if setup.env_spec is not None:  # before the tasks: an XLand card's split reads xminigrid's ruleset file
            from offbench.envs.factory import require_suite

            require_suite(setup.env_spec)
        self.setup = setup
        self.task_list, self.task_ids = self._tasks()

    def _tasks(self) -> tuple[list[dict], list[int]]:
        from offbench.envs.benchmarks import card_split

        if self.setup.card is None:
            return [], []
        return card_split(self.setup.card, self.setup.tasks)

    def make_env(self):
        from offbench.envs.benchmarks import make_batch_env

        return make_batch_env(_needs_env(self.setup)[1], self.task_list, seed=evaluation_seed(self.setup.seed, 0))

    def check(self, spec: DatasetSpec, baseline_cls: type | None = None) -> None:
        """Also: the tasks evaluated have one arm count, which may differ from the data's only for a baseline for
        variable action spaces (`variable_actions = True`: Headless-AD)."""
        from offbench.envs.benchmarks import arm_runs

        card, env_spec = _needs_env(self.setup)
        if not self.task_list:
            raise OffbenchError(f"{card.id}: the card's split has no {self.setup.tasks} tasks to evaluate in context")
        if len(arm_runs(self.task_list)) > 2:
            counts = sorted({len(task["means"]) for task in self.task_list})
            raise OffbenchError(
                f"{card.id}: its {self.setup.tasks} tasks have {', '.join(map(str, counts))} arms, and in-context "
                "evaluation runs one arm count (evaluate the held-out tasks)"
            )
        env = self.make_env()
        _check_shapes(card.id, env_spec["id"], [("observation", env.single_observation_space.shape, _shape_of(spec.observation_space))])
        data_actions = _space_shape(spec.action_space)
        if data_actions == (env.num_actions,) or (spec.discrete and getattr(baseline_cls, "variable_actions", False)):
            return
        if not spec.discrete:
            _check_shapes(card.id, env_spec["id"], [("action", (env.num_actions,), data_actions)])
        name = getattr(baseline_cls, "name", "this baseline")
        raise OffbenchError(
            f"{card.id}: {name} is trained on {data_actions[0]} actions and the {self.setup.tasks} tasks have "
            f"{env.num_actions}; it acts only in the action space it trained on (a baseline with variable_actions, "
            "such as headless-ad, acts in others)"
        )

    def describe(self) -> EvaluationSettings:
        return self.setup.settings(
            self.name,
            in_context_episodes=self.setup.episodes,
            tasks=self.setup.tasks,
            task_ids=self.task_ids,
            env_seed=evaluation_seed(self.setup.seed, 0),
        )

    def evaluate(self, baseline: Any, step: int) -> list[dict[str, Any]]:
        env = self.make_env()
        options = PolicyOptions(
            task_ids=np.asarray(self.task_ids, dtype=np.int64),
            deterministic=self.setup.deterministic,
            row_labels=tuple(f"{self.setup.tasks} task {task_id}" for task_id in self.task_ids),
            num_actions=np.full(env.num_envs, env.num_actions, dtype=np.int64),
        )
        policy = baseline.policy(options)
        results = run_in_context(policy, env, self.setup.episodes)
        optimal = np.asarray(env.optimal_returns, dtype=np.float64)
        known = bool(np.isfinite(optimal).all())  # XLand rulesets: the optimum is unknown, so is the regret
        curve = results.returns.mean(axis=0)
        best = optimal[:, None] if results.optimal_expected_returns is None else results.optimal_expected_returns
        regret = np.cumsum((best - results.expected_returns).mean(axis=0)) if known else None
        return [
            to_dict(
                EvaluationRecord(
                    step=step,
                    returns=results.returns[:, -1].tolist(),
                    lengths=results.lengths[:, -1].tolist(),
                    mean_return=float(curve[-1]),
                    in_context_returns=curve.tolist(),
                    optimal_return=float(optimal.mean()) if known else None,
                    tasks=self.setup.tasks,
                    task_returns=results.returns.tolist(),
                    regret=None if regret is None else float(regret[-1]),
                    in_context_regret=None if regret is None else regret.tolist(),
                    policy_usage=policy.usage() if callable(getattr(policy, "usage", None)) else None,
                )
            )
        ]

    def score_metric(self, evaluations: list[dict[str, Any]]) -> str:
        return "regret" if self.make_env().horizon == 1 else "mean_return"


PROTOCOLS: dict[str, Callable[[EvaluationSetup], EvaluationProtocol]] = {
    protocol.name: protocol for protocol in (SingleTask, MultiTask, InContext)
}

ACTION_MODES = {"greedy": True, "sampled": False}  # `offbench evaluate --actions` -> EvaluationSetup.deterministic


def with_overrides(
    setup: EvaluationSetup, episodes: int | None = None, tasks: str | None = None, actions: str | None = None
) -> EvaluationSetup:
    """`offbench evaluate`'s --episodes / --tasks / --actions on a run's own setup (--tasks is for in-context runs only)."""
    if tasks is not None and protocol_name(setup.card) != "in-context":
        raise OffbenchError(f"--tasks applies to in-context evaluation; this run is evaluated {protocol_name(setup.card)}")
    if actions is not None and actions not in ACTION_MODES:
        raise OffbenchError(f"--actions must be one of {', '.join(ACTION_MODES)}, got {actions!r}")
    return replace(
        setup,
        episodes=setup.episodes if episodes is None else episodes,
        tasks=tasks or setup.tasks,
        deterministic=setup.deterministic if actions is None else ACTION_MODES[actions],
    )
