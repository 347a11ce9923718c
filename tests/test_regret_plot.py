"""Bandit regret curves: the reference algorithms' regret on given tasks, and the figure."""

from __future__ import annotations

import numpy as np
import pandas as pd

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
    frame = pd.DataFrame([{"label": label, "dataset": "bandit-x", "seed": seed, "pull": p, "score": scale * np.log1p(p) + seed}
                          for label, scale in (("ad", 2.0), ("dpt", 3.0)) for seed in range(3) for p in pulls])
    out = plot_regret(frame, tmp_path / "regret.png", references={"bandit-x": {"random": 0.4 * pulls, "Thompson sampling": np.log1p(pulls)}})
    assert out.exists() and out.stat().st_size > 10_000


def test_regret_panels_share_one_legend_with_the_references():
    """Five bandit datasets, two methods and two references: one figure legend listing each once, none per panel, and
    the suptitle clear of every panel's title and y-label."""
    pulls = np.arange(1, 11)
    datasets = [f"bandit-{i}" for i in range(5)]
    frame = pd.DataFrame([{"label": label, "dataset": d, "seed": seed, "pull": p, "score": np.log1p(p) + seed}
                          for d in datasets for label in ("ad", "dpt") for seed in range(3) for p in pulls])
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
    import pytest

    from offbench.data.cards import get_card
    from offbench.envs.benchmarks import card_tasks
    from offbench.errors import OffbenchError
    from offbench.generators.references import card_reference_regret

    card = get_card("bandit-small")
    train, held_out = card_tasks(card)
    for tasks, expected in (("held-out", held_out), ("train", train)):
        curves = card_reference_regret(card, tasks, pulls=5)
        np.testing.assert_array_equal(curves["Thompson sampling"], reference_regret(dict(card.env), expected, 5)["Thompson sampling"])
    with pytest.raises(OffbenchError, match="regret curves are for bandit runs; 'darkroom' is not a bandit dataset"):
        card_reference_regret(get_card("darkroom"), "held-out", pulls=5)
