"""`offbench generate minigrid-learned` and `offbench generate mujoco-local` at a tiny size, in this process (so the
training can be counted): the registered card and its data, the PPO run a medium and a replay recipe share through
the cache under OFFBENCH_HOME (the same bytes as a fresh home's), and bad options refused in one line."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
from helpers import race, require_extra, slowed

from offbench.cli import main
from offbench.data.cards import card_from_dict, get_card, read_card, write_card
from offbench.data.store import load_native
from offbench.machine import made_on

require_extra("minigrid", "minigrid")
require_extra("stable_baselines3", "learned")

from offbench.generators import learned_tasks, minigrid_learned  # noqa: E402  (needs the extras above)

LAVA = "MiniGrid-LavaGapS7-v0"
# One task, the untrained checkpoint and one trained one, a few episodes: under a second of PPO.
QUICK = ["--suite", "MT3", "--tasks", LAVA, "--timesteps", "1024", "--checkpoint-every", "1024", "--eval-episodes", "4"]
QUICK_PARAMS = {"suite": "MT3", "tasks": [LAVA], "timesteps": 1024, "checkpoint_every": 1024, "eval_episodes": 4}


def offbench(*args: str) -> int:
    """`offbench ARGS...` in this process: its exit status."""
    with pytest.raises(SystemExit) as exited:
        main(list(args))
    return int(exited.value.code or 0)


@pytest.fixture
def trainings(monkeypatch) -> list[str]:
    """The tasks PPO trains, in order."""
    real, trained = learned_tasks.train, []

    def counted(agent, advance):
        trained.append(agent.name)
        return real(agent, advance)

    monkeypatch.setattr(learned_tasks, "train", counted)
    return trained


def test_medium_then_replay_train_once_and_replay_is_what_a_fresh_home_makes(isolated_home, trainings, capsys, tmp_path, monkeypatch):
    # a registered recipe written with a default spelled out: the same options fill its dataset
    mine = {**QUICK_PARAMS, "quality": "medium", "episodes_per_task": 4, "target_success": 0.5}
    card = {"id": "mine/lava-medium", "description": "mine", "format": "offbench", "kind": "multi-task"}
    write_card(
        card_from_dict({**card, "source": {"recipe": {"generator": "minigrid-learned", "params": mine}}}),
        isolated_home / "datasets" / "mine" / "lava-medium.toml",
    )
    assert offbench("generate", "minigrid-learned", *QUICK, "--episodes", "4", "--quiet") == 0
    medium = get_card("mine/lava-medium")
    data = load_native(isolated_home / "data" / "mine" / "lava-medium" / "data.h5")
    assert medium.description == "mine" and medium.extra["task_stats"][LAVA]["episodes"] == data.num_episodes == 4
    assert data.card["made_on"] == made_on()  # the machine whose SIMD kernels the PPO run's bits depend on
    record = medium.extra["checkpoints"][LAVA]
    assert record["timesteps"] == [0, 1024] and record["acting"] == 1 and record == data.card["checkpoints"][LAVA]
    assert data.card["id"] == "mine/lava-medium" and medium.extra["behaviour"]["algorithm"] == "PPO"
    printed = capsys.readouterr().out
    acting = record["acting"]
    assert f"{record['timesteps'][acting]:,} ({record['success'][acting]:.2f})" in printed  # the acting checkpoint, per task
    assert f"mine/lava-medium: {isolated_home / 'data' / 'mine' / 'lava-medium' / 'data.h5'} (4 episodes" in printed
    assert trainings == [LAVA]

    assert offbench("generate", "minigrid-learned", *QUICK, "--quality", "replay", "--quiet") == 0
    assert trainings == [LAVA]  # the medium recipe's run, reused: no training
    (card_path,) = (isolated_home / "datasets" / "generated").glob("minigrid-learned-mt3-replay-*-s0.toml")
    replay = read_card(card_path)
    assert replay.source.recipe and replay.source.recipe.params == {**QUICK_PARAMS, "quality": "replay"}
    assert replay.extra["checkpoints"] == medium.extra["checkpoints"] and replay.extra["quality"] == "replay"
    cached = load_native(isolated_home / "data" / replay.id / "data.h5")

    monkeypatch.setenv("OFFBENCH_HOME", str(tmp_path / "fresh"))
    fresh = load_native(minigrid_learned.generate_minigrid_learned({**QUICK_PARAMS, "quality": "replay"}, 0, tmp_path / "fresh.h5", True))
    assert trainings == [LAVA, LAVA]
    assert cached.content_sha256() == fresh.content_sha256() and cached.card["checkpoints"] == fresh.card["checkpoints"]


def test_a_task_run_is_keyed_by_what_trains_it_not_by_the_suite_or_the_quality():
    def run_path(**changes):
        return learned_tasks.run_path(minigrid_learned.learned_recipe({**QUICK_PARAMS, **changes}, 0), 0)

    assert run_path(quality="medium") == run_path(quality="replay") == run_path(suite="MT7", target_success=0.45)
    assert run_path(tasks=[LAVA, "MiniGrid-DistShift1-v0"]) == run_path()  # LavaGap is task 0 of either list
    for changed in ({"band": [0.3, 0.6]}, {"timesteps": 2048}, {"eval_episodes": 5}, {"quality": "expert"}):
        assert run_path(**changed) != run_path(), changed
    assert run_path(timesteps=2048, checkpoint_every=2048) != run_path(timesteps=2048)
    assert learned_tasks.run_path(minigrid_learned.learned_recipe(QUICK_PARAMS, 1), 0) != run_path()
    assert run_path().parent == Path(os.environ["OFFBENCH_HOME"]) / "work" / "minigrid-learned" / "runs"


def test_two_generations_wanting_one_task_run_train_it_once_and_the_second_reuses_it(trainings, capsys, monkeypatch):
    recipe, first_trains = minigrid_learned.learned_recipe(QUICK_PARAMS, 0), threading.Event()
    # the first training lasts until the second generation asks for the run too
    monkeypatch.setattr(learned_tasks, "train", slowed(learned_tasks.train, first_trains))
    runs = {}

    def ask(name: str) -> None:
        runs[name] = learned_tasks.task_run(recipe, 0, lambda *args, **kwargs: None)

    race(lambda: ask("first"), lambda: ask("second"), first_trains)
    assert trainings == [LAVA]  # the second waited for the first's run instead of training its own
    assert runs["second"].timesteps.tolist() == runs["first"].timesteps.tolist() == [0, 1024]
    assert runs["second"].success.tolist() == runs["first"].success.tolist()
    waits = capsys.readouterr().err
    assert waits.count("waiting for another process") == 1 and str(learned_tasks.run_path(recipe, 0)) in waits


def test_metaworld_learned_generates_a_registered_card_and_replay_reuses_its_run(isolated_home, trainings, capsys):
    require_extra("metaworld", "metaworld")
    tiny = ["--tasks", "reach-v3", "--timesteps", "200", "--checkpoint-every", "100", "--learning-starts", "100"]
    tiny += ["--max-episode-steps", "20", "--eval-episodes", "2", "--quiet"]
    assert offbench("generate", "metaworld-learned", *tiny, "--episodes", "2") == 0
    (medium_path,) = (isolated_home / "datasets" / "generated").glob("metaworld-learned-mt10-medium-*-s0.toml")
    medium = read_card(medium_path)
    assert medium.extra["behaviour"]["algorithm"] == "SAC" and medium.extra["checkpoints"]["reach-v3"]["timesteps"] == [0, 100, 200]
    data = load_native(isolated_home / "data" / medium.id / "data.h5")
    assert data.num_episodes == 2 and data.num_transitions == 40 and data.actions.shape == (40, 4)
    assert "reach-v3" in capsys.readouterr().out and trainings == ["reach-v3"]

    assert offbench("generate", "metaworld-learned", *tiny, "--quality", "replay") == 0
    assert trainings == ["reach-v3"]  # the medium recipe's run, reused: no training
    (replay_path,) = (isolated_home / "datasets" / "generated").glob("metaworld-learned-mt10-replay-*-s0.toml")
    replay = read_card(replay_path)
    acting = replay.extra["checkpoints"]["reach-v3"]["acting"]
    assert load_native(isolated_home / "data" / replay.id / "data.h5").num_transitions == 100 * acting  # 20-step episodes, one env


@pytest.mark.parametrize(
    "options, message",
    [
        (["--quality", "expert", "--band", "0.3", "0.5"], "--target-success and --band apply to medium and replay"),
        (["--checkpoint-every", "1000"], "'checkpoint_every' must be at least 1024, got 1000"),
        (["--quality", "replay", "--episodes", "3"], "'episodes_per_task' does not apply to replay"),
        (["--suite", "MT9"], "'suite' must be one of MT3, MT5, MT7"),
    ],
)
def test_bad_minigrid_learned_options_are_one_line_before_any_work(options, message, capsys, isolated_home, trainings):
    assert offbench("generate", "minigrid-learned", *options, "--quiet") == 2
    error = capsys.readouterr().err
    assert message in error and error.count("\n") == 1
    assert trainings == [] and not (isolated_home / "data").exists()


def test_mujoco_local_generates_a_registered_card_and_the_second_level_only_rolls_out(isolated_home, capsys, monkeypatch):
    require_extra("mujoco", "mujoco")
    from offbench.generators import mujoco_local

    tiny = ["--train-steps", "300", "--checkpoint-every", "100", "--transitions", "200", "--max-episode-steps", "25"]
    for setting in (
        "learning_starts=100",
        "batch_size=32",
        "buffer_size=1000",
        "net_arch=[16,16]",
        "evaluation_episodes=2",
        "reference_episodes=3",
    ):
        tiny += ["--set", setting]
    assert offbench("generate", "mujoco-local", *tiny, "--id", "mine/hopper-medium", "--quiet") == 0
    card = get_card("mine/hopper-medium")
    data = load_native(isolated_home / "data" / "mine" / "hopper-medium" / "data.h5")
    assert card.kind == "offline" and card.env["kwargs"] == {"max_episode_steps": 25} and data.num_transitions == 200
    assert card.source.recipe and card.source.recipe.params["net_arch"] == [16, 16]
    assert card.scores.ref_min == data.card["scores"]["ref_min"] and card.normalise(card.scores.ref_max) == pytest.approx(100.0)
    run = card.extra["mujoco_local"]
    assert [c["step"] for c in run["checkpoints"]] == [100, 200, 300] and run["expert_step"] == 300
    assert "mine/hopper-medium" in capsys.readouterr().out

    trained = []
    monkeypatch.setattr(mujoco_local, "new_model", lambda *args: trained.append(args))
    assert offbench("generate", "mujoco-local", *tiny, "--level", "medium-replay", "--id", "mine/hopper-replay", "--quiet") == 0
    replay = load_native(isolated_home / "data" / "mine" / "hopper-replay" / "data.h5")
    assert trained == [] and replay.num_transitions == run["medium_step"]  # the medium run's experience, not trained again
    assert replay.card["scores"]["ref_max"] == card.scores.ref_max

    assert offbench("generate", "mujoco-local", *tiny, "--set", "level=expert", "--quiet") == 2
    assert "--set 'level=expert': level has its own option, --level" in capsys.readouterr().err
