"""`offbench info` on a card with reference scores: the episode returns as a spread, and the same spread on the
leaderboards' normalised scale, so a reader sees where the data's best episodes stand before comparing a score."""

from __future__ import annotations

import numpy as np
import pytest

import offbench
from offbench.cli import main
from offbench.data.cards import get_card


def test_info_gives_the_returns_spread_raw_and_normalised(isolated_home, capsys):
    store = offbench.load("pendulum-scripted")  # made on first use: seconds
    capsys.readouterr()
    with pytest.raises(SystemExit) as exited:
        main(["info", "pendulum-scripted"])
    assert exited.value.code in (0, None)
    shown = " ".join(capsys.readouterr().out.split())  # the table wraps long values: compare words
    returns = store.episode_returns()
    normalised = get_card("pendulum-scripted").normalise(returns)
    for name, values, digits in (("episode return", returns, 3), ("normalised return", normalised, 1)):
        p10, p50, p90 = np.percentile(values, [10, 50, 90])
        expected = (
            f"{name} mean {values.mean():.{digits}f} min {values.min():.{digits}f} "
            f"p10 / p50 / p90 {p10:.{digits}f} / {p50:.{digits}f} / {p90:.{digits}f} max {values.max():.{digits}f}"
        )
        assert expected in shown
    assert normalised.max() > 90 > normalised.min()  # noiseless episodes near the scripted reference, noisy ones far below
