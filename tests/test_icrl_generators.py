"""Learning-history generators: the data replays exactly in the environment, is reproducible, learned,
and bad recipes fail before any work; the CLI writes and registers datasets."""

import gymnasium as gym
import numpy as np
import pytest
import torch

import offbench
from offbench.data.store import load_native, stored_checksum
from offbench.envs.benchmarks import BENCHMARKS, card_tasks
from offbench.errors import OffbenchError
from offbench.generators.histories import HistoryRecipe, generate, run_histories


def _run(name, seed=0, **params):
    params = {"tasks": 4, "held_out": 1, "histories_per_task": 2, "episodes": 30, **params}
    return run_histories(HistoryRecipe.from_params(name, params), seed)


def _replay_history(store, history):
    """Step the recorded actions of one history through the one-task env; everything must match."""
    card = store.card
    train, _ = card_tasks(card)
    episodes = np.flatnonzero(store.columns["history_id"][store.episode_starts[:-1]] == history)
    task = train[int(store.columns["task_id"][store.episode_starts[episodes[0]]])]
    env = gym.make(card["env"]["id"], **task).unwrapped
    for e in episodes:
        ep = store.episode(int(e))
        obs, _ = env.reset(seed=0)
        for t, action in enumerate(ep["actions"]):
            np.testing.assert_array_equal(obs, ep["observations"][t])
            assert env.optimal_action(obs) == ep["optimal_action"][t]
            obs, reward, term, trunc, _ = env.step(int(action))
            assert (reward, term, trunc) == (ep["rewards"][t], ep["terminations"][t], ep["truncations"][t])
        np.testing.assert_array_equal(obs, ep["observations"][-1])  # the final observation is kept
        assert term or trunc


@pytest.mark.parametrize(
    "name,algo", [("darkroom", "q-learning"), ("darkroom-hard", "ad-epsilon"), ("keydoor", "q-learning"), ("keydoor", "ad-epsilon")]
)
def test_grid_histories_replay_exactly_and_are_laid_out_history_by_history(name, algo):
    store, summary = _run(name, algo=algo, episodes=40)
    cols = store.columns
    assert store.num_episodes == 3 * 2 * 40
    first = store.episode_starts[:-1]
    assert np.all(np.diff(cols["history_id"]) >= 0)  # histories contiguous, in order
    np.testing.assert_array_equal(cols["episode_in_history"][first], np.tile(np.arange(40), 6))
    np.testing.assert_array_equal(cols["task_id"][first], np.repeat([0, 1, 2], 80))
    assert store.terminations.sum() + store.truncations.sum() == store.num_episodes
    if name == "darkroom":
        assert not store.terminations.any() and np.all(store.episode_lengths == 20)  # time limit only
    for history in (0, 5):
        _replay_history(store, history)
    assert summary["histories"] == 6 and store.card["learning"] == summary


def test_key_to_door_episodes_end_by_termination_at_the_door_with_the_key():
    store, _ = _run("keydoor", algo="ad-epsilon", episodes=60)
    ends = store.episode_starts[1:] - 1
    terminated = store.terminations[ends]
    assert terminated.any() and (~terminated).any()
    train, _ = card_tasks(store.card)
    tasks = store.columns["task_id"][ends]
    doors = np.array([train[t]["door"] for t in tasks])
    finals = store.final_observations
    assert np.all(finals[terminated, 2] == 1) and np.all(finals[terminated, :2] == doors[terminated])
    assert np.all(store.episode_lengths[~terminated] == 50)
    np.testing.assert_array_equal(store.episode_returns()[terminated], 2.0)


@pytest.mark.parametrize(
    "name,algo",
    [
        ("bandit", "ucb"),
        ("bandit", "thompson"),
        ("bandit-gaussian", "ucb"),
        ("bandit-gaussian", "thompson"),
        ("bandit-gaussian", "ad-epsilon"),
    ],
)
def test_bandit_histories_are_one_pull_episodes_that_learn(name, algo):
    store, summary = _run(name, algo=algo, tasks=12, held_out=2, episodes=200)
    assert np.all(store.episode_lengths == 1) and store.terminations.all() and not store.truncations.any()
    train, _ = card_tasks(store.card)
    best = np.array([np.argmax(train[t]["means"]) for t in store.columns["task_id"]])
    np.testing.assert_array_equal(store.columns["optimal_action"], best)
    assert summary["histories_improved"] >= 0.8 * summary["histories"]
    assert summary["last_optimal_action_rate"] > summary["first_optimal_action_rate"] + 0.1


