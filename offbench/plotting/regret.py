"""Bandit regret curves: the cumulative pseudo-regret per pull of in-context runs (AD, DPT), with the classic
bandit algorithms run on the same tasks as references (UCB1, Thompson sampling, uniform random).

Pseudo-regret of a pull = the best arm's mean minus the pulled arm's mean (the in-context protocol's
`in_context_regret` is its running sum, averaged over tasks). The references use the source algorithms that
generate the learning histories (`offbench.generators.sources`) with their default hyper-parameters; random's
curve is its exact expectation (best mean minus the mean over arms, every pull).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.ticker import MaxNLocator

from offbench.errors import OffbenchError
from offbench.plotting.curves import _draw_mean_band, _grid, _seed_matrix
from offbench.plotting.figures import label_colours, plt, save_figure

REFERENCES = {"UCB1": "ucb", "Thompson sampling": "thompson"}


def reference_pulls(env_spec: dict, tasks: list[dict], algo: str, pulls: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One history of `pulls` pulls per task by source algorithm `algo` (default hyper-parameters): the actions and
    rewards (tasks, pulls) and the mean pseudo-regret over tasks of each pull (pulls,)."""
    from offbench.envs.benchmarks import make_batch_env
    from offbench.generators.sources import ALGORITHMS, RowStreams, make_config

    # The environment's rewards and the algorithm's draws come from independent streams, as in the generators
    # (one integer seeding both made them one stream; 20 seeds of Thompson sampling showed no bias either way).
    env_seed, algo_seed = np.random.SeedSequence(seed).spawn(2)
    env = make_batch_env(env_spec, tasks, seed=int(env_seed.generate_state(1)[0]))
    streams = RowStreams([np.random.default_rng(algo_seed)], [env.num_envs])
    learner = ALGORITHMS[algo](env, pulls, streams, make_config(algo, {}))
    rows = np.arange(env.num_envs)
    actions, rewards, regret = np.zeros((env.num_envs, pulls), np.int64), np.zeros((env.num_envs, pulls)), np.zeros(pulls)
    env.reset()
    for pull in range(pulls):
        actions[:, pull] = learner.act(env.state_index(), np.full(env.num_envs, pull))
        _, rewards[:, pull], terminated, _ = env.step(actions[:, pull])
        regret[pull] = np.mean(env.optimal_returns - env.expected_rewards(rows, actions[:, pull], rewards[:, pull]))
        learner.update(rows * env.num_actions + actions[:, pull], rewards[:, pull], env.state_index(), terminated)  # one state per row
        env.reset()
    return actions, rewards, regret


def reference_regret(env_spec: dict, tasks: list[dict], pulls: int, seed: int = 0, histories: int = 10) -> dict[str, np.ndarray]:
    """Mean over `tasks` and `histories` histories per task (seeds seed .. seed + histories - 1) of the cumulative
    pseudo-regret after each of `pulls` pulls, per reference algorithm. Several histories, because every ratio
    to Thompson sampling divides by this number: over 500 tasks one history's value at pull 100 has a standard deviation of
    0.15-0.2 (Thompson sampling on bandit-thompson-uniform, 20 seeds), ten histories' about 0.05."""
    curves = {name: np.cumsum(np.mean([reference_pulls(env_spec, tasks, algo, pulls, seed + k)[2] for k in range(histories)], axis=0))
              for name, algo in REFERENCES.items()}
    means = np.array([task["means"] for task in tasks], dtype=np.float64)
    curves["random"] = np.cumsum(np.full(pulls, np.mean(means.max(axis=1) - means.mean(axis=1))))
    return curves


def plot_regret(regret: pd.DataFrame, out: str | Path, references: dict[str, dict[str, np.ndarray]] | None = None,
                title: str = "", reps: int = 2000) -> Path:
    """Cumulative regret per pull (frame: label, dataset, seed, pull, score), mean over seeds with a 95% bootstrap
    band, one panel per dataset, with the reference algorithms' curves on the same tasks."""
    if regret.empty:
        raise OffbenchError("no in-context regret to plot (evaluations.jsonl has no in_context_regret: it needs the tasks' "
                            "optimal return, which XLand rulesets lack); plot the returns with --kind in-context")
    references = references or {}
    datasets = list(dict.fromkeys(regret["dataset"]))
    reference_names = sorted({name for curves in references.values() for name in curves})
    colours = label_colours(sorted(regret["label"].unique()) + reference_names)
    nrows, ncols = _grid(len(datasets))
    fig, axes = plt.subplots(nrows, ncols, figsize=(5.6 * ncols, 4.4 * nrows), squeeze=False)
    for ax, dataset in zip(axes.flat, datasets):
        for label, rows in regret[regret.dataset == dataset].groupby("label", sort=True):
            xs, matrix = _seed_matrix(rows, "pull", f"{label} on {dataset}")
            _draw_mean_band(ax, xs, matrix, colours[label], label, reps)
        for name, curve in sorted(references.get(dataset, {}).items()):
            ax.plot(np.arange(1, len(curve) + 1), curve, color=colours[name], linestyle="--", linewidth=1.2, label=name)
        ax.set_title(dataset, fontsize=10)
        ax.set_xlabel("pull (in-context episode, held-out tasks)")
        ax.set_ylabel("cumulative regret\n(best arm's mean - pulled arm's mean)", fontsize=8)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="upper left")
    for ax in list(axes.flat)[len(datasets):]:
        ax.set_visible(False)
    fig.suptitle(title or "Bandit regret: mean over tasks and seeds, shaded 95% bootstrap interval over seeds", fontsize=11)
    fig.tight_layout()
    return save_figure(fig, out)
