"""Learning histories on contextual bandits (offbench.envs.contextual_bandits): LinUCB or linear Thompson sampling
run on every training task at once, one row per history, every pull kept.

Both learners keep, per row and arm, a Gaussian posterior over theta_a from that arm's pulls (Bayesian ridge
regression, updated one pull at a time with the Sherman-Morrison formula):

    covariance C_a = (I / prior_variance + sum x x^T / noise_variance)^-1      mean mu_a = C_a sum r x / noise_variance

- LinUCB (Li et al. 2010, the disjoint model, their Algorithm 1): ridge regression per arm (prior_variance =
  1 / ridge, noise_variance = 1), then the arm maximising mu_a . x + alpha sqrt(x^T C_a x). Ties (the untried arms
  at the start) go to the lowest arm index.
- Linear Thompson sampling (Agrawal & Goyal 2013) with one parameter vector per arm and known noise (the task's
  sigma): it draws theta_a ~ N(mu_a, v^2 C_a) for every arm and pulls the best against x. Only theta_a . x
  decides, and per arm it is N(mu_a . x, v^2 x^T C_a x), so that scalar is what is drawn (the same distribution
  of pulls, K normals a pull instead of K d-dimensional ones). v = 1 (`posterior_scale`) is exact posterior
  sampling; Agrawal & Goyal's larger v is what their regret bound needs.

The dataset has the columns of offbench.generators.histories (history_id, task_id, episode_in_history, and
optimal_action: the best arm for the step's context), written with the native store writer. The learning check is
histories.py's rule on regret per pull (max_a theta_a . x_t - theta_{a_t} . x_t, each pull against its own
context): a history improved if its last tenth of pulls closed at least 10% of its first tenth's regret. Judged on
rewards instead, a window's mean would move with the contexts it happened to draw. The card's `learning` also
keeps histories.py's reward fields (score: the pulled arm's theta . x; optimal_return: E_x max_a theta_a . x).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from offbench.data.store import write_native
from offbench.envs.benchmarks import CONTEXTUAL_ALGOS, CONTEXTUAL_BENCHMARKS, Benchmark, get_benchmark, split_tasks
from offbench.envs.contextual_bandits import expected_best_reward
from offbench.generators import register_generator
from offbench.generators.histories import MIN_GAP_CLOSED, check_learning, learning_summary, learning_windows
from offbench.records import Invalid, from_dict, ranged, to_dict
from offbench.utils import progress_bar


class ArmPosteriors:
    """Per row and arm: the covariance C_a and the sum r x / noise_variance of its pulls (module docstring)."""

    def __init__(self, rows: int, arms: int, dim: int, prior_variance: float, noise_variance: float):
        self.covariance = np.broadcast_to(np.eye(dim) * prior_variance, (rows, arms, dim, dim)).copy()
        self.weighted_sums = np.zeros((rows, arms, dim))
        self.noise_variance = noise_variance
        self.rows = np.arange(rows)

    def mean_and_spread(self, contexts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(rows, arms) each: mu_a . x and sqrt(x^T C_a x) for every row's context."""
        x = contexts.astype(np.float64)
        means = np.einsum("radk,rak,rd->ra", self.covariance, self.weighted_sums, x)
        spreads = np.sqrt(np.einsum("radk,rd,rk->ra", self.covariance, x, x))
        return means, spreads

    def update(self, contexts: np.ndarray, actions: np.ndarray, rewards: np.ndarray) -> None:
        """One pull per row: the pulled arm's posterior takes it in (Sherman-Morrison)."""
        x = contexts.astype(np.float64)
        pulled = self.covariance[self.rows, actions]
        cx = np.einsum("rdk,rk->rd", pulled, x)
        denominator = self.noise_variance + np.einsum("rd,rd->r", cx, x)
        self.covariance[self.rows, actions] = pulled - np.einsum("rd,rk->rdk", cx, cx) / denominator[:, None, None]
        self.weighted_sums[self.rows, actions] += (rewards.astype(np.float64) / self.noise_variance)[:, None] * x


class LinUCB:
    """LinUCB, disjoint model (module docstring)."""

    @dataclass(frozen=True)
    class Config:
        alpha: float = ranged(1.0, ge=0, doc="width of the confidence bonus")
        ridge: float = ranged(1.0, gt=0, doc="ridge penalty (Li et al.'s A_a starts at ridge * I)")

    def __init__(self, env, rng: np.random.Generator, config: LinUCB.Config):
        self.config = config
        self.posteriors = ArmPosteriors(env.num_envs, env.num_actions, env.context_dim, 1.0 / config.ridge, 1.0)

    def act(self, contexts: np.ndarray) -> np.ndarray:
        means, spreads = self.posteriors.mean_and_spread(contexts)
        return np.argmax(means + self.config.alpha * spreads, axis=1)

    def update(self, contexts: np.ndarray, actions: np.ndarray, rewards: np.ndarray) -> None:
        self.posteriors.update(contexts, actions, rewards)