def test_dirichlet_rollin_pulls_ignore_the_task_and_need_no_learning_check(tmp_path):
    """DPT's roll-in: each history pulls i.i.d. from its own arm distribution, a Dirichlet(1) draw mixed with a
    point mass on a random arm with weight w in {0, 0.1, ..., 1}; the best arm is pulled no more than any other."""
    path = generate("bandit", {"algo": "dirichlet", "tasks": 401, "held_out": 1, "episodes": 200}, 0, tmp_path / "d.h5", quiet=True)
    store = load_native(path)  # generated without allow_unlearned: a roll-in is not held to the learning check
    pulls = store.actions.reshape(400, 200).astype(int)
    counts = np.stack([np.bincount(row, minlength=10) for row in pulls])
    best = store.columns["optimal_action"].reshape(400, 200)[:, 0]
    assert abs(counts[np.arange(400), best].mean() / 200 - 0.1) < 0.02  # the best arm gets a tenth of the pulls
    single_arm = (counts.max(axis=1) == 200).mean()
    assert 0.04 < single_arm < 0.15  # w = 1 (a pure point mass) in 1 history of 11
    first, second = (np.stack([np.bincount(r, minlength=10) for r in half]) for half in (pulls[:, :100], pulls[:, 100:]))
    same_favourite = (first.argmax(axis=1) == second.argmax(axis=1)).mean()
    assert same_favourite > 0.6  # one fixed distribution per history, not a fresh one per pull
    assert len(np.unique(counts.argmax(axis=1))) == 10  # and the favoured arms vary across histories
    a = load_native(generate("bandit", {"algo": "dirichlet", "tasks": 11, "held_out": 1, "episodes": 20}, 3, tmp_path / "a.h5", quiet=True))
    b = load_native(generate("bandit", {"algo": "dirichlet", "tasks": 11, "held_out": 1, "episodes": 20}, 3, tmp_path / "b.h5", quiet=True))
    assert a.content_sha256() == b.content_sha256()


def test_uniform_states_rollin_draws_every_transition_from_a_uniform_cell_as_a_one_step_episode(tmp_path):
    """DPT's grid roll-in: a cell and an action drawn uniformly before every transition, each transition its own
    episode, so the stored s' is the step's own next cell; the card's environment keeps its 20-step episodes."""
    from offbench.envs.gridworld import MOVES, cell_index, policy_table

    path = generate(
        "darkroom",
        {"algo": "uniform-states", "tasks": 81, "held_out": 16, "histories_per_task": 4, "episodes": 100},
        0,
        tmp_path / "u.h5",
        quiet=True,
    )
    store = load_native(path)  # generated without allow_unlearned: a roll-in is not held to the learning check
    steps = 65 * 4 * 100
    assert len(store.actions) == steps and np.array_equal(store.episode_starts, np.arange(steps + 1))
    observations, next_cells = store.observations.astype(int), store.final_observations.astype(int)
    cells = cell_index(observations, 9)
    counts = np.bincount(cells, minlength=81)
    assert counts.min() > 0.75 * steps / 81 and counts.max() < 1.25 * steps / 81  # every cell, not paths from the centre
    assert abs((cells == cell_index(np.array([4, 4]), 9)).mean() - 1 / 81) < 0.005
    assert np.bincount(store.actions, minlength=5).min() > 0.18 * steps
    assert np.array_equal(next_cells, np.clip(observations + np.asarray(MOVES)[store.actions], 0, 8))
    train, _ = card_tasks(store.card)
    goals = np.array([t["goal"] for t in train])[store.columns["task_id"]]
    assert np.array_equal(store.rewards, (next_cells == goals).all(axis=1).astype(np.float32))
    assert np.array_equal(store.columns["optimal_action"], policy_table(9)[cell_index(goals, 9), cells])
    assert store.card["env"]["id"] == "offbench/DarkRoom-v0" and BENCHMARKS["darkroom"].make_batch(train[:1]).horizon == 20


