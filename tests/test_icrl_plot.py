"""The learning-history plot: right numbers behind it, a real PNG out."""

import numpy as np
import pytest
from helpers import make_store

from offbench.errors import OffbenchError
from offbench.generators.histories import HistoryRecipe, run_histories
from offbench.plotting.histories import learning_curve, learning_histories_figure, plot_learning_histories


def test_learning_curve_and_plot(tmp_path):
    store, summary = run_histories(
        HistoryRecipe.from_params("darkroom", {"tasks": 4, "held_out": 1, "histories_per_task": 3, "episodes": 60}), 0
    )
    episodes, mean, half_width, histories = learning_curve(store)
    returns = store.episode_returns().reshape(9, 60)  # histories x episodes
    np.testing.assert_allclose(mean, returns.mean(axis=0))
    np.testing.assert_allclose(half_width, 1.96 * returns.std(axis=0, ddof=1) / 3)
    assert histories == 9 and episodes.tolist() == list(range(60))
    [optimal] = [line for line in learning_histories_figure(store).axes[0].lines if line.get_label().startswith("optimal return")]
    assert optimal.get_ydata()[0] == summary["optimal_return"]  # what the generator recorded in the card
    out = plot_learning_histories(store, tmp_path / "curve.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 10_000


def test_plot_refuses_a_dataset_without_learning_histories(tmp_path):
    with pytest.raises(OffbenchError, match="not a learning-history dataset"):
        plot_learning_histories(make_store(), tmp_path / "x.png")
    assert not (tmp_path / "x.png").exists()