class LinearThompson:
    """Linear Thompson sampling, one Gaussian posterior per arm, the task's noise known (module docstring)."""

    @dataclass(frozen=True)
    class Config:
        prior_variance: float = ranged(1.0, gt=0, doc="variance of the N(0, prior_variance I) prior on each arm's vector")
        posterior_scale: float = ranged(1.0, ge=0, doc="v: draws from N(mu, v^2 C); 1 is the posterior itself")

    def __init__(self, env, rng: np.random.Generator, config: LinearThompson.Config):
        self.config, self.rng = config, rng
        self.posteriors = ArmPosteriors(env.num_envs, env.num_actions, env.context_dim, config.prior_variance, env.sigma**2)

    def act(self, contexts: np.ndarray) -> np.ndarray:
        means, spreads = self.posteriors.mean_and_spread(contexts)
        return np.argmax(means + self.config.posterior_scale * spreads * self.rng.standard_normal(means.shape), axis=1)

    def update(self, contexts: np.ndarray, actions: np.ndarray, rewards: np.ndarray) -> None:
        self.posteriors.update(contexts, actions, rewards)


ALGORITHMS = {"linucb": LinUCB, "linear-thompson": LinearThompson}  # the names of benchmarks.CONTEXTUAL_ALGOS


@dataclass(frozen=True)
class ContextualRecipe:
    """A contextual-bandit learning-history dataset: a card's `source.recipe.params`."""

    tasks: int = ranged(ge=2, doc="training and held-out tasks together")
    held_out: int = ranged(ge=0, doc="tasks kept out of the data for in-context evaluation")
    algo: str = ranged("linucb", choices=CONTEXTUAL_ALGOS, doc="source algorithm")
    histories_per_task: int = ranged(1, ge=1, doc="learning histories per training task")
    episodes: int | None = ranged(None, ge=1, doc="pulls per history (default: the benchmark's horizon)")
    split_seed: int = ranged(0, ge=0, doc="seed of the train / held-out task draw")
    allow_unlearned: bool = ranged(False, doc="keep a dataset whose histories mostly did not improve")
    hyperparameters: dict[str, float] = ranged(default_factory=dict, doc="the source algorithm's Config by name")

    def check(self) -> None:
        if self.held_out >= self.tasks:
            raise Invalid(f"'held_out' must be below 'tasks' ({self.tasks}): at least one training task is needed, got {self.held_out}")


def read_recipe(benchmark: str, params: dict[str, Any]) -> tuple[ContextualRecipe, Any]:
    """The recipe and its algorithm's Config, or one line naming the bad parameter."""
    recipe = from_dict(ContextualRecipe, params, f"{benchmark} recipe")
    config = from_dict(ALGORITHMS[recipe.algo].Config, recipe.hyperparameters, f"{benchmark} recipe {recipe.algo} hyperparameters")
    return recipe, config


@dataclass
class Histories:
    """Every pull of every history, (histories, pulls, ...) arrays, history-major as the dataset stores them."""

    contexts: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    expected_rewards: np.ndarray  # theta_{a_t} . x_t
    optimal_expected_rewards: np.ndarray  # max_a theta_a . x_t
    optimal_actions: np.ndarray
    row_task: np.ndarray = field(repr=False)

    @property
    def regret(self) -> np.ndarray:
        return self.optimal_expected_rewards - self.expected_rewards


def run_histories(bench: Benchmark, recipe: ContextualRecipe, config: Any, train: list[dict], seed: int, quiet: bool = True) -> Histories:
    """Run the source algorithm on `histories_per_task` rows per training task; the environment (contexts, reward
    noise) and the algorithm draw from two generators spawned from `seed`."""
    env_seed, algo_seed = np.random.SeedSequence(seed).spawn(2)
    row_task = np.repeat(np.arange(len(train), dtype=np.int32), recipe.histories_per_task)
    env = bench.make_batch([train[i] for i in row_task], seed=env_seed)
    learner = ALGORITHMS[recipe.algo](env, np.random.default_rng(algo_seed), config)
    pulls = recipe.episodes or bench.default_episodes
    with progress_bar(quiet, f"{bench.name} {recipe.algo}", pulls, unit="pulls") as advance:
        return play(env, learner, pulls, row_task, advance)


def play(env, learner, pulls: int, row_task: np.ndarray, advance: Callable[[int], Any] = lambda _: None) -> Histories:
    """`pulls` pulls of `learner` on every row of a contextual bandit batch (row k plays task row_task[k]), every
    pull recorded; `advance(1)` after each (a progress bar). The generators' histories and the regret figure's
    references (offbench.generators.references) are both this loop."""
    rows = np.arange(env.num_envs)
    shape, action_dtype = (env.num_envs, pulls), np.min_scalar_type(env.num_actions - 1)
    out = Histories(
        np.empty((*shape, env.context_dim), np.float32),
        np.empty(shape, action_dtype),
        np.empty(shape, np.float32),
        np.empty(shape),
        np.empty(shape),
        np.empty(shape, action_dtype),
        row_task,
    )
    contexts = env.reset()
    for t in range(pulls):
        actions = learner.act(contexts)
        out.contexts[:, t], out.actions[:, t] = contexts, actions
        out.optimal_actions[:, t], out.optimal_expected_rewards[:, t] = env.optimal_actions(), env.optimal_expected_rewards()
        _, rewards, _, _ = env.step(actions)
        out.rewards[:, t], out.expected_rewards[:, t] = rewards, env.expected_rewards(rows, actions, rewards)
        learner.update(contexts, actions, rewards)
        contexts = env.reset()
        advance(1)
    return out


