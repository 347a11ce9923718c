"""A method that is not ours: `offbench.evaluate` plays any policy under a card's protocol exactly as a
baseline is played, `offbench.track` records a user's own training loop in the trainer's run directory, and the
leaderboard admits both, replays what it can (`--verify`) and marks the rest unverified."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch
from run_dirs import pendulum_board
from tiny_runs import run_args

import offbench
from offbench.errors import OffbenchError
from offbench.tracking.read_run import Refused, read_run

TINY = ["--steps", "20", "--set", "eval_every=10", "--set", "eval_episodes=2", "--set", "log_every=10", "--set", "checkpoint_every=20"]


@pytest.fixture
def board(tmp_path, monkeypatch, pendulum):
    """The repository's pendulum-scripted benchmark with a protocol tiny runs meet (2 episodes, 2 seeds)."""
    pendulum_board(tmp_path, monkeypatch, min_seeds=2, evaluation={"episodes": 2, "every_steps": 10, "steps": 20})
    from offbench.leaderboard.spec import load_spec

    return load_spec("pendulum-scripted")


def submit(spec, runs, **options):
    from offbench.leaderboard.submit import submit as submit_runs

    return [json.loads(path.read_text()) for path in submit_runs(spec, runs, render=False, **options)]


def swing(observations):
    """A hand-written pendulum controller: push against the angular velocity."""
    return np.clip(-observations[:, 2:3], -2.0, 2.0).astype(np.float32)


# ------------------------------------------------------------------------------------------------ black box
def test_a_baselines_own_policy_scores_the_same_through_evaluate(cli, tmp_path, pendulum):
    """The public evaluate plays a policy exactly as the trainer's protocol does: same seeds, same batching."""
    from offbench.training.trainer import load_checkpoint, open_run

    code, _, err = cli("run", "baseline", "bc", "--dataset", "pendulum-scripted", "--seed", "3", "--out", tmp_path, "--name", "bc", *TINY)
    assert code == 0, err
    run = open_run(tmp_path / "bc")
    baseline = run.restored_baseline(load_checkpoint(run.run_dir, run.device))
    result = offbench.evaluate(baseline, "pendulum-scripted", seed=3, episodes=2)
    recorded = read_run(tmp_path / "bc").evaluations[-1]
    assert result.returns == recorded["returns"] and result.score == recorded["normalized_score"]
    assert (result.protocol, result.metric) == ("single-task", "normalized_score")
    frame = result.to_frame()
    assert list(frame["return"]) == recorded["returns"] and list(frame["length"]) == recorded["lengths"]


def test_a_black_box_run_is_submitted_and_shown_unverified(board, tmp_path, cli):
    runs = [tmp_path / "runs" / f"swing-s{seed}" for seed in (0, 1)]
    results = [offbench.evaluate(swing, "pendulum-scripted", seed=seed, episodes=2, out=run) for seed, run in enumerate(runs)]
    assert results[0].returns != results[1].returns  # the protocol's episode seeds follow the seed
    info = json.loads((runs[0] / "run.json").read_text())
    assert info["method"]["kind"] == "black-box" and info["method"]["source"]["script"] == "tests/training/test_your_method.py"
    assert info["baseline"] == "swing" and not (runs[0] / "checkpoints").exists()
    code, _, err = cli("evaluate", runs[0])  # offbench cannot rebuild a black box: one line, not a traceback
    assert code == 2 and "a black-box run of 'swing'" in err and "Traceback" not in err
    [entry] = submit(board, runs, verify=True)
    assert entry["method"]["kind"] == "black-box"
    assert {run["verification"]["status"] for run in entry["runs"]} == {"unverified"}
    from offbench.leaderboard.render import build_board
    from offbench.leaderboard.table import compute_results, main_table

    row = main_table(build_board(board), compute_results(build_board(board))).iloc[0]
    assert row["verified"] == "no" and row["method"].startswith("black box: ")


