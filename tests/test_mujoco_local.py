"""The `mujoco-local` generator: D4RL-style medium / medium-replay / medium-expert / expert data from a SAC run made
here, on a tiny recipe (a few hundred SAC steps, 25-step Hopper episodes)."""

from __future__ import annotations

import json
import shutil
import tempfile
import threading
from pathlib import Path

import numpy as np
import pytest
import tomli_w
from helpers import race, require_extra, slowed

require_extra("stable_baselines3", "learned")
require_extra("mujoco", "mujoco")

from offbench import records  # noqa: E402
from offbench.data.cards import builtin_cards, card_from_dict  # noqa: E402
from offbench.data.resolve import native_path, open_dataset  # noqa: E402
from offbench.data.store import load_native  # noqa: E402
from offbench.errors import OffbenchError  # noqa: E402
from offbench.generators import generate_from_card, get_generator  # noqa: E402
from offbench.generators import mujoco_local as ml  # noqa: E402
from offbench.paths import user_cards_dir  # noqa: E402

TINY = dict(
    env_id="Hopper-v4",
    train_steps=300,
    checkpoint_every=100,
    transitions=200,
    max_episode_steps=25,
    learning_starts=100,
    batch_size=32,
    buffer_size=1000,
    net_arch=[16, 16],
    evaluation_episodes=2,
    reference_episodes=3,
)


def tiny(level: str) -> ml.MujocoLocalRecipe:
    return records.from_dict(ml.MujocoLocalRecipe, {**TINY, "level": level}, "tiny recipe")


def make(level: str, out: Path, seed: int = 0) -> Path:
    """Generate a tiny card's data as `offbench.load` of its id does (the run's workspace under $OFFBENCH_HOME)."""
    card = card_from_dict(
        {
            "id": f"test/hopper-{level}",
            "description": "tiny",
            "format": "offbench",
            "source": {"recipe": {"generator": "mujoco-local", "seed": seed, "params": {**TINY, "level": level}}},
            "env": {"id": "Hopper-v4", "kwargs": {"max_episode_steps": TINY["max_episode_steps"]}},
        }
    )
    return generate_from_card(card, out, quiet=True)


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> dict:
    """The four levels of one tiny run (one workspace), by level: the file's path."""
    root = tmp_path_factory.mktemp("mujoco_local")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("OFFBENCH_HOME", str(root / "home"))
        return {
            "files": {level: make(level, root / f"{level}.h5") for level in ml.LEVELS},
            "workspace": ml.workspace_dir(tiny("medium"), 0),
        }


def hopper_healthy(observation: np.ndarray) -> bool:
    """Hopper-v4's health test read off its observation (qpos[1:], then the clipped qvel): height above 0.7, torso angle
    within 0.2 (the state bound of 100 is out of reach of a clipped velocity and of these short episodes)."""
    return bool(observation[0] > 0.7 and abs(observation[1]) < 0.2)


def test_the_registry_and_the_built_in_cards_name_the_generator():
    assert get_generator("mujoco-local") is ml.generate
    cards = {card_id: card for card_id, card in builtin_cards().items() if card_id.startswith("mujoco-local/")}
    assert len(cards) == 12
    levels = {(card.env["id"], ml.MujocoLocalRecipe(**card.source["recipe"]["params"]).level) for card in cards.values()}
    assert levels == {(env_id, level) for env_id in ml.ENV_IDS for level in ml.LEVELS}
    runs: dict[str, set[Path]] = {}
    for card in cards.values():
        recipe = records.from_dict(ml.MujocoLocalRecipe, dict(card.source["recipe"]["params"]), str(card.card_path))
        assert recipe.env_id == card.env["id"] and recipe.transitions == 1_000_000
        runs.setdefault(recipe.env_id, set()).add(ml.workspace_dir(recipe, card.source["recipe"]["seed"]))
    assert all(len(workspaces) == 1 for workspaces in runs.values()), runs  # an environment's four levels share one SAC run