def contextual_learning_summary(histories: Histories, optimal_returns: np.ndarray, score_name: str) -> dict[str, Any]:
    """histories.py's learning summary of the pulled arms' theta . x, with improvement judged on regret per pull
    (module docstring) and the first and last windows' mean regret per pull added."""
    hit = (histories.actions == histories.optimal_actions).astype(np.float64)
    summary = learning_summary(learning_windows(histories.expected_rewards, hit), optimal_returns, histories.actions.shape[1], score_name)
    first_regret, last_regret = learning_windows(histories.regret, hit)[:, :2].T
    improved = (first_regret - last_regret) >= MIN_GAP_CLOSED * first_regret
    summary.update(
        improvement="regret per pull",
        histories_improved=int(improved.sum()),
        unimproved_history_ids=np.flatnonzero(~improved).tolist(),
        first_regret_per_pull=float(first_regret.mean()),
        last_regret_per_pull=float(last_regret.mean()),
    )
    return summary


def dataset_arrays(histories: Histories) -> dict[str, list[np.ndarray]]:
    """The native layout's arrays (one part each): a pull is a one-step episode that terminates, and its final
    observation is the context it was pulled in (what the environment's step returns)."""
    num, pulls = histories.actions.shape
    steps = num * pulls
    contexts = histories.contexts.reshape(steps, -1)
    arrays = {
        "observations": contexts,
        "final_observations": contexts,
        "actions": histories.actions.reshape(steps),
        "rewards": histories.rewards.reshape(steps),
        "terminations": np.ones(steps, bool),
        "truncations": np.zeros(steps, bool),
        "episode_starts": np.arange(steps + 1, dtype=np.int64),
        "columns/history_id": np.repeat(np.arange(num, dtype=np.int32), pulls),
        "columns/task_id": np.repeat(histories.row_task, pulls),
        "columns/episode_in_history": np.tile(np.arange(pulls, dtype=np.int32), num),
        "columns/optimal_action": histories.optimal_actions.reshape(steps),
    }
    return {name: [array] for name, array in arrays.items()}


def dataset_id(benchmark: str, recipe: ContextualRecipe, seed: int) -> str:
    """A readable id that changes whenever the data would (as histories.py's)."""
    parts = [benchmark, recipe.algo, f"t{recipe.tasks}", f"ho{recipe.held_out}", f"h{recipe.histories_per_task}"]
    parts += [f"e{recipe.episodes}"] if recipe.episodes else []
    parts += [f"split{recipe.split_seed}"] if recipe.split_seed else []
    if recipe.hyperparameters:
        parts.append(hashlib.sha256(json.dumps(recipe.hyperparameters, sort_keys=True).encode()).hexdigest()[:8])
    return "generated/" + "-".join(parts) + f"-s{seed}"


def generate(benchmark: str, params: dict[str, Any], seed: int, out: Path, quiet: bool = False) -> Path:
    """Registered generator: validate, run, check learning, write `out` atomically with its card."""
    recipe, config = read_recipe(benchmark, params)
    bench = get_benchmark(benchmark)
    train, held_out = split_tasks(bench, recipe.tasks, recipe.held_out, recipe.split_seed)
    histories = run_histories(bench, recipe, config, train, seed, quiet)
    optimal = expected_best_reward(np.array([task["thetas"] for task in train]))[histories.row_task]
    summary = contextual_learning_summary(histories, optimal, bench.batch_class.score_name)
    check_learning(summary, recipe.allow_unlearned)
    card = {
        "id": dataset_id(benchmark, recipe, seed),
        "description": (
            f"{bench.summary}. {recipe.algo} learning histories: {len(train)} training tasks x "
            f"{recipe.histories_per_task} histories x {histories.actions.shape[1]} pulls, {len(held_out)} held-out tasks."
        ),
        "format": "offbench",
        "kind": "learning-history",
        "license": "CC0-1.0",
        "source": {"recipe": {"generator": benchmark, "seed": seed, "params": to_dict(recipe)}},
        "env": {"suite": "offbench", "id": bench.env_id},
        "split": {"seed": recipe.split_seed, "train": train, "held_out": held_out},
        "learning": summary,
    }
    one = bench.make_batch(train[:1])
    return write_native(out, dataset_arrays(histories), card, one.single_observation_space, one.single_action_space)


for _name in CONTEXTUAL_BENCHMARKS:
    register_generator(_name)(partial(generate, _name))