@pytest.mark.parametrize("name", ["darkroom", "keydoor"])
def test_a_roll_in_records_the_optimal_return_of_the_environments_own_episodes(name):
    """A roll-in's episodes are one step long, but the card's environment (what evaluation runs, and the optimal line
    of the learning-history figure) keeps its horizon: the recorded optimum is the mean over the histories of their
    task's optimal return over a full episode, as a learner's card records it."""
    store, summary = _run(name, algo="uniform-states", episodes=10)
    train, _ = card_tasks(store.card)
    tasks = store.columns["task_id"][store.episode_starts[:-1]].reshape(-1, 10)[:, 0]  # each history's task
    full = [gym.make(store.card["env"]["id"], **task).unwrapped.optimal_return for task in train]
    assert np.all(store.episode_lengths == 1) and summary["optimal_return"] == pytest.approx(np.mean(np.array(full)[tasks]))
    assert summary["optimal_return"] > 1 and store.card["learning"] == summary
    learner = _run(name, algo="q-learning", episodes=10, allow_unlearned=True)[1]
    assert learner["optimal_return"] == pytest.approx(summary["optimal_return"])


def test_ucb_pulls_every_arm_once_first():
    store, _ = _run("bandit", algo="ucb", tasks=3, held_out=1, episodes=20)
    first = store.actions[store.columns["history_id"] == 0][:10]
    np.testing.assert_array_equal(first, np.arange(10))


def test_q_learning_histories_learn_towards_the_optimum():
    store, summary = _run("darkroom", tasks=6, held_out=1, histories_per_task=2, episodes=150)
    assert summary["histories_improved"] == summary["histories"] == 10
    assert summary["first_fraction_of_optimal"] < 0.2 < 0.8 < summary["last_fraction_of_optimal"]
    assert summary["last_optimal_action_rate"] > summary["first_optimal_action_rate"]


def test_same_recipe_and_seed_give_identical_data_and_another_seed_does_not(tmp_path):
    params = {"algo": "q-learning", "tasks": 5, "held_out": 1, "histories_per_task": 2, "episodes": 50, "allow_unlearned": True}
    a = load_native(generate("keydoor", params, 3, tmp_path / "a.h5", quiet=True))
    b = load_native(generate("keydoor", params, 3, tmp_path / "b.h5", quiet=True))
    c = load_native(generate("keydoor", params, 4, tmp_path / "c.h5", quiet=True))
    assert a.content_sha256() == b.content_sha256() != c.content_sha256()
    assert a.card == b.card


def test_histories_that_never_learn_are_refused_unless_allowed(tmp_path, capsys):
    params = {"tasks": 4, "held_out": 1, "episodes": 40, "hyperparameters": {"epsilon_end": 1.0}}  # never stops acting at random
    with pytest.raises(OffbenchError, match="learning histories improved.*--allow-unlearned"):
        generate("darkroom", dict(params), 0, tmp_path / "d.h5", quiet=True)
    assert not list(tmp_path.iterdir())
    path = generate("darkroom", {**params, "allow_unlearned": True}, 0, tmp_path / "d.h5", quiet=True)
    assert "did not improve" in capsys.readouterr().err
    learning = load_native(path).card["learning"]
    assert learning["histories_improved"] < learning["histories"] and learning["unimproved_history_ids"]


@pytest.mark.parametrize(
    "params,message",
    [
        ({"tasks": 0, "held_out": 0}, "tasks must be at least 1"),
        ({"tasks": 3, "held_out": 3}, "held-out"),
        ({"tasks": 3, "held_out": 5}, "held-out"),
        ({"tasks": 3, "held_out": 1, "episodes": -5}, "episodes must be at least 1"),
        ({"tasks": 3, "held_out": 1, "histories_per_task": 0}, "histories-per-task"),
        ({"tasks": 3, "held_out": 1, "algo": "ucb"}, "unknown algorithm 'ucb' for darkroom"),
        ({"tasks": 82, "held_out": 1}, "81 distinct tasks"),
        ({"tasks": 3, "held_out": 1, "variant": "adversarial"}, "unknown variant"),
        ({"tasks": 3, "held_out": 1, "hyperparameters": {"alpha": 1}}, "unknown hyper-parameter"),
        ({"tasks": "3", "held_out": 1}, "tasks must be an integer"),
        ({"tasks": 3, "held_out": 1, "epsiodes": 3}, "unknown recipe parameter"),
    ],
)
def test_bad_recipes_fail_with_one_line_before_any_work(tmp_path, params, message):
    with pytest.raises(OffbenchError, match=message) as info:
        generate("darkroom", params, 0, tmp_path / "x.h5", quiet=True)
    assert "\n" not in str(info.value)
    assert not list(tmp_path.iterdir())


