"""`offbench run baseline ad|dpt` end to end on darkroom-small: in-context evaluation on the held-out goals,
Ctrl-C + --resume ending with the same numbers, and datasets of the wrong kind refused before anything is written."""

from __future__ import annotations

import pytest
from helpers import assert_resume_repeats_the_run, read_jsonl
from tiny_runs import run_args


@pytest.mark.parametrize("name", ["ad", "dpt"])
def test_run_evaluates_in_context_on_the_held_out_goals_only(darkroom, cli, tmp_path, name):
    from offbench.envs.benchmarks import card_tasks

    code, _, err = cli(*run_args(name, "darkroom-small", tiny=True, out=tmp_path), "--name", "run")
    assert code == 0, err
    evaluations = read_jsonl(tmp_path / "run" / "evaluations.jsonl")
    assert [e["step"] for e in evaluations] == [20, 40]
    _, held_out = card_tasks(darkroom.card)
    for line in evaluations:
        assert line["tasks"] == "held-out"
        assert len(line["task_returns"]) == len(held_out) and all(len(r) == 3 for r in line["task_returns"])
        assert len(line["in_context_returns"]) == 3
    # every in-context run logs regret, but a grid world's figure is its in-context curve, never bandit regret
    code, out, err = cli("plot", tmp_path / "run", "-o", tmp_path / "auto.svg")
    assert code == 0 and "in-context episode" in (tmp_path / "auto.svg").read_text(), err
    code, _, err = cli("plot", tmp_path / "run", "--kind", "regret", "-o", tmp_path / "regret.svg")
    assert code == 2 and "not a bandit dataset" in err and not (tmp_path / "regret.svg").exists()


def test_evaluate_in_the_runs_own_action_mode_repeats_its_last_evaluation(darkroom, cli, tmp_path):
    """`offbench evaluate --actions greedy` on a greedy run: the same curve as the run's last evaluation (same
    checkpoint, same seeds); a mode that does not exist is one line, exit 2."""
    code, _, err = cli(*run_args("ad", "darkroom-small", tiny=True, out=tmp_path), "--name", "run")
    assert code == 0, err
    last = read_jsonl(tmp_path / "run" / "evaluations.jsonl")[-1]
    code, out, err = cli("evaluate", tmp_path / "run", "--actions", "greedy")
    assert code == 0, err
    caption = " ".join(out.split())
    assert (
        f"in context (held-out tasks): episode 1 {last['in_context_returns'][0]:.2f}, "
        f"last {last['in_context_returns'][-1]:.2f}, optimal {last['optimal_return']:.2f}"
    ) in caption
    code, _, err = cli("evaluate", tmp_path / "run", "--actions", "best")
    assert code == 2 and "--actions must be one of greedy, sampled" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("name", ["ad", pytest.param("dpt", marks=pytest.mark.slow)])
def test_interrupted_run_resumes_to_the_same_numbers(darkroom, cli, tmp_path, monkeypatch, name):
    args = run_args(name, "darkroom-small", tiny=True, out=tmp_path)
    code, _, err = cli(*args, "--name", "whole")
    assert code == 0, err
    assert_resume_repeats_the_run(cli, monkeypatch, name, args, tmp_path, stop_at=27)


@pytest.mark.parametrize("name", ["ad", "dpt"])
def test_a_dataset_that_is_not_a_learning_history_is_refused_before_anything_is_written(darkroom, cli, tmp_path, name):
    """The same Dark Room steps saved as a plain offline dataset (no card, no history columns)."""
    from offbench.data.store import EpisodeStore

    path = tmp_path / "offline.h5"
    EpisodeStore.from_episodes(
        [darkroom.episode(i) for i in range(4)], observation_space=darkroom.observation_space, action_space=darkroom.action_space
    ).save(path)
    code, _, err = cli("run", "baseline", name, "--dataset", path, "--out", tmp_path / "runs")
    assert code == 2 and f"baseline '{name}'" in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_dpt_refuses_histories_without_optimal_actions_before_anything_is_written(darkroom, cli, tmp_path):
    """A learning-history file (card kept) whose steps lack the optimal-action labels DPT's queries need."""
    from dataclasses import replace

    columns = {name: values for name, values in darkroom.columns.items() if name != "optimal_action"}
    path = replace(darkroom, columns=columns, path=None).save(tmp_path / "unlabelled.h5")
    code, _, err = cli(*run_args("dpt", path, tiny=True, out=tmp_path / "runs"))
    assert code == 2 and "optimal_action" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "runs").exists()


def test_dpt_posterior_labels_refuse_learning_histories_before_anything_is_written(darkroom, cli, tmp_path):
    """darkroom-small's histories come from a learner that knows its goal, so their steps say more about the task than
    the rewards do: the reward-only posterior would be wrong there, and the run stops with one line."""
    code, _, err = cli(*run_args("dpt", "darkroom-small", tiny=True, out=tmp_path / "runs"), "--set", 'label="posterior"')
    assert code == 2 and "ignore the task" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "runs").exists()
