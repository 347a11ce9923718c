"""`offbench plot`: learning curves, in-context curves, aggregate plots, and the dataset -> learning-histories path."""

from __future__ import annotations

import itertools
import sys

import numpy as np
import pytest

from helpers import make_store
from run_dirs import write_benchmark, write_run

CHECKSUM = "a" * 64


def plot_now(sources, out, kind="auto", metric=None):
    from offbench.plotting.commands import plot

    plot(sources=[str(s) for s in sources], out=out, kind=kind, metric=metric, score="final", reps=100)
    return out


@pytest.fixture
def runs(tmp_path):
    folder = tmp_path / "runs"
    for baseline, level in (("bc", 30.0), ("iql", 60.0)):
        for seed in range(3):
            write_run(folder, baseline, "test/a", CHECKSUM, seed, [level / 4, level / 2, level + seed], every_steps=50)
    return folder


def test_runs_of_one_baseline_with_two_configs_are_two_curves(tmp_path):
    """Labels name the config values that tell a baseline's runs apart on one dataset, and nothing else."""
    from offbench.plotting.commands import run_labels
    from offbench.tracking.run_dir import read_run

    folder = tmp_path / "runs"
    for sampling in ("window", "shuffled"):
        for seed in range(2):
            write_run(folder, "dpt", "test/a", CHECKSUM, seed, [1.0], config={"context_sampling": sampling}, name=f"dpt-{sampling}-s{seed}")
    write_run(folder, "ad", "test/a", CHECKSUM, 0, [1.0], config={"context_sampling": "other"})
    write_run(folder, "dpt", "test/b", CHECKSUM, 0, [1.0], config={"context_sampling": "window", "lr": 1.0})
    runs = [read_run(path) for path in sorted(folder.iterdir())]
    labels = {run.path.name: label for run, label in zip(runs, run_labels(runs))}
    assert labels == {"ad-test-a-s0": "ad", "dpt-test-b-s0": "dpt",
                      **{f"dpt-{s}-s{seed}": f"dpt (context_sampling={s})" for s in ("window", "shuffled") for seed in range(2)}}
    svg = plot_now([folder], tmp_path / "curves.svg").read_text()
    assert "dpt (context_sampling=shuffled) (n=2)" in svg and "dpt (context_sampling=window) (n=2)" in svg


def test_plot_learning_curves_in_every_format(runs, tmp_path, run_cli):
    proc = run_cli("plot", runs, "-o", tmp_path / "curves.png")
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    svg = plot_now([runs], tmp_path / "curves.svg").read_text()
    for text in ("update step (gradient updates)", "normalised score", "bc (n=3)", "iql (n=3)"):
        assert text in svg
    assert plot_now([runs], tmp_path / "curves.pdf").read_bytes()[:5] == b"%PDF-"
    proc = run_cli("plot", runs, "-o", tmp_path / "curves.gif")
    assert proc.returncode == 2 and "unknown figure format" in proc.stderr


def test_aggregate_plots_via_rliable(runs, tmp_path):
    svg = plot_now([runs], tmp_path / "aggregate.svg", kind="aggregate").read_text()
    for text in ("IQM", "median", "final normalised score"):
        assert text in svg
    svg = plot_now([runs], tmp_path / "profile.svg", kind="profile").read_text()
    assert "fraction of runs with score" in svg and "threshold" in svg


def _history_dataset():
    """A learning-history dataset: 2 histories x 6 episodes whose returns grow with the episode index."""
    from offbench.data.cards import card_from_dict, write_card
    from offbench.data.resolve import native_path
    from offbench.paths import user_cards_dir

    counter = itertools.count()
    store = make_store(episode_lengths=(4,) * 12, terminal_last=(False,) * 12,
                       episode_in_history=lambda n: np.full(n, next(counter) % 6, np.int64))
    card = card_from_dict({"id": "test/histories", "description": "tiny histories", "format": "offbench",
                           "kind": "learning-history", "source": {"recipe": {"generator": "test"}}})
    write_card(card, user_cards_dir() / "test-histories.toml")
    store.save(native_path(card))
    return store


def test_in_context_curves_with_source_and_optimum(tmp_path):
    store = _history_dataset()
    folder = tmp_path / "icl"
    for seed in range(3):
        write_run(folder, "ad", "test/histories", store.content_sha256(), seed, [1.0, 2.0],
                  in_context=[2.0 + seed, 5.0, 8.0, 9.0], optimal_return=10.0)
    svg = plot_now([folder], tmp_path / "icl.svg").read_text()
    for text in ("in-context episode", "optimal return", "source algorithm", "ad (n=3)"):
        assert text in svg


def test_in_context_benchmark_accepts_in_context_runs(tmp_path, monkeypatch):
    from offbench.tracking.run_dir import Refused
    from offbench.leaderboard.spec import load_spec
    from offbench.leaderboard.submit import submit

    from offbench.baselines import BASELINES

    for name in ("ad", "dpt"):  # in-context baselines, registered or not yet in this checkout
        monkeypatch.setitem(BASELINES, name, f"offbench.baselines.{name}")
    store = _history_dataset()
    root = tmp_path / "leaderboards"
    monkeypatch.setenv("OFFBENCH_LEADERBOARDS", str(root))
    write_benchmark(root, "icl", ["test/histories"], metric="in_context_return",
                    evaluation={"episodes": 5, "in_context_episodes": 4})
    folder = tmp_path / "icl"
    runs = [write_run(folder, "ad", "test/histories", store.content_sha256(), seed, [1.0, 2.0],
                      in_context=[2.0, 5.0, 8.0, 9.0 + seed]) for seed in range(3)]
    [entry_path] = submit(load_spec("icl"), runs, render=True)
    assert '"in_context_returns"' in entry_path.read_text()
    figure = (root / "icl" / "figures" / "in_context.svg").read_text()
    assert "in-context episode" in figure and "source algorithm" in figure
    assert "figures/in_context.svg" in (root / "icl" / "README.md").read_text()
    short = [write_run(folder, "dpt", "test/histories", store.content_sha256(), seed, [1.0], in_context=[2.0, 5.0])
             for seed in range(3)]
    with pytest.raises(Refused, match=r"refused \(protocol\)"):
        submit(load_spec("icl"), short, render=False)


def test_plot_of_a_dataset_draws_its_learning_histories(tmp_path, monkeypatch):
    """Given a dataset instead of run directories, `offbench plot` draws the source algorithm's learning curve."""
    from offbench.errors import OffbenchError

    _history_dataset()
    out = plot_now(["test/histories"], tmp_path / "histories.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    monkeypatch.setitem(sys.modules, "offbench.plotting.histories", None)  # an installation without it
    with pytest.raises(OffbenchError, match="offbench.plotting.histories"):
        plot_now(["test/histories"], tmp_path / "again.png")

