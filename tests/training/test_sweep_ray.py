"""`offbench sweep --executor ray` on a real local Ray cluster (2 CPUs), shared by the tests of this module:
the same spec as the local executor, the same run directories, finished runs skipped on a re-run."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from helpers import TRAINING_CONFIGS as CONFIGS
from helpers import require_extra
from run_dirs import pendulum_board

from offbench.sweep.spec import load_sweep

ray = require_extra("ray", "ray")
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def ray_cluster(tmp_path_factory):
    """One 2-CPU cluster for the session. Ray 2.60 turns token auth on and writes ~/.ray/auth_token:
    auth off and a temporary HOME keep the tests away from the user's."""
    saved = {key: os.environ.get(key) for key in ("HOME", "RAY_AUTH_MODE", "PYTHONPATH")}
    os.environ["HOME"] = str(tmp_path_factory.mktemp("ray_home"))
    os.environ["RAY_AUTH_MODE"] = "disabled"
    os.environ["PYTHONPATH"] = os.pathsep.join([str(REPO), *(p for p in (saved["PYTHONPATH"] or "").split(os.pathsep) if p)])
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


def test_ray_executor_runs_the_spec_skips_finished_runs_and_submits(ray_cluster, pendulum, cli, tmp_path, monkeypatch):
    board = pendulum_board(tmp_path, monkeypatch) / "pendulum-scripted"
    spec = tmp_path / "spec.toml"
    spec.write_text(
        f'name = "t"\nbenchmark = "pendulum-scripted"\nbaselines = ["bc"]\nseeds = [0, 1, 2]\nconfig = "{CONFIGS / "bc-tiny.toml"}"\n'
    )
    args = ["sweep", spec, "--executor", "ray", "--runs", tmp_path / "runs", "--submit", "pendulum-scripted"]
    code, out, err = cli(*args)
    assert code == 0, err
    assert "2 at once, 1 thread(s) each" in err and "3 done (3 finished" in err
    for run in load_sweep(spec).expand():
        record = json.loads((tmp_path / "runs" / run.name / "run.json").read_text())
        assert record["seed"] == run.seed and record["evaluation"]["episodes"] == 10 and record["evaluation"]["every_steps"] == 1000
    (entry,) = [json.loads(p.read_text()) for p in (board / "entries").glob("*.json")]
    assert entry["label"] == "bc" and sorted(r["seed"] for r in entry["runs"]) == [0, 1, 2]

    code, _, err = cli(*args)
    assert code == 0 and "(0 finished" in err and "already on leaderboard pendulum-scripted" in err
    assert len(list((board / "entries").glob("*.json"))) == 1


def test_ray_executor_refuses_local_options(ray_cluster, cli, tmp_path):
    spec = tmp_path / "spec.toml"
    spec.write_text('baselines = ["bc"]\ndatasets = ["pendulum-scripted"]\nseeds = [0]\n')
    code, _, err = cli("sweep", spec, "--executor", "ray", "--workers", "2", "--runs", tmp_path / "runs")
    assert code == 2 and "--workers is for the local executor" in err