def test_same_seed_same_bytes_in_a_fresh_workspace(made, tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where SB3 puts a log folder per learn() unless told not to
    again = make("medium", tmp_path / "medium.h5")  # this test's own OFFBENCH_HOME: trained again from scratch
    assert not list(tmp_path.glob("SB3-*"))
    assert again.read_bytes() == made["files"]["medium"].read_bytes()
    other_seed = make("medium", tmp_path / "seed1.h5", seed=1)
    assert not np.array_equal(load_native(other_seed).observations, load_native(again).observations)


def test_terminations_where_the_hopper_fell_truncations_at_the_time_limit_never_both(made):
    episodes_of_medium = load_native(made["files"]["medium"]).num_episodes
    time_limit_seen = False
    for level, path in made["files"].items():
        store = load_native(path)
        terminated, truncated = np.asarray(store.terminations), np.asarray(store.truncations)
        next_observations = store.next_observations()
        for step in range(store.num_transitions):  # the env terminated exactly where the next state is unhealthy
            assert terminated[step] == (not hopper_healthy(next_observations[step])), (level, step)
        # each episode ends with one flag; a truncation is the time limit, or the end of a part (budget or checkpoint)
        part_ends = {store.num_episodes - 1} | ({episodes_of_medium - 1} if level == "medium-expert" else set())
        for episode, last in enumerate(store.episode_starts[1:] - 1):
            assert terminated[last] != truncated[last], (level, episode)
            at_limit = store.episode_lengths[episode] == TINY["max_episode_steps"]
            assert not truncated[last] or at_limit or episode in part_ends, (level, episode)
            time_limit_seen |= bool(truncated[last] and at_limit)
    assert time_limit_seen


def test_policy_data_has_the_budget_and_medium_expert_is_medium_then_expert(made):
    medium, expert, both = (load_native(made["files"][level]) for level in ("medium", "expert", "medium-expert"))
    assert medium.num_transitions == expert.num_transitions == TINY["transitions"]
    assert both.num_episodes == medium.num_episodes + expert.num_episodes
    for name in ("observations", "actions", "rewards", "terminations", "truncations"):
        assert np.array_equal(getattr(both, name), np.concatenate([getattr(medium, name), getattr(expert, name)])), name
    assert np.array_equal(both.final_observations, np.concatenate([medium.final_observations, expert.final_observations]))
    assert np.array_equal(both.episode_lengths, np.concatenate([medium.episode_lengths, expert.episode_lengths]))


def test_medium_replay_is_the_agents_experience_up_to_the_medium_checkpoint(made):
    replay = load_native(made["files"]["medium-replay"])
    medium_step = replay.card["mujoco_local"]["medium_step"]
    assert replay.num_transitions == medium_step
    checkpoints = [c for c in ml.finished_checkpoints(made["workspace"]) if c.step <= medium_step]
    experience = {}
    for checkpoint in checkpoints:
        with np.load(checkpoint.folder / "experience.npz") as part:
            for name in part.files:
                experience.setdefault(name, []).append(part[name])
    experience = {name: np.concatenate(parts) for name, parts in experience.items()}
    assert np.array_equal(replay.observations, experience["observations"].astype(np.float32))
    assert np.array_equal(replay.next_observations(), experience["next_observations"].astype(np.float32))
    assert np.array_equal(replay.actions, experience["actions"])
    assert np.array_equal(replay.rewards, experience["rewards"])
    # episodes are where the agent's were: each next state is the following step's state inside an episode
    inner = ~replay.is_last_step
    assert np.array_equal(experience["next_observations"][:-1][inner[:-1]], experience["observations"][1:][inner[:-1]])


def fake_checkpoints(*returns: float) -> list[ml.Checkpoint]:
    return [ml.Checkpoint(step=(i + 1) * 10, returns=[r], folder=Path(".")) for i, r in enumerate(returns)]


def medium_step(*returns: float) -> int:
    checkpoints = fake_checkpoints(*returns)
    return ml.choose_medium(checkpoints, ml.choose_expert(checkpoints), 1 / 3).step


def test_the_expert_is_the_best_checkpoint_not_the_last_one_in_a_dip():
    assert ml.choose_expert(fake_checkpoints(300, 2900, 800)).step == 20  # SAC's dip on Hopper: the last is not the expert
    assert ml.choose_expert(fake_checkpoints(100, 150, 150)).step == 20  # the earliest on a tie
    assert medium_step(300, 1000, 2900, 800, 2000) == 20  # the medium policy comes before the expert, a third of its return


def test_the_medium_checkpoint_is_the_early_one_closest_to_a_third_of_the_expert():
    assert medium_step(10, 30, 50, 100, 150) == 30  # 50 is a third of 150: the first to reach it
    assert medium_step(10, 20, 90, 49, 150) == 20  # not the later 49: training stops at the first reach
    assert medium_step(10, 20, 30, 150) == 30  # none reaches it: the closest before the expert
    assert medium_step(40) == 10  # a single checkpoint is both


def test_reference_scores_are_measured_and_normalise_the_score(made):
    store = load_native(made["files"]["expert"])
    scores = store.card["scores"]
    recipe = tiny("expert")
    n = recipe.reference_episodes
    expert = ml.choose_expert(ml.finished_checkpoints(made["workspace"]))
    assert scores["ref_max"] == pytest.approx(np.mean(ml.evaluate(ml.load_actor(expert), recipe, n, ml.REFERENCE_SEED)), abs=0)
    env = ml.make_env(recipe)
    env.action_space.seed(ml.REFERENCE_SEED)
    random_returns = [
        ml.episode_return(e)
        for e in ml.episodes(env, lambda _: env.action_space.sample(), iter(range(ml.REFERENCE_SEED, ml.REFERENCE_SEED + n)))
    ]
    assert scores["ref_min"] == pytest.approx(np.mean(random_returns), abs=0)
    assert f"over {n} episodes" in scores["measured"] and f"step {expert.step}" in scores["measured"]
    card = open_dataset(made["files"]["expert"]).card  # opened by path: the file's own card, with what the generator measured
    assert (
        card is not None
        and card.normalise(scores["ref_min"]) == pytest.approx(0.0)
        and card.normalise(scores["ref_max"]) == pytest.approx(100.0)
    )
    for level in ml.LEVELS:  # the four levels of one run share the references
        assert load_native(made["files"][level]).card["scores"] == scores


def test_opened_by_id_the_card_takes_the_reference_returns_its_generated_file_measured(made, tmp_path, monkeypatch):
    """A registered card cannot state what its generation will measure: opened by id, the run is normalised
    against the file's measured references, as opened by path."""
    monkeypatch.setenv("OFFBENCH_HOME", str(tmp_path / "home"))
    stored = load_native(made["files"]["expert"]).card
    registered = {key: stored[key] for key in ("id", "description", "format", "source", "env")}
    assert "scores" not in registered and registered["id"] == "test/hopper-expert"
    (user_cards_dir() / "test").mkdir(parents=True)
    (user_cards_dir() / "test" / "hopper-expert.toml").write_text(tomli_w.dumps(registered))
    card = card_from_dict(registered)
    native_path(card).parent.mkdir(parents=True)
    shutil.copy(made["files"]["expert"], native_path(card))  # already generated: opening it must not make it again
    opened = open_dataset("test/hopper-expert").card
    assert opened is not None and records.to_dict(opened.scores) == stored["scores"]
    assert opened.normalise(stored["scores"]["ref_max"]) == pytest.approx(100.0)


def test_a_killed_run_resumes_from_its_last_checkpoint_with_the_same_bytes(made, tmp_path, monkeypatch):
    from stable_baselines3 import SAC

    train, updates = SAC.train, []

    def killed_mid_segment(self, *args, **kwargs):  # gradient steps start after learning_starts = 100: step 150 is mid segment 2
        updates.append(1)
        if len(updates) == 50:
            raise KeyboardInterrupt
        return train(self, *args, **kwargs)

    monkeypatch.setattr(SAC, "train", killed_mid_segment)
    with pytest.raises(KeyboardInterrupt):
        make("medium", tmp_path / "medium.h5")
    workspace = ml.workspace_dir(tiny("medium"), 0)  # this test's own OFFBENCH_HOME
    assert [c.step for c in ml.finished_checkpoints(workspace)] == [100]
    assert list(tmp_path.glob("*medium.h5*")) == []
    monkeypatch.setattr(SAC, "train", train)

    resumed = make("medium", tmp_path / "medium.h5")
    assert resumed.read_bytes() == made["files"]["medium"].read_bytes()
    for checkpoint, whole in zip(ml.finished_checkpoints(workspace), ml.finished_checkpoints(made["workspace"]), strict=True):
        for name in ("experience.npz", "state.npz", "state.json", "evaluation.json"):
            assert (checkpoint.folder / name).read_bytes() == (whole.folder / name).read_bytes(), (checkpoint.step, name)


def test_two_levels_made_at_once_train_the_run_once_with_the_bytes_of_levels_made_in_turn(made, tmp_path, monkeypatch, capsys):
    trainings, first_trains = [], threading.Event()
    # the first training lasts until the second level's generation wants the run too
    monkeypatch.setattr(ml, "new_model", slowed(ml.new_model, first_trains, lambda recipe, seed: trainings.append(recipe.level)))
    files = {}

    def make_level(level: str) -> None:
        files[level] = make(level, tmp_path / f"{level}.h5")

    race(lambda: make_level("medium"), lambda: make_level("expert"), first_trains)
    assert trainings == ["medium"]  # the expert's generation waited for the run, then reused it
    for level in ("medium", "expert"):
        assert files[level].read_bytes() == made["files"][level].read_bytes(), level
    waits = capsys.readouterr().err
    assert waits.count("waiting for another process") == 1 and str(ml.workspace_dir(tiny("medium"), 0)) in waits


def test_bad_params_are_one_line_naming_the_field(tmp_path):
    with pytest.raises(OffbenchError, match=r"'checkpoint_every' \(2000\) must not exceed buffer_size \(1000\)"):
        ml.generate({**TINY, "level": "medium", "checkpoint_every": 2000}, 0, tmp_path / "x.h5", True)
    with pytest.raises(OffbenchError, match="'level' must be one of"):
        ml.generate({**TINY, "level": "random"}, 0, tmp_path / "x.h5", True)
    assert not list(tmp_path.iterdir())


def test_the_card_of_the_generated_file_reads_and_records_the_run(made):
    card = load_native(made["files"]["medium"]).card
    run = card["mujoco_local"]
    checkpoints = ml.finished_checkpoints(made["workspace"])
    expert = ml.choose_expert(checkpoints)
    assert [c["step"] for c in run["checkpoints"]] == [100, 200, 300] and run["expert_step"] == expert.step
    assert run["expert_return"] == max(c["mean_return"] for c in run["checkpoints"])
    assert run["medium_step"] == ml.choose_medium(checkpoints, expert, 1 / 3).step
    assert json.loads((checkpoints[0].folder / "evaluation.json").read_text())["returns"] == checkpoints[0].returns
    assert card["id"] == "test/hopper-medium" and card["params"] == records.to_dict(tiny("medium"))  # the registered card, and the run's
