"""MiniGrid data from learning agents (generator "minigrid-learned"): the acting checkpoint and its band, the replay
of the training experience, a policy's histories (unlike the noisy planner's), same seed same data, resume."""

from __future__ import annotations

import tempfile
from collections import Counter, defaultdict
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from filelock import FileLock
from helpers import require_extra

from offbench.data.cards import read_card
from offbench.data.store import load_native
from offbench.envs.factory import make_env
from offbench.envs.multitask import episode_seed
from offbench.errors import OffbenchError
from offbench.generators import get_generator
from offbench.generators.work_lock import lock_file

require_extra("minigrid", "minigrid")
require_extra("stable_baselines3", "learned")

from offbench.generators import learned_tasks, minigrid_learned  # noqa: E402  (needs the extras above)

TINY = read_card(Path(__file__).resolve().parents[1] / "datasets" / "minigrid" / "tiny-medium.toml").source["recipe"]["params"]
LAVA, DIST = "MiniGrid-LavaGapS7-v0", "MiniGrid-DistShift1-v0"
# Seconds: two tasks, two checkpoints after the untrained one, a few episodes.
QUICK = {
    **TINY,
    "suite": "MT7",
    "tasks": [LAVA, DIST],
    "timesteps": 2048,
    "checkpoint_every": 1024,
    "eval_episodes": 4,
    "episodes_per_task": 4,
}


def generate(params: dict, out: Path, seed: int = 0):
    return load_native(get_generator("minigrid-learned")(params, seed, out, True))


# The tiny card's PPO run (about 50k steps) is slow: the two tests that need a policy trained into the band are
# marked slow; test_quick_medium_data_is_the_acting_checkpoints_evaluation_episodes checks the same rules at 2k steps.
@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """The tiny card's medium data: PPO on LavaGap until a checkpoint reaches its band (about 50k steps)."""
    return generate(TINY, tmp_path_factory.mktemp("tiny") / "data.h5")


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    return generate(QUICK, tmp_path_factory.mktemp("quick") / "data.h5")


@pytest.mark.slow
def test_the_medium_data_is_played_by_the_checkpoint_in_the_band(tiny):
    record = tiny.card["checkpoints"][LAVA]
    low, high = tiny.card["behaviour"]["band"]
    success = record["success"]
    acting = record["acting"]
    assert record["timesteps"] == [8192 * i for i in range(len(success))]  # the untrained policy, then every 8192 steps
    assert all(s < low for s in success[1:-1]) and success[-1] >= low  # training stopped at the first reaching the band
    assert acting == learned_tasks.choose_checkpoint(success, "medium", 0.5) and record["in_band"]
    # its 32 evaluation episodes are the data's 32 episodes: the data's success is the checkpoint's, in the band
    assert tiny.card["task_stats"][LAVA]["success_rate"] == success[acting]
    assert low <= tiny.card["task_stats"][LAVA]["success_rate"] <= high
    assert tiny.card["quality"] == "medium" and tiny.card["behaviour_profiles"] == ["medium"]
    seeds = np.asarray(tiny.columns["episode_seed"])[tiny.episode_starts[:-1]]
    assert seeds.tolist() == [episode_seed(0, LAVA, e) for e in range(32)]


def test_quick_medium_data_is_the_acting_checkpoints_evaluation_episodes(quick):
    """The medium rules at 2k steps, where no checkpoint need reach the band: training stops at the first that does,
    the nearest to the target acts, and the data is its evaluation episodes (their seeds and success)."""
    task_ids = np.asarray(quick.columns["task_id"])[quick.episode_starts[:-1]]
    seeds = np.asarray(quick.columns["episode_seed"])[quick.episode_starts[:-1]]
    low, _ = quick.card["behaviour"]["band"]
    for task_id, task in enumerate([LAVA, DIST]):
        record = quick.card["checkpoints"][task]
        success, acting = record["success"], record["acting"]
        assert record["timesteps"] == [1024 * i for i in range(len(success))]
        assert all(s < low for s in success[1:-1])
        assert acting == learned_tasks.choose_checkpoint(success, "medium", QUICK["target_success"])
        assert quick.card["task_stats"][task]["success_rate"] == success[acting]
        assert seeds[task_ids == task_id].tolist() == [episode_seed(0, task, e) for e in range(QUICK["episodes_per_task"])]


