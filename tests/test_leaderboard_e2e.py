"""End to end: two tiny real training runs (BC on pendulum-scripted, seeds 0 and 1) submitted and rolled up."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from run_dirs import pendulum_board

TINY = ["--steps", "20", "--set", "eval_every=10", "--set", "eval_episodes=1", "--set", "log_every=10", "--set", "checkpoint_every=20"]


def test_real_runs_are_submitted_and_rolled_up(tmp_path, monkeypatch, run_cli):
    # The repository's pendulum-scripted benchmark, with a protocol and seed count that two tiny runs meet.
    root = pendulum_board(tmp_path, monkeypatch, min_seeds=2, evaluation={"episodes": 1, "every_steps": 10, "steps": 20})

    run_cli("download", "pendulum-scripted", check=True)  # generate once, before the runs start in parallel
    runs = tmp_path / "runs"
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "offbench",
                "run",
                "baseline",
                "bc",
                "--dataset",
                "pendulum-scripted",
                "--seed",
                str(seed),
                "--out",
                str(runs),
                "--name",
                f"bc-s{seed}",
                *TINY,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for seed in (0, 1)
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err

    # Submitted and rolled up in this process (the CLI paths are covered in test_leaderboard.py).
    from offbench.leaderboard.render import build_board
    from offbench.leaderboard.spec import load_spec
    from offbench.leaderboard.submit import submit
    from offbench.leaderboard.table import compute_results
    from offbench.tracking.read_run import expand_run_dirs

    spec = load_spec("pendulum-scripted")
    submit(spec, expand_run_dirs([runs]), render=False)
    results = compute_results(build_board(spec))

    finals = [json.loads((runs / f"bc-s{seed}" / "summary.json").read_text())["final"]["normalized_score"] for seed in (0, 1)]
    [cell] = results.cells.to_dict(orient="records")
    assert (cell["label"], cell["dataset"], cell["seeds"]) == ("bc", "pendulum-scripted", 2)
    assert cell["mean"] == pytest.approx(np.mean(finals))
    [entry] = [json.loads(p.read_text()) for p in (root / "pendulum-scripted" / "entries").glob("*.json")]
    from offbench.data.cards import get_card
    from offbench.data.resolve import native_path
    from offbench.data.store import stored_checksum

    assert entry["dataset"]["content_sha256"] == stored_checksum(native_path(get_card("pendulum-scripted")))
    assert [r["curve"]["step"] for r in entry["runs"]] == [[10, 20], [10, 20]]