def test_every_recipe_card_validates_and_the_small_ones_generate(isolated_home):
    from offbench.data.cards import all_cards

    cards = {
        c.id: c
        for c in all_cards().values()
        if c.kind == "learning-history" and c.source_kind == "recipe" and c.source["recipe"]["generator"] in BENCHMARKS
    }
    assert {f"{name}-small" for name in BENCHMARKS} <= set(cards) and set(BENCHMARKS) <= set(cards)
    for card in cards.values():
        recipe = card.source["recipe"]
        HistoryRecipe.from_params(recipe["generator"], recipe["params"])
        assert card.env["id"] == BENCHMARKS[recipe["generator"]].env_id and card.env["suite"] == "offbench"
    store = offbench.load("darkroom-small")
    assert card_tasks(cards["darkroom-small"]) == card_tasks(store.card)  # recipe card and generated card agree
    assert store.num_transitions == 8 * 2 * 200 * 20
    assert store.card["learning"]["histories_improved"] == store.card["learning"]["histories"]
    assert (isolated_home / "data" / "darkroom-small" / "data.h5").is_file()


def test_cli_generates_registers_and_is_reproducible(run_cli, isolated_home, tmp_path):
    args = ["generate", "darkroom", "--tasks", "4", "--held-out", "1", "--histories-per-task", "2", "--episodes", "120", "-q"]
    proc = run_cli(*args, check=True)
    dataset_id = "generated/darkroom-q-learning-t4-ho1-h2-e120-s0"
    assert f"registered as {dataset_id}" in proc.stdout
    assert (isolated_home / "datasets" / f"{dataset_id}.toml").is_file()
    info = run_cli("info", dataset_id, check=True)
    assert "720" in info.stdout and "14,400" in info.stdout  # 3 training tasks x 2 histories x 120 episodes x 20 steps
    first = load_native(isolated_home / "data" / dataset_id / "data.h5").content_sha256()
    run_cli(*args, "--out", tmp_path / "out", "--workers", "1", check=True)
    assert load_native(tmp_path / "out" / "data.h5").content_sha256() == first
    assert (tmp_path / "out" / "card.toml").is_file()


@pytest.mark.parametrize(
    "args,message",
    [
        (["darkroom", "--tasks", "0"], "tasks must be at least 1"),
        (["darkroom", "--tasks", "3", "--held-out", "4"], "held-out"),
        (["keydoor", "--tasks", "3", "--episodes", "-2"], "episodes must be at least 1"),
        (["bandit", "--tasks", "3", "--algo", "q-learning"], "unknown algorithm 'q-learning' for bandit"),
        (["keydoor", "--tasks", "3", "--variant", "uniform"], "No such option: --variant"),
        (["keydoor"], "Missing option '--tasks'"),
        (["darkroom", "--tasks", "3", "--set", "alpha=1"], "unknown hyper-parameter"),
        (["darkroom", "--tasks", "3", "--workers", "0"], "--workers must be at least 1"),
        (["darkroom", "--tasks", "3", "--algo", "ad-epsilon", "--set", "per_episode_schedule=1"], "true or false"),
    ],
)
def test_cli_bad_input_is_one_line_exit_2_and_writes_nothing(run_cli, isolated_home, args, message):
    proc = run_cli("generate", *args)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert not isolated_home.exists() or not any(p.is_file() for p in isolated_home.rglob("*"))


