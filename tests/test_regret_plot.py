"""Bandit regret curves: the reference algorithms' regret on given tasks (multi-armed and contextual bandits), and the
figure."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from offbench.generators.references import reference_regret
from offbench.plotting.regret import plot_regret, regret_figure

ENV = {"suite": "offbench", "id": "offbench/BernoulliBandit-v0"}


def test_reference_regret_orders_the_classic_algorithms():
    rng = np.random.default_rng(0)
    tasks = [{"means": row.tolist()} for row in rng.uniform(0, 1, (200, 10))]
    curves = reference_regret(ENV, tasks, pulls=100)
    assert set(curves) == {"UCB1", "Thompson sampling", "random"} and all(len(c) == 100 for c in curves.values())
    assert all(np.all(np.diff(c) >= 0) for c in curves.values())  # cumulative pseudo-regret never falls
    assert curves["Thompson sampling"][-1] < curves["UCB1"][-1] < curves["random"][-1]
    means = np.array([t["means"] for t in tasks])
    np.testing.assert_allclose(curves["random"][-1], 100 * np.mean(means.max(1) - means.mean(1)))


def test_regret_figure_is_written(tmp_path):
    pulls = np.arange(1, 21)
    frame = pd.DataFrame(
        [
            {"label": label, "dataset": "bandit-x", "seed": seed, "pull": p, "score": scale * np.log1p(p) + seed}
            for label, scale in (("ad", 2.0), ("dpt", 3.0))
            for seed in range(3)
            for p in pulls
        ]
    )
    out = plot_regret(
        frame, tmp_path / "regret.png", references={"bandit-x": {"random": 0.4 * pulls, "Thompson sampling": np.log1p(pulls)}}
    )
    assert out.exists() and out.stat().st_size > 10_000


def test_regret_panels_share_one_legend_with_the_references():
    """Five bandit datasets, two methods and two references: one figure legend listing each once, none per panel, and
    the suptitle clear of every panel's title and y-label."""
    pulls = np.arange(1, 11)
    datasets = [f"bandit-{i}" for i in range(5)]
    frame = pd.DataFrame(
        [
            {"label": label, "dataset": d, "seed": seed, "pull": p, "score": np.log1p(p) + seed}
            for d in datasets
            for label in ("ad", "dpt")
            for seed in range(3)
            for p in pulls
        ]
    )
    references = {d: {"random": 0.4 * pulls, "Thompson sampling": np.log1p(pulls)} for d in datasets}
    fig = regret_figure(frame, references, reps=50)
    axes = [ax for ax in fig.axes if ax.get_visible()]
    assert len(axes) == 5 and all(ax.get_legend() is None for ax in axes)
    [legend] = fig.legends
    assert [t.get_text() for t in legend.get_texts()] == ["ad (n=3)", "dpt (n=3)", "Thompson sampling", "random"]
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    top = fig._suptitle.get_window_extent(renderer)
    for ax in axes:
        for text in (ax.title, ax.yaxis.label):
            assert not top.overlaps(text.get_window_extent(renderer))


def test_card_references_run_on_the_tasks_the_runs_were_evaluated_on():
    """The plot command's references: a bandit card's held-out tasks by default, its training tasks for runs evaluated
    on them; any other card is refused in one line."""
    from offbench.data.cards import get_card
    from offbench.envs.benchmarks import card_tasks
    from offbench.errors import OffbenchError
    from offbench.generators.references import card_reference_regret

    card = get_card("bandit-small")
    train, held_out = card_tasks(card)
    for tasks, expected in (("held-out", held_out), ("train", train)):
        curves = card_reference_regret(card, tasks, pulls=5, run_seeds=[0])
        np.testing.assert_array_equal(curves["Thompson sampling"], reference_regret(dict(card.env), expected, 5)["Thompson sampling"])
    with pytest.raises(OffbenchError, match="regret curves are for bandit runs; 'darkroom' is not a bandit dataset"):
        card_reference_regret(get_card("darkroom"), "held-out", pulls=5, run_seeds=[0])


CONTEXTUAL = "contextual-bandit-linucb-small"


class _LinUCBPolicy:
    """LinUCB as an in-context policy (the protocol's act / observe), to play the evaluation's own contexts."""

    def __init__(self, env):
        from offbench.generators.contextual import LinUCB

        self.learner = LinUCB(env, np.random.default_rng(0), LinUCB.Config())

    def policy(self, options):
        return self

    def reset(self, n):
        pass

    def act(self, contexts):
        self.contexts, self.actions = contexts, self.learner.act(contexts)
        return self.actions

    def observe(self, rewards, done):
        self.learner.update(self.contexts, self.actions, rewards)