def lookup_accuracy(observations: np.ndarray, actions: np.ndarray, episodes: np.ndarray) -> tuple[float, float]:
    """(how often the commonest action seen after an observation in the even episodes is the action taken after it in
    the odd ones, how often the commonest action overall is), over odd-episode steps whose observation was seen."""
    table: dict[bytes, Counter] = defaultdict(Counter)
    for obs, action in zip(observations[episodes % 2 == 0], actions[episodes % 2 == 0]):
        table[obs.tobytes()][int(action)] += 1
    commonest = Counter(actions[episodes % 2 == 0].tolist()).most_common(1)[0][0]
    held_out = [
        (table[obs.tobytes()].most_common(1)[0][0], int(action))
        for obs, action in zip(observations[episodes % 2 == 1], actions[episodes % 2 == 1])
        if obs.tobytes() in table
    ]
    assert len(held_out) > 300
    return np.mean([guess == action for guess, action in held_out]), np.mean([commonest == action for _, action in held_out])


def store_lookup_accuracy(store) -> tuple[float, float]:
    episodes = np.repeat(np.arange(store.num_episodes), store.episode_lengths)
    return lookup_accuracy(np.asarray(store.observations), np.asarray(store.actions), episodes)


@pytest.mark.slow
def test_learned_actions_follow_the_observation_where_the_noisy_planners_barely_do(tiny, tmp_path):
    noisy_params = {"suite": "MT3", "tasks": [LAVA], "quality": "noisy-planner", "episodes_per_task": 32, "workers": 1}
    noisy = load_native(get_generator("minigrid")(noisy_params, 0, tmp_path / "noisy.h5", True))
    learned, learned_marginal = store_lookup_accuracy(tiny)
    planner, planner_marginal = store_lookup_accuracy(noisy)
    assert learned > 0.5  # chance among the 7 actions is 1/7
    assert learned - learned_marginal > (planner - planner_marginal) + 0.1  # the observation says far more


def test_replay_is_every_training_episode_up_to_the_acting_checkpoint(tmp_path):
    # A band no checkpoint of this short run reaches: training runs to the end, the nearest trained checkpoint acts.
    params = {**QUICK, "tasks": [LAVA], "quality": "replay", "target_success": 0.95, "band": [0.9, 1.0], "timesteps": 4096}
    del params["episodes_per_task"]
    replay = generate(params, tmp_path / "replay.h5")
    record = replay.card["checkpoints"][LAVA]
    acting_steps = record["timesteps"][record["acting"]]
    assert record["acting"] > 0 and not record["in_band"] and "episodes_per_task" not in replay.card
    training_seeds = {episode_seed(0, LAVA, learned_tasks.TRAINING + 1 + k): k for k in range(acting_steps)}
    seeds = np.asarray(replay.columns["episode_seed"])[replay.episode_starts[:-1]]
    assert set(seeds.tolist()) <= set(training_seeds)  # training layouts, none of the evaluation's
    # whole episodes that ended by the acting checkpoint: at most its steps in all
    assert 0 < replay.num_transitions <= acting_steps
    ended = np.asarray(replay.terminations) | np.asarray(replay.truncations)
    assert np.array_equal(ended, replay.is_last_step)
    assert replay.card["task_stats"][LAVA]["episodes"] == replay.num_episodes
    # each is what its actions do in the layout of its reset seed
    env = make_env(replay.card["env"], LAVA)
    for episode, (start, stop, seed) in enumerate(zip(replay.episode_starts[:-1], replay.episode_starts[1:], seeds)):
        observation, _ = env.reset(seed=int(seed))
        for step in range(start, stop):
            assert np.array_equal(observation, replay.observations[step])
            observation, reward, *_ = env.step(int(replay.actions[step]))
            assert reward == pytest.approx(replay.rewards[step])
        assert np.array_equal(observation, replay.final_observations[episode])


