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
    from offbench.tracking.read_run import read_run

    folder = tmp_path / "runs"
    for sampling in ("window", "shuffled"):
        for seed in range(2):
            write_run(folder, "dpt", "test/a", CHECKSUM, seed, [1.0], config={"context_sampling": sampling}, name=f"dpt-{sampling}-s{seed}")
    write_run(folder, "ad", "test/a", CHECKSUM, 0, [1.0], config={"context_sampling": "other"})
    write_run(folder, "dpt", "test/b", CHECKSUM, 0, [1.0], config={"context_sampling": "window", "lr": 1.0})
    runs = [read_run(path) for path in sorted(folder.iterdir())]
    labels = {run.path.name: label for run, label in zip(runs, run_labels(runs))}
    assert labels == {
        "ad-test-a-s0": "ad",
        "dpt-test-b-s0": "dpt",
        **{f"dpt-{s}-s{seed}": f"dpt (context_sampling={s})" for s in ("window", "shuffled") for seed in range(2)},
    }
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


def _registered(store, dataset_id: str, kind: str, description: str):
    """`store` saved under a user card `dataset_id` of `kind`, so that commands find it by its id; returns it."""
    from offbench.data.cards import card_from_dict, write_card
    from offbench.data.resolve import native_path
    from offbench.paths import user_cards_dir

    fields = {"id": dataset_id, "description": description, "format": "offbench", "kind": kind, "source": {"recipe": {"generator": "test"}}}
    card = card_from_dict(fields)
    write_card(card, user_cards_dir() / f"{dataset_id.replace('/', '-')}.toml")
    store.save(native_path(card))
    return store


def _history_dataset():
    """A learning-history dataset: 2 histories x 6 episodes whose returns grow with the episode index."""
    counter = itertools.count()
    store = make_store(
        episode_lengths=(4,) * 12, terminal_last=(False,) * 12, episode_in_history=lambda n: np.full(n, next(counter) % 6, np.int64)
    )
    return _registered(store, "test/histories", "learning-history", "tiny histories")


def test_in_context_curves_with_source_and_optimum(tmp_path):
    store = _history_dataset()
    folder = tmp_path / "icl"
    for seed in range(3):
        write_run(
            folder,
            "ad",
            "test/histories",
            store.content_sha256(),
            seed,
            [1.0, 2.0],
            in_context=[2.0 + seed, 5.0, 8.0, 9.0],
            optimal_return=10.0,
        )
    svg = plot_now([folder], tmp_path / "icl.svg").read_text()
    for text in ("in-context episode", "optimal return", "source algorithm", "ad (n=3)"):
        assert text in svg


def test_in_context_benchmark_accepts_in_context_runs(tmp_path, monkeypatch):
    from offbench.baselines import BASELINES
    from offbench.leaderboard.spec import load_spec
    from offbench.leaderboard.submit import submit
    from offbench.tracking.read_run import Refused

    for name in ("ad", "dpt"):  # in-context baselines, registered or not yet in this checkout
        monkeypatch.setitem(BASELINES, name, f"offbench.baselines.{name}")
    store = _history_dataset()
    root = tmp_path / "leaderboards"
    monkeypatch.setenv("OFFBENCH_LEADERBOARDS", str(root))
    write_benchmark(root, "icl", ["test/histories"], metric="in_context_return", evaluation={"episodes": 5, "in_context_episodes": 4})
    folder = tmp_path / "icl"
    runs = [
        write_run(folder, "ad", "test/histories", store.content_sha256(), seed, [1.0, 2.0], in_context=[2.0, 5.0, 8.0, 9.0 + seed])
        for seed in range(3)
    ]
    [entry_path] = submit(load_spec("icl"), runs, render=True)
    assert '"in_context_returns"' in entry_path.read_text()
    figure = (root / "icl" / "figures" / "in_context.svg").read_text()
    assert "in-context episode" in figure and "source algorithm" in figure
    assert "figures/in_context.svg" in (root / "icl" / "README.md").read_text()
    short = [write_run(folder, "dpt", "test/histories", store.content_sha256(), seed, [1.0], in_context=[2.0, 5.0]) for seed in range(3)]
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


def _curves(labels, datasets=("test/a",), seeds=3, steps=(50, 100, 150)):
    import pandas as pd

    return pd.DataFrame(
        [
            {"label": label, "dataset": dataset, "seed": seed, "step": step, "score": i + seed + step / 100}
            for i, label in enumerate(labels)
            for dataset in datasets
            for seed in range(seeds)
            for step in steps
        ]
    )


def _caption(fig) -> str:
    """The suptitle as one line (it is wrapped to the figure's width)."""
    return " ".join(fig._suptitle.get_text().split())


def _bands(ax):
    from matplotlib.collections import PolyCollection

    return [c for c in ax.collections if isinstance(c, PolyCollection)]


def test_runs_with_one_evaluation_are_drawn_as_points_and_the_title_says_so():
    """A run evaluated once is one point per seed: a line through it draws nothing, so each row is a marker with its
    interval as an error bar, and the suptitle names it."""
    from offbench.plotting.curves import learning_curves_figure

    fig = learning_curves_figure(_curves(["bc", "iql"], steps=(1000,)), "normalised score", reps=50)
    [ax] = [ax for ax in fig.axes if ax.get_visible()]
    markers = [line for line in ax.lines if line.get_marker() == "o"]
    assert [line.get_ydata().tolist() for line in markers] == [[1 + 10.0], [2 + 10.0]]  # mean over seeds 0, 1, 2
    assert "a run with one evaluation is drawn as a point" in _caption(fig)