def test_contextual_references_face_the_contexts_the_evaluation_of_each_run_seed_drew():
    """LinUCB played by the in-context protocol of a run with seed 1 has the regret of the LinUCB reference for run
    seed 1 (the same contexts and reward noise); several run seeds average their curves."""
    from offbench.data.cards import get_card
    from offbench.evaluation.protocols import EvaluationSetup, InContext
    from offbench.generators.references import card_reference_regret

    card = get_card(CONTEXTUAL)
    evaluation = InContext(EvaluationSetup(card=card, seed=1, episodes=60, every_steps=1))
    played = evaluation.evaluate(_LinUCBPolicy(evaluation.make_env()), step=0)[0]["in_context_regret"]
    one, other, both = (card_reference_regret(card, "held-out", 60, run_seeds=seeds) for seeds in ([1], [0], [0, 1]))
    np.testing.assert_allclose(one["LinUCB"], played, rtol=1e-9)
    for name in ("LinUCB", "linear Thompson sampling", "random"):
        np.testing.assert_allclose(both[name], (one[name] + other[name]) / 2)


def test_contextual_references_learn_and_random_is_its_expectation():
    from offbench.data.cards import get_card
    from offbench.envs.benchmarks import card_tasks
    from offbench.envs.contextual_bandits import draw_contexts
    from offbench.generators.references import card_reference_regret

    card = get_card(CONTEXTUAL)
    curves = card_reference_regret(card, "held-out", 500, run_seeds=[0])
    assert set(curves) == {"LinUCB", "linear Thompson sampling", "random"} and all(len(c) == 500 for c in curves.values())
    assert all(np.all(np.diff(c) >= 0) for c in curves.values())  # each pull's regret against its own context is never negative
    assert curves["LinUCB"][-1] < curves["random"][-1] / 4 and curves["linear Thompson sampling"][-1] < curves["random"][-1] / 4
    thetas = np.array([task["thetas"] for task in card_tasks(card)[1]])
    means = np.einsum("tad,nd->tna", thetas, draw_contexts(np.random.default_rng(1), 100_000, thetas.shape[2]).astype(np.float64))
    assert curves["random"][-1] == pytest.approx(500 * float((means.max(axis=2) - means.mean(axis=2)).mean()), rel=0.05)


def test_the_regret_figure_of_a_contextual_ad_run_draws_the_contextual_references(run_cli, tmp_path, monkeypatch):
    """`offbench plot RUN --kind regret` on a tiny AD run on a contextual card: one panel with AD's curve and LinUCB,
    linear Thompson sampling and random beside it, each the reference computed for the run's seed."""
    import matplotlib.pyplot as plt
    from helpers import TRAINING_CONFIGS, read_jsonl

    from offbench import cli
    from offbench.data.cards import get_card
    from offbench.generators.references import card_reference_regret
    from offbench.plotting import regret

    proc = run_cli(
        "run",
        "baseline",
        "ad",
        "--dataset",
        CONTEXTUAL,
        "--config",
        TRAINING_CONFIGS / "ad-tiny.toml",
        "--set",
        "eval_episodes=20",
        "--seed",
        "2",
        "--out",
        tmp_path,
        "--name",
        "run",
    )
    assert proc.returncode == 0, proc.stderr
    drawn = []
    monkeypatch.setattr(regret, "save_figure", lambda fig, out: drawn.append(fig) or plt.close(fig) or out)
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["plot", str(tmp_path / "run"), "--kind", "regret", "--out", str(tmp_path / "regret.png"), "--reps", "50"])
    assert exit_info.value.code in (0, None)
    [fig] = drawn
    [ax] = [ax for ax in fig.axes if ax.get_visible()]
    lines = {line.get_label(): line.get_ydata() for line in ax.get_lines()}
    expected = card_reference_regret(get_card(CONTEXTUAL), "held-out", 20, run_seeds=[2])
    assert set(lines) == {"ad (n=1)", *expected} and ax.get_title() == CONTEXTUAL
    np.testing.assert_allclose(lines["ad (n=1)"], read_jsonl(tmp_path / "run" / "evaluations.jsonl")[-1]["in_context_regret"])
    for name, curve in expected.items():
        np.testing.assert_allclose(lines[name], curve)
    [legend] = fig.legends
    assert [t.get_text() for t in legend.get_texts()] == ["ad (n=1)", "LinUCB", "linear Thompson sampling", "random"]