def test_a_copied_black_box_run_under_another_seed_is_a_duplicate(board, tmp_path):
    runs = [tmp_path / "runs" / f"swing-s{seed}" for seed in (0, 1)]
    for seed, run in enumerate(runs):
        offbench.evaluate(swing, "pendulum-scripted", seed=seed, episodes=2, out=run)
    copy = shutil.copytree(runs[0], tmp_path / "runs" / "swing-s2")
    for name in ("run.json",):
        info = json.loads((copy / name).read_text())
        info.update(seed=2, run_id="swing-s2")
        (copy / name).write_text(json.dumps(info))
    with pytest.raises(Refused, match=r"duplicate.*evaluations under another seed"):
        submit(board, [*runs, copy])


@pytest.mark.parametrize(
    "act, problem",
    [
        (
            lambda obs: np.zeros((len(obs), 2), np.float32),
            r"returned shape \(2, 2\) at episode 0 \(seed 10000\), step 0; expected \(2, 1\)",
        ),
        (
            lambda obs: np.full((len(obs), 1), 3.0, np.float32),
            r"action \[3.\] at episode 0 \(seed 10000\), step 0 is outside the action space",
        ),
        (lambda obs: np.where(obs[:, :1] > -9, np.nan, 0.0), r"returned \[nan\] \(not finite\) at episode 0"),
        (lambda obs: np.array(["left"] * len(obs)), r"returned dtype <U4"),
    ],
)
def test_a_policy_that_breaks_the_action_space_is_one_line_naming_episode_and_step(pendulum, tmp_path, act, problem):
    with pytest.raises(OffbenchError, match=problem) as error:
        offbench.evaluate(act, "pendulum-scripted", episodes=2, out=tmp_path / "run")
    assert "\n" not in str(error.value) and not (tmp_path / "run").exists()
    assert list(tmp_path.iterdir()) == []  # not even the staging folder


