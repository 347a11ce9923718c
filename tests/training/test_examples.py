"""The examples in examples/ run as a user runs them (a subprocess, tiny settings) and their runs are what a
leaderboard admits: TD3+BC (own code, replayed and verified, reproducible) and the Dark Room heuristic (a black
box, shown unverified, improving in context)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import tomllib

import pytest
import tomli_w
from run_dirs import REPO_ROOT

from offbench.tracking.read_run import read_run

EXAMPLES = REPO_ROOT / "examples"
TD3_BC_TINY = ["--steps", "20", "--eval-every", "10", "--episodes", "2", "--log-every", "5"]


def run_examples(script: str, *arg_lists: list) -> list[str]:
    """Run the example once per argument list, all at once (as a user would, in a subprocess); their outputs."""
    processes = [
        subprocess.Popen(
            [sys.executable, str(EXAMPLES / script), *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for args in arg_lists
    ]
    outputs = [process.communicate(timeout=300) for process in processes]
    for process, (_, stderr) in zip(processes, outputs):
        assert process.returncode == 0, stderr
    return [stdout for stdout, _ in outputs]


def temporary_board(tmp_path, monkeypatch, name: str, **changes):
    """The repository's benchmark `name` with `changes` over its spec, in a leaderboards folder of its own."""
    from offbench.leaderboard.spec import load_spec, without_pins

    # checked against the data generated here (run_dirs.pendulum_board says why)
    spec = without_pins(tomllib.loads((REPO_ROOT / "leaderboards" / name / "benchmark.toml").read_text()))
    spec.update(min_seeds=2, bootstrap_reps=100, **changes)
    root = tmp_path / "leaderboards"
    (root / name).mkdir(parents=True)
    (root / name / "benchmark.toml").write_text(tomli_w.dumps(spec))
    monkeypatch.setenv("OFFBENCH_LEADERBOARDS", str(root))
    return load_spec(name)


def submit(spec, runs, **options):
    from offbench.leaderboard.submit import submit as submit_runs

    return [json.loads(path.read_text()) for path in submit_runs(spec, runs, render=False, **options)]


def test_td3_bc_trains_reproducibly_and_its_runs_are_verified(pendulum, tmp_path, monkeypatch):
    board = temporary_board(tmp_path, monkeypatch, "pendulum-scripted", evaluation={"episodes": 2, "every_steps": 10, "steps": 20})
    runs = tmp_path / "runs"
    run_examples(
        "td3_bc.py",
        *(
            ["--dataset", "pendulum-scripted", "--seed", seed, *TD3_BC_TINY, "--out", runs, "--name", name, *flags]
            for seed, name, flags in (
                (0, "s0", []),
                (1, "s1", []),
                (0, "s0-again", []),
                (0, "s0-loose", ["--alpha", 10, "--discount", 0.999]),
            )
        ),
    )

    record = read_run(runs / "s0")  # every rule of the trainer's run directories holds
    assert [line["step"] for line in record.evaluations] == [10, 20]
    assert record.info["method"]["kind"] == "own-code" and record.info["method"]["load"]["qualname"] == "build_policy"
    metrics = [json.loads(line) for line in (runs / "s0" / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [5, 10, 15, 20]
    assert all(math.isfinite(m[key]) for m in metrics for key in ("critic_loss", "actor_loss", "bc_loss", "q_mean"))
    assert len({m["critic_loss"] for m in metrics}) == len(metrics)  # the critic learns
    assert (runs / "s0" / "evaluations.jsonl").read_bytes() == (runs / "s0-again" / "evaluations.jsonl").read_bytes()
    loose = read_run(runs / "s0-loose")  # the flags reach the update and the recorded config
    assert (loose.info["config"]["alpha"], loose.info["config"]["discount"]) == (10, 0.999)
    assert (record.info["config"]["alpha"], record.info["config"]["discount"]) == (2.5, 0.99)
    assert (runs / "s0-loose" / "metrics.jsonl").read_bytes() != (runs / "s0" / "metrics.jsonl").read_bytes()

    [entry] = submit(board, [runs / "s0", runs / "s1"], verify=True)
    assert entry["method"]["kind"] == "own-code" and entry["label"] == "td3-bc"
    assert [run["verification"]["status"] for run in entry["runs"]] == ["verified", "verified"]


def test_the_darkroom_heuristic_improves_in_context_and_is_a_black_box_entry(darkroom, tmp_path, monkeypatch):
    board = temporary_board(
        tmp_path, monkeypatch, "darkroom", datasets=["darkroom-small"], dataset_checksums={}, evaluation={"in_context_episodes": 10}
    )
    runs = [tmp_path / "runs" / f"heuristic-s{seed}" for seed in (0, 1)]
    printed = run_examples(
        "darkroom_heuristic.py",
        *(["--dataset", "darkroom-small", "--seed", seed, "--episodes", 10, "--out", run] for seed, run in enumerate(runs)),
    )
    assert all("in-context return per episode" in text for text in printed)

    curves = [read_run(run).evaluations[-1]["in_context_returns"] for run in runs]
    for curve in curves:
        assert len(curve) == 10 and curve[-1] > curve[0]
    assert curves[0] != curves[1]  # the seed draws the search order
    [entry] = submit(board, runs, verify=True)
    assert entry["method"]["kind"] == "black-box" and entry["baseline"] == "sweep-heuristic"
    assert {run["verification"]["status"] for run in entry["runs"]} == {"unverified"}


@pytest.mark.parametrize("script", ["td3_bc.py", "darkroom_heuristic.py"])
def test_importing_an_example_runs_nothing(script, tmp_path, monkeypatch):
    """A leaderboard's replay imports the script from its file: only `__main__` trains or evaluates."""
    monkeypatch.chdir(tmp_path)
    done = subprocess.run(
        [sys.executable, "-c", f"import runpy; runpy.run_path({str(EXAMPLES / script)!r}, run_name='replayed')"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "" and list(tmp_path.iterdir()) == []