def test_many_histories_run_in_seeded_chunks_and_join_in_order():
    params = {"algo": "thompson", "tasks": 301, "held_out": 1, "histories_per_task": 2, "episodes": 8}  # 600 histories: 3 chunks
    a, _ = run_histories(HistoryRecipe.from_params("bandit", params), 5)
    b, _ = run_histories(HistoryRecipe.from_params("bandit", params), 5)
    assert a.content_sha256() == b.content_sha256()
    np.testing.assert_array_equal(a.columns["history_id"], np.repeat(np.arange(600), 8))
    np.testing.assert_array_equal(a.columns["task_id"], np.repeat(np.arange(300), 16))
    np.testing.assert_array_equal(a.columns["episode_in_history"], np.tile(np.arange(8), 600))
    train, _ = card_tasks(a.card)
    best = np.array([np.argmax(t["means"]) for t in train])
    np.testing.assert_array_equal(a.columns["optimal_action"], best[a.columns["task_id"]])


def test_ad_epsilon_schedule_is_the_published_one_per_step_with_a_switch_for_per_episode():
    """corl-team/ad-eps (dark_room/generate_trajectories.py): epsilon starts at 1 and falls by
    1 / (0.9 * steps in the history) after every step, down to 0."""
    from offbench.generators.sources import ADEpsilon, RowStreams, make_config

    env = BENCHMARKS["darkroom"].make_batch([{"goal": [0, 0]}])
    published = ADEpsilon(env, 10, RowStreams([np.random.default_rng(0)], [1]), make_config("ad-epsilon", {})).explore.epsilons
    np.testing.assert_allclose(published, np.maximum(0.0, 1.0 - np.arange(200) / 180))
    old = ADEpsilon(
        env, 10, RowStreams([np.random.default_rng(0)], [1]), make_config("ad-epsilon", {"per_episode_schedule": True})
    ).explore.epsilons
    np.testing.assert_allclose(old, np.repeat(np.linspace(1.0, 0.0, 10), 20))
    with pytest.raises(ValueError, match="true or false"):
        make_config("ad-epsilon", {"per_episode_schedule": 1})

    store, _ = _run("keydoor", algo="ad-epsilon", episodes=50)  # terminations: the schedule counts nominal steps
    first = store.episode_starts[:-1]
    step_in_episode = np.arange(store.num_transitions) - np.repeat(first, store.episode_lengths)
    nominal = store.columns["episode_in_history"] * 50 + step_in_episode
    random_looking = store.actions != store.columns["optimal_action"]
    assert not random_looking[nominal >= 0.9 * 50 * 50].any()  # epsilon is 0 over the last tenth
    assert random_looking[nominal < 0.5 * 50 * 50].mean() > 0.3


def test_docs_state_the_adversarial_bandit_probabilities_the_code_draws():
    import re
    from pathlib import Path

    from offbench.envs.bandits import ADVERSARIAL_FAVOUR_PROBABILITY
    from offbench.envs.benchmarks import split_tasks

    text = " ".join((Path(__file__).parents[1] / "docs" / "in-context-rl.md").read_text().split())
    train, held_out = split_tasks(BENCHMARKS["bandit"], 4000, 2000, 0, "adversarial")
    for split, parity, tasks in (("training", 1, train), ("held-out", 0, held_out)):
        name = "odd" if parity else "even"
        stated = re.search(rf"each {split} task favours {name} arms with probability ([0-9.]+)", text)
        assert stated and float(stated.group(1)) == ADVERSARIAL_FAVOUR_PROBABILITY, f"docs on {split} tasks"
        means = np.array([t["means"] for t in tasks])
        favoured = means[:, parity::2].min(axis=1) >= 0.5
        assert abs(favoured.mean() - ADVERSARIAL_FAVOUR_PROBABILITY) < 0.02


def test_cli_set_passes_hyperparameters_into_the_recipe(run_cli, tmp_path):
    run_cli(
        "generate",
        "darkroom",
        "--algo",
        "ad-epsilon",
        "--tasks",
        "3",
        "--held-out",
        "1",
        "--episodes",
        "20",
        "--set",
        "per_episode_schedule=true",
        "--out",
        tmp_path,
        "-q",
        check=True,
    )
    recipe = load_native(tmp_path / "data.h5").card["source"]["recipe"]
    assert recipe["params"]["hyperparameters"] == {"per_episode_schedule": True}
    assert "-e20-" in load_native(tmp_path / "data.h5").card["id"]