def test_same_seed_same_data_and_another_seed_other_data(quick, tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where SB3 puts a log folder per learn() unless told not to
    again = generate(QUICK, tmp_path / "again.h5")
    assert not list(tmp_path.glob("SB3-*"))
    assert again.content_sha256() == quick.content_sha256() and again.card == quick.card
    assert quick.card["checkpoints"][DIST]["timesteps"] == [0, 1024, 2048]
    assert generate(QUICK, tmp_path / "other.h5", seed=1).content_sha256() != quick.content_sha256()


def test_a_killed_generation_resumes_at_the_next_unfinished_task(quick, tmp_path, monkeypatch):
    real, trained = learned_tasks.learn_task, []

    def killed_on_the_second_task(recipe, task_id, advance):
        trained.append(task_id)
        if len(trained) == 2:
            raise KeyboardInterrupt
        return real(recipe, task_id, advance)

    out = tmp_path / "data.h5"
    monkeypatch.setattr(learned_tasks, "learn_task", killed_on_the_second_task)
    with pytest.raises(KeyboardInterrupt):
        generate(QUICK, out)
    assert [p.name for p in (tmp_path / "data.h5.work").glob("*.npz")] == ["task000.npz"] and not out.exists()

    trained.clear()
    monkeypatch.setattr(learned_tasks, "learn_task", lambda *args: trained.append(args[1]) or real(*args))
    assert generate(QUICK, out).content_sha256() == quick.content_sha256()
    assert trained == [1] and not (tmp_path / "data.h5.work").exists()


def test_a_task_another_process_is_training_is_left_till_last(quick, tmp_path, monkeypatch):
    real, order = learned_tasks.learn_task, []
    first_run = learned_tasks.run_path(minigrid_learned.learned_recipe(QUICK, 0), 0)
    elsewhere = FileLock(str(lock_file(first_run)))  # another fd: flock treats it as another process
    elsewhere.acquire()

    def learn(recipe, task_id, advance):
        order.append(task_id)
        elsewhere.release()  # the other process finishes while this one trains its next task
        return real(recipe, task_id, advance)

    monkeypatch.setattr(learned_tasks, "learn_task", learn)
    assert generate(QUICK, tmp_path / "data.h5").content_sha256() == quick.content_sha256()
    assert order == [1, 0]


def test_training_stops_at_the_band_and_the_nearest_checkpoint_acts(tmp_path):
    def stopped_at(successes: list[float], quality: str, learning_starts: int = 0) -> list[float]:
        params = minigrid_learned.MiniGridLearnedParams(quality=quality, band=(0.4, 0.6), target_success=0.5)
        checkpoints = [SimpleNamespace(timesteps=i, success=s) for i, s in enumerate(successes)]
        agent = SimpleNamespace(
            recipe=SimpleNamespace(params=params),
            learner=SimpleNamespace(learning_starts=learning_starts),
            name="task",
            checkpoints=lambda resumed: iter(checkpoints),
            snapshots=tmp_path / "none",  # no snapshot to resume from
            at_episode_starts=lambda: False,  # nor one to write
        )
        return [c.success for c in learned_tasks.train(agent, lambda *args, **values: None)]

    assert stopped_at([0.1, 0.3, 0.45, 0.7], "medium") == [0.1, 0.3, 0.45]
    assert stopped_at([0.5, 0.3, 0.45, 0.7], "replay") == [0.5, 0.3, 0.45]  # the untrained policy never stops it
    assert stopped_at([0.1, 0.3, 0.45, 0.7], "expert") == [0.1, 0.3, 0.45, 0.7]
    # SAC's checkpoint at its learning_starts holds the untrained policy again: its luck does not stop the run either
    assert stopped_at([0.1, 0.5, 0.3, 0.45], "medium", learning_starts=1) == [0.1, 0.5, 0.3, 0.45]
    assert learned_tasks.choose_checkpoint([0.1, 0.3, 0.45], "medium", 0.5) == 2
    assert learned_tasks.choose_checkpoint([0.5, 0.1, 0.3], "medium", 0.5) == 2  # nor acts
    assert learned_tasks.choose_checkpoint([0.1, 0.25, 0.75], "replay", 0.5) == 1  # a jump over the band: the nearer, earlier
    assert learned_tasks.choose_checkpoint([0.1, 0.3, 0.7], "expert", 0.5) == 2
    # no trained checkpoint succeeded: no success to be near, so the most trained acts (replay: the whole run)
    assert learned_tasks.choose_checkpoint([0.0, 0.0, 0.0, 0.0], "medium", 0.5) == 3
    assert learned_tasks.choose_checkpoint([0.2, 0.0, 0.0], "replay", 0.5) == 2  # the untrained one's luck counts for nothing
    assert learned_tasks.choose_checkpoint([0.0, 0.0, 0.1, 0.0], "medium", 0.5) == 2  # one success is something to be near
    # nor does it act: MT10's drawer-close succeeded 0.3 untrained (at 0 and 10k steps, SAC's random warm-up) and 1.0 at 20k
    assert learned_tasks.choose_checkpoint([0.3, 0.3, 1.0], "medium", 0.5, first_trained=2) == 2
    assert learned_tasks.choose_checkpoint([0.0, 0.6, 0.0, 0.0], "replay", 0.5, first_trained=2) == 3


@pytest.mark.parametrize(
    "change, message",
    [
        ({"band": [0.6, 0.8]}, r"'band' must hold target_success 0.5"),
        ({"checkpoint_every": 1500}, r"'checkpoint_every' must be a multiple of the agent's rollout of 1024"),
        ({"timesteps": 3072, "checkpoint_every": 2048}, r"'timesteps' must be a multiple of checkpoint_every"),
        ({"quality": "replay"}, r"'episodes_per_task' does not apply to replay"),
        ({"episodes": 3}, r"'episodes' is not a known key"),
        ({"suite": "MT9"}, r"'suite' must be one of"),
    ],
)
def test_bad_recipe_params_are_refused_in_one_line(change, message):
    with pytest.raises(OffbenchError, match=message) as refused:
        minigrid_learned.learned_recipe({**TINY, **change}, 0)
    assert "\n" not in str(refused.value) and "minigrid-learned recipe params" in str(refused.value)


def test_a_missing_stable_baselines3_names_the_extra(monkeypatch, tmp_path):
    import sys

    monkeypatch.setitem(sys.modules, "stable_baselines3", None)  # as if not installed
    with pytest.raises(OffbenchError, match=r"offbench\[learned\]"):
        generate(QUICK, tmp_path / "data.h5")


@pytest.fixture(scope="module", autouse=True)
def module_home(tmp_path_factory):
    """The module's fixtures (`tiny`, `quick`) run before each test's own OFFBENCH_HOME is set: without a home of
    their own they would keep their PPO runs in the user's cache (and reuse them on the next test run)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("OFFBENCH_HOME", str(tmp_path_factory.mktemp("module_home")))
        yield


@pytest.mark.parametrize(
    "lane_seeds, lanes",
    [("per-lane", range(minigrid_learned.N_ENVS)), ("last-lane", [minigrid_learned.N_ENVS - 1] * minigrid_learned.N_ENVS)],
)
def test_training_lanes_reset_with_their_own_seeds_unless_the_recipe_keeps_the_last_lanes(lane_seeds, lanes):
    """Lane j's k-th reset takes training seed 1 + j + n_envs * k; the pinned cards were made with every lane on the
    last lane's sequence (a late-bound loop variable, before commit 9ec811a), and say so to stay re-makeable."""
    recipe = minigrid_learned.learned_recipe({**QUICK, "lane_seeds": lane_seeds}, 0)
    agent = learned_tasks.TaskAgent(recipe, 0, record=False)
    n = minigrid_learned.N_ENVS
    assert [[env.seed_of(k) for k in range(3)] for env in agent.envs] == [
        [episode_seed(0, LAVA, learned_tasks.TRAINING + 1 + j + n * k) for k in range(3)] for j in lanes
    ]
    assert ("lane_seeds" in recipe.behaviour()) == (lane_seeds == "last-lane")  # the default keeps the run keys of before
    pinned = [
        read_card(path).source["recipe"]["params"].get("lane_seeds")
        for path in (Path(__file__).resolve().parents[1] / "datasets" / "minigrid").glob("mt*-*.toml")
    ]
    assert pinned.count("last-lane") == 6