def test_a_policy_that_raises_midway_is_one_line_with_its_step(pendulum, tmp_path):
    calls = []

    def flaky(observations):
        calls.append(1)
        if len(calls) == 5:
            raise KeyError("state")
        return swing(observations)

    with pytest.raises(
        OffbenchError, match=r"policy 'flaky': act\(\) raised KeyError: 'state' at episode 0 \(seed 10000\), step 4 \(and 1 more rows\)"
    ):
        offbench.evaluate(flaky, "pendulum-scripted", episodes=2, out=tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_a_discrete_card_refuses_float_actions_and_plays_a_stateful_policy_in_context(darkroom):
    """Dark Room is evaluated in context: a Policy object keeps its memory across the episodes of each task."""

    class Sweep:
        """Tries each action for a whole episode, then keeps the best one: in-context improvement by hand."""

        def reset(self, num_envs):
            self.episode, self.returns, self.totals = np.zeros(num_envs, int), np.zeros((num_envs, 5)), np.zeros(num_envs)

        def act(self, observations):
            trying = np.minimum(self.episode, 5)
            return np.where(trying < 5, trying, self.returns.argmax(axis=1)).astype(np.int64)

        def observe(self, rewards, dones):
            self.totals += rewards
            for row in np.flatnonzero(dones):
                if self.episode[row] < 5:
                    self.returns[row, self.episode[row]] = self.totals[row]
                self.totals[row], self.episode[row] = 0.0, self.episode[row] + 1

    result = offbench.evaluate(Sweep(), "darkroom-small", episodes=7)
    assert result.protocol == "in-context" and len(result.in_context_returns) == 7
    assert result.in_context_returns[-1] >= max(result.in_context_returns[:5])  # it keeps its best action
    frame = result.to_frame()
    assert len(frame) == 7 * len(result.returns) and set(frame["episode"]) == set(range(7))
    with pytest.raises(
        OffbenchError, match=r"dtype float64 .*held-out task \d+, in-context episode 0, step 0; Discrete\(5\) takes integer actions"
    ):
        offbench.evaluate(lambda obs: np.zeros(len(obs)), "darkroom-small", episodes=2)


def test_a_callable_gets_the_rows_task_ids_on_multi_task_cards(multitask_home, monkeypatch):
    monkeypatch.setenv("OFFBENCH_HOME", str(multitask_home))
    seen = []

    def by_task(observations, task_ids):
        seen.append(np.array(task_ids))
        return np.asarray(task_ids, dtype=np.int64) % 3

    result = offbench.evaluate(by_task, "minigrid/tiny-near-optimal", episodes=2)
    tasks = list(result.per_task)
    assert sorted(set(np.concatenate(seen))) == list(range(len(tasks)))
    assert set(result.to_frame()["task"]) == set(tasks) and result.metric == "success_rate"


# ------------------------------------------------------------------------------------------------ own training loop
class LinearPolicy(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(3, 1)

    @torch.inference_mode()
    def __call__(self, observations):
        actions = self.layer(torch.as_tensor(observations, dtype=torch.float32))
        return actions.clamp(-2.0, 2.0).numpy()


def build_policy(state):
    """Rebuild the evaluated policy from a checkpoint's state (what a leaderboard replays)."""
    policy = LinearPolicy()
    policy.load_state_dict(state["policy"])
    return policy


def train_own_method(seed: int, out, steps: int = 20):
    torch.manual_seed(seed)
    with offbench.track(
        "linear-bc",
        dataset="pendulum-scripted",
        seed=seed,
        config={"lr": 1e-2, "steps": steps},
        out=out,
        name=f"linear-s{seed}",
        episodes=2,
        eval_every=10,
    ) as run:
        policy = LinearPolicy()
        optimiser = torch.optim.Adam(policy.parameters(), lr=1e-2)
        batches = run.sampler("transitions", batch_size=32)
        for step in range(1, steps + 1):
            batch = batches.sample()
            loss = ((policy.layer(batch["observations"]) - batch["actions"]) ** 2).mean()
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
            run.log(step, loss=loss.item())
            if step % 10 == 0:
                run.evaluate(step, policy)
        run.checkpoint(steps, {"policy": policy.state_dict()}, load=build_policy)
    return run


def test_an_own_training_loop_is_a_run_directory_the_leaderboard_verifies(board, tmp_path):
    runs = [train_own_method(seed, tmp_path / "runs").run_dir for seed in (0, 1)]
    record = read_run(runs[0])  # every rule of the trainer's run directories holds
    assert [line["step"] for line in record.evaluations] == [10, 20] and record.summary["steps"] == 20
    method = record.info["method"]
    assert method["kind"] == "own-code" and method["load"]["qualname"] == "build_policy"
    assert record.info["dataset"]["content_sha256"] == offbench.load("pendulum-scripted").content_sha256()
    metrics = [json.loads(line) for line in (runs[0] / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == list(range(1, 21))
    [entry] = submit(board, runs, verify=True)
    assert {run["verification"]["status"] for run in entry["runs"]} == {"verified"}
    assert entry["method"]["source"]["script"] == "tests/training/test_your_method.py"  # inside its repository


def test_verify_catches_a_tampered_return(board, tmp_path):
    runs = [train_own_method(seed, tmp_path / "runs").run_dir for seed in (0, 1)]
    path = runs[1] / "evaluations.jsonl"
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    lines[-1]["returns"] = [r + 5.0 for r in lines[-1]["returns"]]  # consistent everywhere but the checkpoint
    lines[-1]["mean_return"] += 5.0
    lines[-1]["normalized_score"] = board_card().normalise(lines[-1]["mean_return"])
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    summary = json.loads((runs[1] / "summary.json").read_text())
    for which in ("final", "best"):
        if summary[which]["step"] == 20:
            summary[which].update(mean_return=lines[-1]["mean_return"], normalized_score=lines[-1]["normalized_score"])
    (runs[1] / "summary.json").write_text(json.dumps(summary))
    with pytest.raises(Refused, match=r"refused \(verify\): final evaluation, episode 0: replayed return"):
        submit(board, runs, verify=True)
    assert not board.entries_dir.exists() or not list(board.entries_dir.iterdir())


def board_card():
    from offbench.leaderboard.scoring import benchmark_card

    return benchmark_card("pendulum-scripted")


def test_track_refuses_misuse_in_one_line(pendulum, tmp_path):
    run = train_own_method(0, tmp_path)
    with pytest.raises(OffbenchError, match="after the run was closed"):
        run.log(30, loss=1.0)
    with pytest.raises(OffbenchError, match="already exists"):
        train_own_method(0, tmp_path)
    with offbench.track("x", dataset="pendulum-scripted", out=tmp_path, name="steps", episodes=2) as other:
        other.log(5, loss=1.0)
        with pytest.raises(OffbenchError, match=r"run.log\(step=5\) after step 5: steps must increase"):
            other.log(5, loss=1.0)
        with pytest.raises(OffbenchError, match="not a finite number"):
            other.log(6, loss=float("nan"))
        with pytest.raises(OffbenchError, match="weights_only"):
            other.checkpoint(6, {"policy": LinearPolicy()})
        other.evaluate(6, swing)
    with pytest.raises(OffbenchError, match="must hold only JSON values"):
        offbench.track("x", dataset="pendulum-scripted", out=tmp_path, config={"f": object()})
    with pytest.raises(OffbenchError, match="ended without run.evaluate"):
        with offbench.track("x", dataset="pendulum-scripted", out=tmp_path, name="no-eval"):
            pass
    assert not (tmp_path / "no-eval" / "summary.json").exists()


def test_a_run_that_raises_is_left_unfinished(pendulum, tmp_path):
    with pytest.raises(RuntimeError):
        with offbench.track("x", dataset="pendulum-scripted", out=tmp_path, name="crash", episodes=2) as run:
            run.evaluate(1, swing)
            raise RuntimeError("diverged")
    assert not (tmp_path / "crash" / "summary.json").exists()
    with pytest.raises(Refused, match="did not finish"):
        read_run(tmp_path / "crash")


# ------------------------------------------------------------------------------------------------ the public API
def test_every_public_name_is_documented():
    assert "load" in dir(offbench) and "Path" not in dir(offbench) and "annotations" not in dir(offbench)
    for name in offbench.__all__:
        if name != "__version__":
            value = getattr(offbench, name)
            assert (value.__doc__ or "").strip(), f"offbench.{name} has no docstring"


def test_a_scripts_load_function_is_imported_from_its_file_dataclasses_and_all(tmp_path, monkeypatch):
    """A training script run as __main__ is imported again from its file for a replay: registered as a module while
    it runs (dataclasses with postponed annotations look their module up), its __main__ block not run, and found
    under the current folder by its path in the repository when its recorded absolute path is gone."""
    from offbench.tracking.provenance import import_loader

    script = tmp_path / "repo" / "train.py"
    script.parent.mkdir()
    script.write_text(
        "from __future__ import annotations\nfrom dataclasses import dataclass\n\n@dataclass\nclass Config:\n"
        "    lr: float = 1e-3\n\ndef build(state):\n    return Config(**state)\n\n"
        "if __name__ == '__main__':\n    raise SystemExit('the training must not run again')\n"
    )
    build = import_loader({"module": "__main__", "qualname": "build", "file": str(script), "repository_file": "train.py"})
    assert build({"lr": 0.5}).lr == 0.5
    monkeypatch.chdir(script.parent)
    moved = import_loader({"module": "__main__", "qualname": "build", "file": str(tmp_path / "gone.py"), "repository_file": "train.py"})
    assert moved({}).lr == 1e-3
    with pytest.raises(OffbenchError, match="not on this machine"):
        import_loader({"module": "__main__", "qualname": "build", "file": str(tmp_path / "gone.py"), "repository_file": "gone.py"})


def test_a_replay_uses_the_runs_thread_count(cli, tmp_path, pendulum):
    """Trained with one torch thread, replayed in a process that has two: a matrix product split over two threads
    sums in another order, so the replay takes the run's count (run.json env.torch_threads) to match exactly."""
    from offbench.leaderboard.verify import verify_run

    code, _, err = cli(
        *run_args("bc", "pendulum-scripted", steps=200, eval_every=200, eval_episodes=10, checkpoint_every=200, out=tmp_path, name="bc")
    )
    assert code == 0, err
    assert json.loads((tmp_path / "bc" / "run.json").read_text())["env"]["torch_threads"] == 1
    torch.set_num_threads(2)
    assert verify_run(read_run(tmp_path / "bc"))["status"] == "verified"