@pytest.mark.parametrize("loop", ["numba", "numpy"])
@pytest.mark.parametrize(
    "name,algo",
    [
        ("darkroom", "q-learning"),
        ("keydoor", "ad-epsilon"),
        ("bandit", "thompson"),
        ("bandit-gaussian", "thompson"),
        ("bandit", "dirichlet"),
        ("darkroom", "uniform-states"),
    ],
)
def test_same_bytes_whatever_the_number_of_workers_and_groups(tmp_path, monkeypatch, name, algo, loop):
    """Histories come in random streams of 16, drawn in blocks of 256 steps; workers (one group each) and the
    blocks of time the groups write in only change who runs them and when, with either inner loop."""
    import offbench.generators.histories as histories
    import offbench.generators.rollout as rollout

    if loop == "numba":
        pytest.importorskip("numba", reason="the compiled loop needs the 'fast' extra (numba)")
    monkeypatch.setenv("OFFBENCH_GENERATOR_LOOP", loop)

    params = {
        "algo": algo,
        "tasks": 36,
        "held_out": 1,
        "histories_per_task": 2,
        "episodes": 15,
        "allow_unlearned": True,
    }  # 70 histories: 5 streams
    recipe = HistoryRecipe.from_params(name, params)
    histories.write_histories(recipe, 7, tmp_path / "one.h5", workers=1, check=False)
    histories.write_histories(recipe, 7, tmp_path / "two.h5", workers=2, check=False)
    monkeypatch.setattr(rollout, "BLOCK_CELLS", 1)  # blocks of one episode (or step): the data streams out in many blocks
    assert histories._Plan.make(recipe, 7, card_tasks(load_native(tmp_path / "one.h5").card)[0], 5).num_groups == 5
    histories.write_histories(recipe, 7, tmp_path / "parts.h5", workers=5, check=False)
    one = (tmp_path / "one.h5").read_bytes()
    assert one == (tmp_path / "two.h5").read_bytes() == (tmp_path / "parts.h5").read_bytes()
    store = load_native(tmp_path / "one.h5")
    assert store.content_sha256() == stored_checksum(tmp_path / "one.h5")


def test_grid_observations_are_stored_in_the_smallest_dtype_and_samplers_read_them():
    from offbench.data.samplers import make_sampler

    store, _ = _run("darkroom-hard", algo="ad-epsilon", episodes=20)
    assert store.observations.dtype == np.uint8 and store.final_observations.dtype == np.uint8
    assert store.actions.dtype == np.uint8 and store.columns["optimal_action"].dtype == np.uint8
    assert store.observation_space.contains(store.observations[0].astype(np.int64))
    for kind, options in (("transitions", {}), ("ad_windows", {"window_length": 30}), ("dpt", {"context_size": 8})):
        batch = make_sampler(kind, store, batch_size=16, seed=0, **options).sample()
        for key, value in batch.items():
            if key.endswith("observations"):
                assert value.dtype == torch.float32 and 0 <= value.min() and value.max() <= 16, (kind, key)
            if key.endswith("actions"):
                assert value.dtype == torch.int64 and 0 <= value.min() and value.max() <= 4, (kind, key)


@pytest.mark.parametrize("name,algo", [("darkroom", "q-learning"), ("keydoor", "ad-epsilon")])
def test_progress_bar_counts_every_episode_once(tmp_path, monkeypatch, name, algo):
    """Key-to-Door's staged generation maps its workers twice (run, then lay out): the bar must not count again."""
    import contextlib

    import offbench.generators.histories as histories

    shown: list[int] = []

    @contextlib.contextmanager
    def recording_bar(quiet, label, total, **_):
        shown.append(0)
        yield lambda n, **values: shown.__setitem__(0, shown[0] + n)
        assert shown[0] == total, f"bar ended at {shown[0]} of {total}"

    monkeypatch.setattr(histories, "progress_bar", recording_bar)
    params = {"algo": algo, "tasks": 12, "held_out": 2, "histories_per_task": 2, "episodes": 15, "allow_unlearned": True}
    histories.write_histories(HistoryRecipe.from_params(name, params), 0, tmp_path / "d.h5", workers=2, check=False)
    assert shown == [10 * 2 * 15]