def test_one_seed_draws_no_band_and_claims_none():
    from offbench.plotting.curves import learning_curves_figure

    fig = learning_curves_figure(_curves(["bc"], seeds=1), "normalised score", reps=50)
    [ax] = [ax for ax in fig.axes if ax.get_visible()]
    assert not _bands(ax)
    assert "one seed, no band" in _caption(fig) and "bootstrap" not in _caption(fig)
    several = learning_curves_figure(_curves(["bc"], seeds=3), "normalised score", reps=50)
    assert _bands(several.axes[0]) and "shaded 95% bootstrap interval" in _caption(several)


def test_a_board_title_keeps_its_words_and_adds_what_differs():
    from offbench.plotting.curves import learning_curves_figure

    title = "Board: learning curves"
    assert learning_curves_figure(_curves(["bc"]), "score", title=title, reps=50)._suptitle.get_text() == title
    assert (
        learning_curves_figure(_curves(["bc"], seeds=1), "score", title=title, reps=50)._suptitle.get_text()
        == f"{title}\n(one seed, no band)"
    )


def test_eight_methods_on_six_datasets_share_one_legend():
    """MiniGrid's board: eight rows on six panels. One legend below the panels, no legend inside any panel."""
    from offbench.plotting.curves import learning_curves_figure

    labels = ["HarmoDT", "MOORE-BC", "MOORE-IQL", "MTBC", "MTDT", "MTIQL", "Prompt-DT", "MOORE-CQL"]
    fig = learning_curves_figure(_curves(labels, datasets=[f"minigrid/mt{i}" for i in range(6)]), "success rate", reps=20)
    panels = [ax for ax in fig.axes if ax.get_visible()]
    assert len(panels) == 6 and all(ax.get_legend() is None for ax in panels)
    [legend] = fig.legends
    assert [t.get_text() for t in legend.get_texts()] == [f"{label} (n=3)" for label in sorted(labels)]


def test_in_context_panels_share_one_legend_with_their_references():
    import pandas as pd

    from offbench.plotting.curves import in_context_figure

    frame = pd.DataFrame(
        [
            {"label": label, "dataset": dataset, "seed": seed, "episode": e, "score": e + seed}
            for label in ("ad", "dpt")
            for dataset in ("a", "b")
            for seed in range(2)
            for e in range(1, 5)
        ]
    )
    fig = in_context_figure(frame, optimum={"a": 9.0, "b": 9.0}, sources={"a": np.arange(8.0)}, reps=20)
    assert all(ax.get_legend() is None for ax in fig.axes)
    [legend] = fig.legends
    assert [t.get_text() for t in legend.get_texts()] == [
        "ad (n=2)",
        "dpt (n=2)",
        "source algorithm (its history)",
        "source algorithm, end of history (8 episodes)",
        "optimal return",
    ]


def _matrices(datasets, seeds=5):
    rng = np.random.default_rng(0)
    return {label: level + rng.normal(size=(seeds, datasets)) for label, level in (("bc", 30.0), ("iql", 60.0), ("cql", 45.0))}


def test_aggregate_rows_run_best_first_as_the_table():
    from offbench.plotting.aggregate import aggregate_intervals_figure

    fig = aggregate_intervals_figure(_matrices(3), "score", reps=50)
    assert [ax.get_title() for ax in fig.axes] == ["mean", "median", "IQM"]
    top_down = [t.get_text() for t in fig.axes[0].get_yticklabels()][::-1]  # rliable's first row is the bottom one
    assert top_down == ["iql", "cql", "bc"]
    lowest_first = aggregate_intervals_figure(_matrices(3), "regret", reps=50, lower_is_better=True)
    assert [t.get_text() for t in lowest_first.axes[0].get_yticklabels()][::-1] == ["bc", "cql", "iql"]


def test_identical_aggregate_panels_of_a_one_dataset_board_collapse():
    """On one dataset the median is the mean over seeds, and so is the IQM of three seeds: identical panels become one
    panel named by all of them; with five seeds the IQM trims and keeps its own panel."""
    from offbench.plotting.aggregate import aggregate_intervals_figure

    assert [ax.get_title() for ax in aggregate_intervals_figure(_matrices(1, seeds=3), "score", reps=50).axes] == ["mean = median = IQM"]
    assert [ax.get_title() for ax in aggregate_intervals_figure(_matrices(1, seeds=5), "score", reps=50).axes] == ["mean = median", "IQM"]


def test_plot_of_an_offline_dataset_draws_its_returns_and_lengths(tmp_path):
    """`offbench plot DATASET` of an offline card: the distribution of its episodes' returns and lengths."""
    from offbench.plotting.episodes import episodes_figure

    store = make_store(episode_lengths=(3, 5, 2, 5), terminal_last=(True, False, True, True))
    _registered(store, "test/offline", "offline", "tiny offline data")
    out = plot_now(["test/offline"], tmp_path / "episodes.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    fig = episodes_figure(store, {"id": "test/offline"})
    by_return, by_length = fig.axes
    assert sum(patch.get_height() for patch in by_return.patches) == 4
    assert sum(patch.get_height() for patch in by_length.patches) == 4
    assert by_return.get_xlabel().startswith("episode return") and by_length.get_xlabel().startswith("episode length")
    assert by_length.get_xlabel() == "episode length (steps; 2 to 5)"
    [mean, _] = by_return.lines
    assert mean.get_xdata()[0] == pytest.approx(store.episode_returns().mean())
    assert "4 episodes, 15 transitions" in _caption(fig)
