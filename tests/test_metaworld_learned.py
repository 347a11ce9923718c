"""Meta-World data from learning agents (generator "metaworld-learned"): SAC per task through the shared
learned-task machinery; the data is the acting checkpoint's own sampled actions (a policy's, step by step), the
replay is the agent's training episodes, same seed same data, bad params in one line."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from helpers import require_extra

from offbench.data.store import load_native
from offbench.envs.factory import make_env
from offbench.envs.multitask import episode_seed
from offbench.errors import OffbenchError
from offbench.generators import get_generator
from offbench.generators.torch_threads import one_torch_thread

require_extra("metaworld", "metaworld")
require_extra("stable_baselines3", "learned")

from offbench.generators import learned_tasks, metaworld_learned  # noqa: E402  (needs the extras above)

REACH = "reach-v3"
# Seconds: one task, 50-step episodes, 200 random steps then 100 SAC updates, two trained checkpoints.
QUICK = {
    "suite": "MT10",
    "tasks": [REACH],
    "timesteps": 300,
    "checkpoint_every": 150,
    "learning_starts": 200,
    "max_episode_steps": 50,
    "eval_episodes": 2,
}
MEDIUM = {**QUICK, "episodes_per_task": 3}


def generate(params: dict, out: Path, seed: int = 0):
    return load_native(get_generator("metaworld-learned")(params, seed, out, True))


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """The quick medium data and its task's run, made in a home of their own (this fixture outlives a test's)."""
    folder = tmp_path_factory.mktemp("medium")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("OFFBENCH_HOME", str(folder / "home"))
        data = generate(MEDIUM, folder / "data.h5")
        run = learned_tasks.TaskRun.from_bytes(learned_tasks.run_path(metaworld_learned.learned_recipe(MEDIUM, 0), 0).read_bytes())
    return data, run


@pytest.fixture(scope="module")
def medium(made):
    return made[0]


def test_medium_data_is_the_acting_actors_sampled_actions(made):
    medium, run = made
    record = medium.card["checkpoints"][REACH]
    assert record["timesteps"] == [0, 150, 300] and record["acting"] in (1, 2)
    assert medium.card["behaviour"]["algorithm"] == "SAC" and medium.card["behaviour"]["learning_starts"] == 200
    assert medium.actions.dtype == np.float32 and medium.actions.shape == (150, 4)
    seeds = np.asarray(medium.columns["episode_seed"])[medium.episode_starts[:-1]]
    assert seeds.tolist() == [episode_seed(0, REACH, e) for e in range(3)]  # the evaluation episodes come first
    # every action is tanh(mean + std * noise) of the acting actor at the recorded observation, the noise the episode's
    # own stream's normals (numpy's default_rng([reset seed, 2])): the data is that policy's, step by step
    import torch

    agent = learned_tasks.TaskAgent(metaworld_learned.learned_recipe(MEDIUM, 0), 0, record=False)
    try:
        agent.learner.load_acting_weights(agent.model, run.weights[record["acting"]])
        streams = [np.random.default_rng([int(seed), 2]) for seed in seeds]
        observations, actions = np.asarray(medium.observations).reshape(3, 50, -1), np.asarray(medium.actions).reshape(3, 50, 4)
        with one_torch_thread(), torch.no_grad():  # as the generator acted: a matrix product's float bits depend on the threads
            for t in range(50):
                mean, log_std, _ = agent.model.actor.get_action_dist_params(torch.tensor(observations[:, t]))
                noise = np.stack([stream.standard_normal(4) for stream in streams])
                expected = np.tanh(mean.numpy().astype(np.float64) + np.exp(log_std.numpy().astype(np.float64)) * noise)
                assert np.array_equal(expected.astype(np.float32), actions[:, t])
    finally:
        agent.close()
    # and each episode is what those actions do from its reset seed's goal: 50 steps, truncated, never terminated
    env = make_env(medium.card["env"], REACH)
    observation, _ = env.reset(seed=int(seeds[0]))
    for step in range(50):
        assert np.array_equal(observation, medium.observations[step])
        observation, reward, terminated, truncated, _ = env.step(medium.actions[step])
        assert reward == pytest.approx(medium.rewards[step]) and not terminated and truncated == (step == 49)
    assert np.array_equal(np.asarray(medium.truncations), np.tile(np.arange(50) == 49, 3)) and not np.any(medium.terminations)


def test_replay_is_the_agents_training_episodes_up_to_the_acting_checkpoint(medium, tmp_path):
    replay = generate({**QUICK, "quality": "replay"}, tmp_path / "replay.h5")  # the medium card's run, trained again
    record = replay.card["checkpoints"][REACH]
    assert record == medium.card["checkpoints"][REACH]
    acting_steps = record["timesteps"][record["acting"]]
    assert replay.num_episodes == acting_steps // 50 and replay.num_transitions == acting_steps  # one env, 50-step episodes
    seeds = np.asarray(replay.columns["episode_seed"])[replay.episode_starts[:-1]]
    assert seeds.tolist() == [episode_seed(0, REACH, learned_tasks.TRAINING + 1 + k) for k in range(replay.num_episodes)]
    assert not set(seeds.tolist()) & {episode_seed(0, REACH, e) for e in range(3)}
    # the actions are the ones the environment received: replayed from the reset seed they give the recorded steps
    env = make_env(replay.card["env"], REACH)
    observation, _ = env.reset(seed=int(seeds[-1]))
    start = replay.episode_starts[-2]
    for step in range(start, start + 50):
        assert np.array_equal(observation, replay.observations[step])
        observation, reward, *_ = env.step(replay.actions[step])
        assert reward == pytest.approx(replay.rewards[step])
    # the random warm-up's actions are uniform in [-1, 1], unlike the medium policy's squashed Gaussian around its mean
    warm_up = np.asarray(replay.actions)[:200]
    assert np.all(np.abs(warm_up) <= 1) and np.abs(warm_up.mean()) < 0.15 and warm_up.std() > 0.5


def test_same_seed_same_data_and_another_seed_other_data(medium, tmp_path):
    again = generate(MEDIUM, tmp_path / "again.h5")
    assert again.content_sha256() == medium.content_sha256() and again.card == medium.card
    assert generate(MEDIUM, tmp_path / "other.h5", seed=1).content_sha256() != medium.content_sha256()


def test_sacs_checkpoints_before_its_first_update_neither_stop_the_run_nor_act(tmp_path):
    # QUICK's 150-step checkpoint comes before SAC's first update (learning_starts 200): the untrained policy again.
    # A band every checkpoint reaches stops the run at the first trained one, 300, which acts.
    data = generate({**MEDIUM, "band": [0.0, 1.0], "target_success": 0.0}, tmp_path / "data.h5")
    record = data.card["checkpoints"][REACH]
    assert record["timesteps"] == [0, 150, 300] and record["acting"] == 2


class Killed(Exception):
    """Stands for the process being killed right after a snapshot."""


# Learning from step 100, so the snapshots at steps 150 and 300 hold optimiser states, a filling replay buffer and
# recorded training episodes; a band no early checkpoint reaches, so the run goes on to 450 steps.
KILLABLE = {**QUICK, "learning_starts": 100, "timesteps": 450, "quality": "replay", "target_success": 0.95, "band": [0.9, 1.0]}


def test_a_killed_task_resumes_from_its_last_snapshot_with_the_bytes_of_an_unbroken_run(tmp_path, monkeypatch):
    recipe = metaworld_learned.learned_recipe(KILLABLE, 0)
    monkeypatch.setenv("OFFBENCH_HOME", str(tmp_path / "unbroken"))
    unbroken = generate(KILLABLE, tmp_path / "unbroken.h5")
    assert unbroken.card["checkpoints"][REACH]["timesteps"] == [0, 150, 300, 450]
    unbroken_run = learned_tasks.run_path(recipe, 0).read_bytes()
    assert not learned_tasks.snapshots_dir(recipe, 0).exists()  # a finished run keeps only its cache file

    monkeypatch.setenv("OFFBENCH_HOME", str(tmp_path / "killed"))
    write, restore, restored = learned_tasks.write_snapshot, learned_tasks.restore_snapshots, []

    def killed_at_step_300(agent, folder, checkpoints, saved):
        write(agent, folder, checkpoints, saved)
        if checkpoints[-1].timesteps == 300:
            raise Killed

    def counted(agent, folder):
        checkpoints = restore(agent, folder)
        restored.append([checkpoint.timesteps for checkpoint in checkpoints])
        return checkpoints

    monkeypatch.setattr(learned_tasks, "write_snapshot", killed_at_step_300)
    monkeypatch.setattr(learned_tasks, "restore_snapshots", counted)
    with pytest.raises(Killed):
        generate(KILLABLE, tmp_path / "killed.h5")
    folder = learned_tasks.snapshots_dir(recipe, 0)
    assert sorted(path.name for path in folder.iterdir()) == ["0000000150", "0000000300"]
    monkeypatch.setattr(learned_tasks, "write_snapshot", write)
    resumed = generate(KILLABLE, tmp_path / "killed.h5")
    assert restored == [[], [0, 150, 300]]  # the second run went on from step 300, not from the start
    assert learned_tasks.run_path(recipe, 0).read_bytes() == unbroken_run
    assert resumed.content_sha256() == unbroken.content_sha256() and not folder.exists()


@pytest.mark.parametrize(
    "change, message",
    [
        ({"suite": "MT9"}, r"'suite' must be one of MT10, MT50"),
        ({"tasks": ["reach-v2"]}, r"are not in Meta-World MT10"),
        ({"timesteps": 2_000_000, "checkpoint_every": 100_000}, r"'timesteps' must be at least 1 and at most 1000000"),
        ({"max_episode_steps": 0}, r"'max_episode_steps' must be at least 1"),
        ({"quality": "replay", "episodes_per_task": 3}, r"'episodes_per_task' does not apply to replay"),
    ],
)
def test_bad_recipe_params_are_refused_in_one_line(change, message):
    with pytest.raises(OffbenchError, match=message) as refused:
        metaworld_learned.learned_recipe({**QUICK, **change}, 0)
    assert "\n" not in str(refused.value)