GRID_RECIPES = [
    ("darkroom", "q-learning"),
    ("darkroom", "ad-epsilon"),
    ("darkroom-hard", "q-learning"),
    ("keydoor", "q-learning"),
    ("keydoor", "ad-epsilon"),
]


@pytest.mark.parametrize("name,algo", GRID_RECIPES)
def test_compiled_loop_writes_the_numpy_loops_bytes(tmp_path, monkeypatch, name, algo):
    """The compiled loop (numba) is the NumPy loop made fast, not another algorithm: same file, byte for byte,
    in lockstep (Dark Room) and where episodes end early (Key-to-Door, Dark Room Hard), also when blocks of log
    are cut at every episode (spans of a few steps, finishing mid-block)."""
    pytest.importorskip("numba", reason="the compiled loop needs the 'fast' extra (numba)")
    import offbench.generators.histories as histories
    import offbench.generators.rollout as rollout

    params = {"algo": algo, "tasks": 10, "held_out": 1, "histories_per_task": 3, "episodes": 40, "allow_unlearned": True}
    recipe = HistoryRecipe.from_params(name, params)
    files = {}
    for loop, cells in (("numpy", rollout.BLOCK_CELLS), ("numba", rollout.BLOCK_CELLS), ("numba", 1)):
        monkeypatch.setenv("OFFBENCH_GENERATOR_LOOP", loop)
        monkeypatch.setattr(rollout, "BLOCK_CELLS", cells)
        out = tmp_path / f"{loop}-{cells}.h5"
        histories.write_histories(recipe, 3, out, workers=1, check=False)
        files[loop, cells] = out.read_bytes()
    assert len(set(files.values())) == 1, [key for key in files if files[key] != files["numpy", rollout.BLOCK_CELLS]]
    store = load_native(tmp_path / "numba-1.h5")
    assert store.num_episodes == 27 * 40  # every history ran all its episodes, none past them


def test_the_generator_loop_is_chosen_by_name_and_a_bad_name_is_one_line(monkeypatch, tmp_path):
    import offbench.generators.compiled as compiled

    monkeypatch.setenv("OFFBENCH_GENERATOR_LOOP", "fortran")
    recipe = HistoryRecipe.from_params("darkroom", {"tasks": 3, "held_out": 1, "episodes": 10})
    with pytest.raises(OffbenchError, match="OFFBENCH_GENERATOR_LOOP must be one of numba, numpy"):
        generate("darkroom", recipe.to_params(), 0, tmp_path / "x.h5", quiet=True)
    assert not any(tmp_path.iterdir())
    monkeypatch.setenv("OFFBENCH_GENERATOR_LOOP", "numba")
    monkeypatch.setattr(compiled.importlib.util, "find_spec", lambda name: None)  # as where numba is not installed
    with pytest.raises(OffbenchError, match="numba is not installed"):
        compiled.selected_loop()
    monkeypatch.delenv("OFFBENCH_GENERATOR_LOOP")
    assert compiled.selected_loop() == "numpy"  # without numba the NumPy loop runs


def test_the_compiled_loop_is_picked_only_where_it_repays_numbas_start(monkeypatch):
    """numba takes about a second to start: small jobs (the tests', darkroom-small) keep the NumPy loop, long
    histories (Key-to-Door's 2,000 x 50 steps) take the compiled one; both give the same bytes."""
    pytest.importorskip("numba", reason="the compiled loop needs the 'fast' extra (numba)")
    import offbench.generators.compiled as compiled

    monkeypatch.delenv("OFFBENCH_GENERATOR_LOOP", raising=False)
    assert compiled.selected_loop(group_steps=40 * 20, history_steps=27 * 40 * 20) == "numpy"
    assert compiled.selected_loop(group_steps=1000 * 20, history_steps=260 * 1000 * 20) == "numpy"  # the 10.4M command
    assert compiled.selected_loop(group_steps=2000 * 50, history_steps=125 * 2000 * 50) == "numba"
    assert compiled.selected_loop() == "numba"  # size unknown
