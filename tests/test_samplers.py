"""Samplers on hand-built datasets whose every batch entry can be checked against a brute-force answer (DPT's queries
also on tiny generated learning histories, checked against the one-task environments)."""

import io

import gymnasium as gym
import numpy as np
import pytest
import torch
from helpers import make_store

from offbench.data.samplers import SAMPLERS, make_sampler, returns_to_go
from offbench.data.store import EpisodeStore, load_native
from offbench.envs.benchmarks import card_tasks
from offbench.envs.darkroom import DarkRoomEnv
from offbench.envs.gridworld import cell_index, cell_xy_table, policy_table
from offbench.errors import OffbenchError
from offbench.generators.histories import HistoryRecipe, run_histories


def find_rows(haystack: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Index of each row of `rows` in `haystack` (rows are random floats, so matches are unique)."""
    flat = haystack.reshape(len(haystack), -1)
    return np.array([int(np.flatnonzero((flat == r).all(axis=1))[0]) for r in rows.reshape(len(rows), -1)])


def history_store():
    """Two learning histories: history 0 = episodes of lengths 3, 4, 2; history 1 = episodes 5, 3."""
    lengths = (3, 4, 2, 5, 3)
    histories = iter([0, 0, 0, 1, 1])
    tasks = iter([7, 7, 7, 9, 9])
    return make_store(
        episode_lengths=lengths,
        terminal_last=(False, True, False, True, False),
        history_id=lambda n, h=histories: np.full(n, next(h), np.int64),
        task_id=lambda n, t=tasks: np.full(n, next(t), np.int64),
    )


# ----------------------------------------------------------------------------- transitions


def test_transitions_next_obs_at_episode_end_is_final_observation_and_timeout_not_terminal():
    store = make_store()  # lengths 3, 5, 2; episode 1 ends by truncation
    batch = make_sampler("transitions", store, batch_size=400, seed=0).sample()
    obs = batch["observations"].numpy()
    index = find_rows(np.asarray(store.observations), obs)
    assert set(index) == set(range(10))  # every step is reachable
    expected_next = store.next_observations(index)
    np.testing.assert_array_equal(batch["next_observations"].numpy(), expected_next)
    for i, row in zip(index, batch["next_observations"].numpy()):
        if i in (2, 7, 9):  # last steps: s' is the stored final observation
            np.testing.assert_array_equal(row, store.final_observations[[2, 7, 9].index(i)])
    np.testing.assert_array_equal(batch["actions"].numpy(), store.actions[index])
    np.testing.assert_array_equal(batch["rewards"].numpy(), store.rewards[index])
    terminals = batch["terminals"].numpy()
    assert terminals.dtype == np.float32
    assert set(index[terminals == 1.0]) == {2, 9}  # step 7 is a timeout: not terminal
    assert "task_ids" not in batch


def test_transitions_task_ids_and_discrete_actions():
    store = make_store(task_id=lambda n: np.full(n, n, np.int32))  # task = episode length
    store.actions = np.arange(10, dtype=np.int64) % 3
    batch = make_sampler("transitions", store, batch_size=50, seed=1).sample()
    index = find_rows(np.asarray(store.observations), batch["observations"].numpy())
    assert batch["actions"].dtype == torch.int64 and batch["actions"].shape == (50,)
    np.testing.assert_array_equal(batch["actions"].numpy(), index % 3)
    assert batch["task_ids"].dtype == torch.int64
    np.testing.assert_array_equal(batch["task_ids"].numpy(), store.columns["task_id"][index])


# ----------------------------------------------------------------------------- segments


def brute_force_rtg(store):
    out = []
    for e in range(store.num_episodes):
        r = store.episode(e)["rewards"].astype(np.float64)
        out += [sum(r[t:]) for t in range(len(r))]
    return np.array(out)


def test_returns_to_go_match_brute_force():
    store = make_store(episode_lengths=(3, 1, 6, 2), terminal_last=(True, True, False, True))
    np.testing.assert_allclose(returns_to_go(store.rewards, store.episode_starts), brute_force_rtg(store), rtol=1e-12, atol=1e-12)


def test_segments_left_padding_mask_timesteps_and_rtg():
    store = make_store(episode_lengths=(3, 5, 2), terminal_last=(True, False, True))
    K = 4
    batch = make_sampler("segments", store, batch_size=300, seed=0, segment_length=K).sample()
    shapes = {k: tuple(v.shape) for k, v in batch.items()}
    assert shapes == {
        "observations": (300, K, 4),
        "actions": (300, K, 2),
        "rewards": (300, K),
        "returns_to_go": (300, K),
        "timesteps": (300, K),
        "mask": (300, K),
    }
    assert batch["mask"].dtype == torch.bool and batch["timesteps"].dtype == torch.int64
    rtg = brute_force_rtg(store)
    all_obs = np.asarray(store.observations)
    seen_last = set()
    for b in range(300):
        mask = batch["mask"][b].numpy()
        real = int(mask.sum())
        assert mask.tolist() == [False] * (K - real) + [True] * real  # LEFT padding
        last = find_rows(all_obs, batch["observations"][b, -1:].numpy())[0]
        seen_last.add(last)
        e = int(np.searchsorted(store.episode_starts, last, side="right") - 1)
        first = max(last - K + 1, int(store.episode_starts[e]))
        steps = np.arange(first, last + 1)
        assert real == len(steps)
        np.testing.assert_array_equal(batch["observations"][b, K - real :].numpy(), all_obs[steps])
        np.testing.assert_array_equal(batch["actions"][b, K - real :].numpy(), store.actions[steps])
        np.testing.assert_allclose(batch["rewards"][b, K - real :].numpy(), store.rewards[steps], rtol=1e-6)
        np.testing.assert_allclose(batch["returns_to_go"][b, K - real :].numpy(), rtg[steps], rtol=1e-5, atol=1e-6)
        assert batch["timesteps"][b, K - real :].tolist() == (steps - store.episode_starts[e]).tolist()
        for key in ("observations", "actions", "rewards", "returns_to_go", "timesteps"):
            assert not batch[key][b, : K - real].any()  # padding is zero
    assert seen_last == set(range(10))  # every step can be the last token of a segment


def test_segment_at_episode_start_is_mostly_padding():
    store = make_store(episode_lengths=(3, 5, 2))
    batch = make_sampler("segments", store, batch_size=200, seed=3, segment_length=6).sample()
    starts = batch["mask"].sum(1) == 1  # segments whose last token is an episode's first step
    assert starts.any()
    assert (batch["timesteps"][starts, -1] == 0).all()
    firsts = np.asarray(store.observations)[store.episode_starts[:-1]]
    for row in batch["observations"][starts, -1].numpy():
        assert (firsts == row).all(axis=1).any()


def test_segments_end_uniformly_over_steps():
    """Episodes are drawn in proportion to their length (DT's and CORL's sampling): with episodes of 1 and
    9 steps and K = 2, a lone token (mask sum 1) ends 2 of the 10 steps."""
    store = make_store(episode_lengths=(1, 9), terminal_last=(True, True))
    batch = make_sampler("segments", store, batch_size=4000, seed=0, segment_length=2).sample()
    assert abs(float((batch["mask"].sum(1) == 1).float().mean()) - 0.2) < 0.03


def test_segments_task_ids():
    batch = make_sampler("segments", history_store(), batch_size=64, seed=0, segment_length=3).sample()
    assert set(batch["task_ids"].tolist()) <= {7, 9} and batch["task_ids"].shape == (64,)


# ----------------------------------------------------------------------------- AD windows


def test_ad_windows_stay_in_one_history_and_cross_episode_boundaries():
    store = history_store()  # history 0: steps 0..8, history 1: steps 9..16
    T = 6
    batch = make_sampler("ad_windows", store, batch_size=500, seed=0, window_length=T).sample()
    assert batch["observations"].shape == (500, T, 4) and batch["rewards"].shape == (500, T)
    hist = store.columns["history_id"]
    firsts = set()
    crosses = 0
    for b in range(500):
        index = find_rows(np.asarray(store.observations), batch["observations"][b].numpy())
        np.testing.assert_array_equal(index, np.arange(index[0], index[0] + T))  # consecutive steps
        assert len(set(hist[index])) == 1  # never mixes histories
        np.testing.assert_array_equal(batch["actions"][b].numpy(), store.actions[index])
        np.testing.assert_array_equal(batch["rewards"][b].numpy(), store.rewards[index])
        assert batch["task_ids"][b] == store.columns["task_id"][index[0]]
        episodes = np.searchsorted(store.episode_starts, index, side="right") - 1
        crosses += len(set(episodes)) > 1
        firsts.add(int(index[0]))
    assert crosses == 500  # T=6 exceeds every episode here, so every window spans episodes
    assert firsts == set(range(0, 9 - T + 1)) | set(range(9, 17 - T + 1))  # every valid start reached


def test_ad_window_longer_than_a_history_is_a_one_line_error(tmp_path):
    path = history_store().save(tmp_path / "hist.h5")
    store = load_native(path)
    with pytest.raises(OffbenchError, match=r"hist\.h5: window_length 20 is longer than history") as info:
        make_sampler("ad_windows", store, batch_size=4, seed=0, window_length=20)
    assert "\n" not in str(info.value) and str(info.value).endswith("so at most 8")  # the shortest history's 8 steps
    with pytest.raises(OffbenchError, match="history_id"):
        make_sampler("ad_windows", make_store(), batch_size=4, seed=0, window_length=2)


def test_ad_history_split_in_two_runs_is_rejected():
    ids = iter([0, 1, 0])
    store = make_store(history_id=lambda n, h=ids: np.full(n, next(h)))
    with pytest.raises(OffbenchError, match="history_id 0 is split"):
        make_sampler("ad_windows", store, batch_size=4, seed=0, window_length=2)


# ----------------------------------------------------------------------------- DPT


DPT_CARD = {
    "id": "test/hand-built-darkroom",
    "kind": "learning-history",
    "env": {"suite": "offbench", "id": "offbench/DarkRoom-v0"},
    "split": {"seed": 0, "train": [{"goal": [6, 2]}, {"goal": [1, 7]}], "held_out": [{"goal": [3, 3]}]},
}


def dpt_store(card=DPT_CARD):
    """Hand-built Dark Room learning histories and the card that describes them: histories 0 (episodes of 3, 4, 2
    steps) and 1 (5, 3) of task 0, history 2 (6, 4) of task 1. Every step is in a cell of its own, so a batch's
    rows trace back to the steps they came from; optimal_action is the task's move there, as the generator writes it."""
    rng = np.random.default_rng(0)
    cells = iter(rng.permutation(81))
    goals = cell_index(np.array([task["goal"] for task in card["split"]["train"]]), 9)
    episodes = []
    for length, history, task in zip((3, 4, 2, 5, 3, 6, 4), (0, 0, 0, 1, 1, 2, 2), (0, 0, 0, 0, 0, 1, 1)):
        steps = np.array([next(cells) for _ in range(length)])
        truncations = np.zeros(length, bool)
        truncations[-1] = True
        episodes.append(
            {
                "observations": cell_xy_table(9)[np.append(steps, rng.integers(0, 81))],
                "actions": rng.integers(0, 5, length),
                "rewards": rng.integers(0, 2, length).astype(np.float32),
                "terminations": np.zeros(length, bool),
                "truncations": truncations,
                "history_id": np.full(length, history),
                "task_id": np.full(length, task),
                "optimal_action": policy_table(9)[goals[task], steps],
            }
        )
    return EpisodeStore.from_episodes(
        episodes, observation_space=gym.spaces.Box(0, 8, (2,), np.int64), action_space=gym.spaces.Discrete(5), card=dict(card)
    )


def query_cells(batch) -> np.ndarray:
    return cell_index(batch["query_observations"].numpy().astype(np.int64), 9)


@pytest.mark.parametrize("context", ["window", "random", "shuffled"])
def test_dpt_context_is_from_one_history_and_the_label_is_its_tasks_move_at_the_query(context):
    store = dpt_store()
    C = 4
    batch = make_sampler("dpt", store, batch_size=200, seed=0, context_size=C, context=context).sample()
    assert batch["context_observations"].shape == (200, C, 2) and batch["query_observations"].shape == (200, 2)
    assert batch["optimal_actions"].dtype == torch.int64
    goals = cell_index(np.array([task["goal"] for task in DPT_CARD["split"]["train"]]), 9)
    tasks = batch["task_ids"].numpy()
    np.testing.assert_array_equal(batch["optimal_actions"].numpy(), policy_table(9)[goals[tasks], query_cells(batch)])
    hist = store.columns["history_id"]
    all_obs = np.asarray(store.observations)
    histories = set()
    for b in range(200):
        index = find_rows(all_obs, batch["context_observations"][b].numpy())
        assert len(set(hist[index])) == 1 and store.columns["task_id"][index[0]] == tasks[b]
        histories.add(int(hist[index[0]]))
        if context == "shuffled":
            assert len(set(index)) == C  # distinct steps
        else:
            assert (np.diff(index) >= 0).all()  # time order
        if context == "window":
            np.testing.assert_array_equal(index, np.arange(index[0], index[0] + C))
        np.testing.assert_array_equal(batch["context_next_observations"][b].numpy(), store.next_observations(index))
        np.testing.assert_array_equal(batch["context_rewards"][b].numpy(), store.rewards[index])
    assert histories == {0, 1, 2}


def total_variation(a: np.ndarray, b: np.ndarray) -> float:
    return 0.5 * float(np.abs(a / a.sum() - b / b.sum()).sum())


def test_dpt_query_is_uniform_over_the_cells_whatever_the_context():
    """DPT's query is env.sample_state(), not a step of the context's history: two histories of one task (which
    visit disjoint cells here) get the same query distribution, uniform over all 81 cells."""
    store = dpt_store()
    batch = make_sampler("dpt", store, batch_size=12000, seed=1, context_size=2, context="random").sample()
    history = store.columns["history_id"][find_rows(np.asarray(store.observations), batch["context_observations"][:, 0].numpy())]
    counts = [np.bincount(query_cells(batch)[history == h], minlength=81) for h in (0, 1)]
    uniform = np.ones(81)
    # about 4,000 queries per history: sampling noise alone gives total variations near 0.06 and 0.08
    assert total_variation(counts[0], uniform) < 0.15 and total_variation(counts[1], uniform) < 0.15
    assert total_variation(counts[0], counts[1]) < 0.15


@pytest.fixture(scope="module")
def learned_histories():
    """AD-epsilon on 3 Dark Room goals, 2 histories of 40 episodes each: the learners end on their goals."""
    recipe = HistoryRecipe.from_params(
        "darkroom", {"algo": "ad-epsilon", "tasks": 4, "held_out": 1, "histories_per_task": 2, "episodes": 40}
    )
    return run_histories(recipe, seed=0)[0]


def test_dpt_queries_of_learning_histories_sit_on_the_goal_as_often_as_on_any_cell(learned_histories):
    """The histories' own steps sit on the goal far more than 1/81 of the time; the queries do not, so the query
    carries no hint of the goal that the evaluation would not give."""
    store = learned_histories
    train, _ = card_tasks(store.card)
    goals = np.array([task["goal"] for task in train])
    assert (np.asarray(store.observations) == goals[store.columns["task_id"]]).all(axis=1).mean() > 0.3
    batch = make_sampler("dpt", store, batch_size=20000, seed=0, context_size=20).sample()
    queries, tasks = batch["query_observations"].numpy().astype(np.int64), batch["task_ids"].numpy()
    on_goal = (queries == goals[tasks]).all(axis=1)
    assert abs(on_goal.mean() - 1 / 81) < 0.005  # sampling noise: standard deviation 0.0008
    assert (batch["optimal_actions"].numpy()[on_goal] == 0).all()  # stay
    for b in range(0, 20000, 97):
        assert batch["optimal_actions"][b] == DarkRoomEnv(tuple(goals[tasks[b]])).optimal_action(queries[b])


@pytest.mark.parametrize("name,algo", [("keydoor", "q-learning"), ("bandit", "ucb")])
def test_dpt_queries_cover_the_environments_states_with_the_tasks_optimal_actions(name, algo):
    """Key-to-Door: every cell with and without the key, half and half; a bandit: its one state, labelled with the
    task's best arm. Labels are the one-task environment's own optimal actions."""
    recipe = HistoryRecipe.from_params(
        name, {"algo": algo, "tasks": 3, "held_out": 1, "histories_per_task": 1, "episodes": 20, "allow_unlearned": True}
    )
    store = run_histories(recipe, seed=0)[0]
    train, _ = card_tasks(store.card)
    batch = make_sampler("dpt", store, batch_size=4000, seed=0, context_size=5).sample()
    queries, tasks, labels = batch["query_observations"].numpy(), batch["task_ids"].numpy(), batch["optimal_actions"].numpy()
    envs = [gym.make(store.card["env"]["id"], **task).unwrapped for task in train]
    assert all(labels[b] == envs[tasks[b]].optimal_action(queries[b]) for b in range(0, 4000, 7))
    distinct = {tuple(q) for q in queries.astype(np.int64)}
    if name == "keydoor":
        assert len(distinct) == 162 and abs(queries[:, 2].mean() - 0.5) < 0.03
    else:
        assert distinct == {(0,)}


def test_dpt_needs_labels_task_ids_and_the_card_that_describes_the_data():
    store = dpt_store()
    del store.columns["optimal_action"]
    with pytest.raises(OffbenchError, match="optimal_action"):
        make_sampler("dpt", store, batch_size=4, seed=0, context_size=2)
    store = dpt_store()
    del store.columns["task_id"]
    with pytest.raises(OffbenchError, match="no 'task_id' column"):
        make_sampler("dpt", store, batch_size=4, seed=0, context_size=2)
    store = dpt_store()
    store.card = {"id": "test/no-environment"}
    with pytest.raises(
        OffbenchError,
        match="dpt draws its query over the states of the card's environment and training tasks; "
        "card test/no-environment names no offbench environment",
    ) as error:
        make_sampler("dpt", store, batch_size=4, seed=0, context_size=2)
    assert "\n" not in str(error.value)
    swapped = {**DPT_CARD, "split": {**DPT_CARD["split"], "train": DPT_CARD["split"]["train"][::-1]}}
    store = dpt_store()
    store.card = swapped
    with pytest.raises(
        OffbenchError,
        match=r"optimal_action\[\d+\] = \d, but task \d of card test/hand-built-darkroom has \d there: "
        "the card's training tasks do not describe this data",
    ):
        make_sampler("dpt", store, batch_size=4, seed=0, context_size=2)


# ----------------------------------------------------------------------------- contract of every sampler

# The smallest options each registered kind needs on dpt_store(); a new sampler adds its entry here.
CONTRACT_OPTIONS = {
    "transitions": {},
    "segments": {"segment_length": 3},
    "ad_windows": {"window_length": 4},
    "dpt": {"context_size": 3},
    "prompt_segments": {"segment_length": 3, "prompt_length": 2},
}


def test_every_registered_sampler_is_in_the_contract():
    assert set(SAMPLERS) <= set(CONTRACT_OPTIONS), (
        f"add the new sampler's options to CONTRACT_OPTIONS: {set(SAMPLERS) - set(CONTRACT_OPTIONS)}"
    )


@pytest.mark.parametrize("kind", sorted(SAMPLERS))
def test_sampler_contract(kind, tmp_path):
    """Every kind: named by its key; a dict of tensors with the batch size first, float32 observations and
    rewards, int64 task ids; same seed, same batches (another seed, others); state_dict() survives a
    weights-only checkpoint and resumes the stream; a memory-mapped store samples like an in-memory one."""
    store, opts = dpt_store(), CONTRACT_OPTIONS[kind]
    a = make_sampler(kind, store, 16, seed=5, **opts)
    assert a.kind == kind and a.batch_size == 16
    first = a.sample()
    for key, value in first.items():
        assert isinstance(value, torch.Tensor) and value.shape[0] == 16, key
        if "observations" in key or "rewards" in key:
            assert value.dtype == torch.float32, key
    assert first["task_ids"].dtype == torch.int64
    again = make_sampler(kind, store, 16, seed=5, **opts).sample()
    assert all(torch.equal(first[k], again[k]) for k in first)
    other = make_sampler(kind, store, 16, seed=6, **opts).sample()
    assert any(not torch.equal(first[k], other[k]) for k in first)

    buffer = io.BytesIO()
    torch.save(a.state_dict(), buffer)  # a checkpoint holds it; must load without pickles
    expected = [a.sample() for _ in range(3)]
    resumed = make_sampler(kind, store, 16, seed=123, **opts)
    buffer.seek(0)
    resumed.load_state_dict(torch.load(buffer, weights_only=True))
    for want in expected:
        got = resumed.sample()
        assert all(torch.equal(want[k], got[k]) for k in want)

    mapped = load_native(store.save(tmp_path / "d.h5"))
    assert isinstance(mapped.observations, np.memmap)
    x, y = make_sampler(kind, store, 32, seed=0, **opts).sample(), make_sampler(kind, mapped, 32, seed=0, **opts).sample()
    assert all(torch.equal(x[k], y[k]) for k in x)


def test_segment_longer_than_every_episode_is_padded():
    store = make_store()
    batch = make_sampler("segments", store, 32, seed=0, segment_length=50).sample()
    assert batch["observations"].shape == (32, 50, 4)
    assert (batch["mask"].sum(1) <= 5).all() and not batch["mask"][:, :45].any()


def test_bad_options_are_one_line_errors():
    store = make_store()
    with pytest.raises(OffbenchError, match="unknown sampler kind 'nope'"):
        make_sampler("nope", store, 4, 0)
    with pytest.raises(OffbenchError, match="has no option window_length"):
        make_sampler("segments", store, 4, 0, window_length=3)
    with pytest.raises(OffbenchError, match="needs the option window_length"):
        make_sampler("ad_windows", store, 4, 0)
    with pytest.raises(OffbenchError, match="batch_size"):
        make_sampler("transitions", store, 0, 0)
    with pytest.raises(OffbenchError, match="kind 'transitions', not 'segments'"):
        make_sampler("segments", store, 4, 0).load_state_dict(make_sampler("transitions", store, 4, 0).state_dict())


@pytest.mark.parametrize(
    "kind, options, named",
    [
        ("segments", {"segment_length": 0}, "segment_length must be at least 1, got 0"),
        ("prompt_segments", {"prompt_length": 0}, "prompt_length must be at least 1, got 0"),
        ("prompt_segments", {"prompt_pool": -2}, "prompt_pool must be at least 1, got -2"),
        ("ad_windows", {"window_length": 0}, "window_length must be at least 1, got 0"),
    ],
)
def test_a_count_option_below_one_is_a_line_naming_it(kind, options, named):
    with pytest.raises(OffbenchError, match=f"^{named}$"):
        make_sampler(kind, history_store(), 4, 0, **options)
    with pytest.raises(OffbenchError, match="^batch_size must be at least 1, got 0$"):
        make_sampler(kind, history_store(), 0, 0, **{**options, **{key: 1 for key in options}})


def test_dpt_context_size_below_one_is_a_line_naming_it():
    with pytest.raises(OffbenchError, match="^context_size must be at least 1, got 0$"):
        make_sampler("dpt", dpt_store(), 4, 0, context_size=0)
