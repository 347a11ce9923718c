"""In-context RL environments: one-task and batched forms agree, optimal returns and actions are exact."""

import gymnasium as gym
import numpy as np
import pytest

import offbench.envs  # noqa: F401  (registers offbench/<Name>-v0)
from offbench.envs.bandits import BanditBatch, BanditEnv
from offbench.envs.benchmarks import BENCHMARKS, card_tasks, make_batch_env, split_tasks
from offbench.envs.darkroom import DarkRoomBatch, DarkRoomEnv
from offbench.envs.factory import make_env
from offbench.envs.gridworld import MOVES, all_cells, distance_table, start_cell
from offbench.envs.keydoor import KeyDoorBatch, KeyDoorEnv
from offbench.errors import OffbenchError

GRIDS = {
    "darkroom": dict(tasks=[{"goal": g} for g in [(0, 0), (4, 4), (8, 3), (2, 7), (4, 5)]]),
    "darkroom-hard": dict(tasks=[{"goal": g} for g in [(0, 0), (16, 16), (8, 9), (3, 12)]]),
    "darkroom-permuted": dict(
        tasks=[{"goal": g, "action_order": o} for g, o in [((0, 0), [3, 4, 1, 0, 2]), ((4, 4), [0, 1, 2, 3, 4]), ((8, 3), [4, 3, 2, 1, 0])]]
    ),
    "keydoor": dict(tasks=[{"key": k, "door": d} for k, d in [((0, 0), (8, 8)), ((4, 5), (4, 4)), ((1, 7), (6, 2)), ((8, 0), (7, 0))]]),
}


def _single(name, task):
    bench = BENCHMARKS[name]
    return gym.make(bench.env_id, **task)


@pytest.mark.parametrize("name", sorted(GRIDS))
def test_batched_grid_agrees_with_single_envs_on_random_actions(name):
    bench, tasks = BENCHMARKS[name], GRIDS[name]["tasks"]
    rng = np.random.default_rng(0)
    batch = bench.make_batch(tasks)
    singles = [_single(name, task) for task in tasks]
    obs = batch.reset()
    for i, env in enumerate(singles):
        np.testing.assert_array_equal(env.reset(seed=i)[0], obs[i])
    ended = 0
    for _ in range(400):
        # mostly moves towards nothing in particular, sometimes the optimal action so goals/keys/doors get reached
        actions = np.where(rng.random(len(tasks)) < 0.5, batch.optimal_actions(), rng.integers(0, 5, len(tasks)))
        obs, rewards, terminated, truncated = batch.step(actions)
        for i, env in enumerate(singles):
            o, r, term, trunc, _ = env.step(int(actions[i]))
            np.testing.assert_array_equal(o, obs[i])
            assert (r, term, trunc) == (rewards[i], terminated[i], truncated[i])
            assert not (term and trunc)
            if term or trunc:
                ended += 1
                np.testing.assert_array_equal(env.reset()[0], batch.reset(np.arange(len(tasks)) == i)[i])
    assert ended > len(tasks)


@pytest.mark.parametrize("name", sorted(BENCHMARKS))
def test_gymnasium_env_checker_passes_and_the_horizon_is_the_envs_own(name):
    from gymnasium.utils.env_checker import check_env

    bench = BENCHMARKS[name]
    task = GRIDS[name]["tasks"][-1] if name in GRIDS else {"means": [0.1, 0.7, 0.4]}
    env = gym.make(bench.env_id, **task)
    check_env(env.unwrapped, skip_render_check=True)
    assert env.spec.max_episode_steps is None  # no TimeLimit wrapper: truncation is the env's, as in the batched form
    assert env.unwrapped.horizon == bench.make_batch([task]).horizon


def test_dark_room_truncates_at_step_20_and_never_terminates():
    env = gym.make("offbench/DarkRoom-v0", goal=(4, 4))  # the goal is the start: reward on every step
    env.reset(seed=0)
    flags = [env.step(0)[1:4] for _ in range(20)]
    assert [f[0] for f in flags] == [1.0] * 20
    assert not any(f[1] for f in flags)
    assert [f[2] for f in flags] == [False] * 19 + [True]


def test_dark_room_hard_rewards_once_and_terminates_on_the_goal():
    env = gym.make("offbench/DarkRoomHard-v0", goal=(9, 8))
    env.reset(seed=0)
    assert env.step(1)[1:4] == (1.0, True, False)
    assert env.unwrapped.size == 17 and env.unwrapped.horizon == 20


def test_key_to_door_rewards_key_then_door_and_ignores_the_door_without_key():
    env = KeyDoorEnv(key=(6, 4), door=(5, 4))
    obs, _ = env.reset()
    assert obs.tolist() == [4, 4, 0]
    assert env.step(1)[1:4] == (0.0, False, False)  # on the door without the key
    obs, reward, term, _, _ = env.step(1)
    assert (obs.tolist(), reward, term) == ([6, 4, 1], 1.0, False)
    assert env.step(1)[1] == 0.0  # the key pays once
    env.step(2)
    assert env.step(2)[1:3] == (1.0, True)


def _brute_force_values(env, states, set_state):
    """Finite-horizon dynamic programming over (state, steps left) with the single env as the model."""
    horizon = env.horizon
    value = {s: 0.0 for s in states}
    q_by_time = []
    for steps_left in range(1, horizon + 1):
        q = {}
        for s in states:
            q[s] = []
            for a in range(env.action_space.n):
                set_state(s, horizon - steps_left)
                obs, r, term, trunc, _ = env.step(a)
                nxt = tuple(int(v) for v in obs)
                q[s].append(r + (0.0 if term else value[nxt]))
        value = {s: max(q[s]) for s in states}
        q_by_time.append(q)
    return value, q_by_time


def _check_exact(env, states, set_state, start):
    value, q_by_time = _brute_force_values(env, states, set_state)
    assert value[start] == env.optimal_return
    for q in q_by_time:  # the optimal action is optimal with any number of steps left, in every state
        for s in states:
            assert q[s][env.optimal_action(np.array(s))] == max(q[s]), (s, q[s])


@pytest.mark.parametrize("goal", [(0, 0), (4, 4), (8, 8), (3, 6), (5, 4)])
def test_dark_room_optimal_return_and_actions_match_brute_force(goal):
    env = DarkRoomEnv(goal)

    def set_state(s, t):
        env.pos, env.t = s, t

    _check_exact(env, all_cells(9), set_state, start_cell(9))
    assert DarkRoomBatch(np.array([goal])).optimal_returns[0] == env.optimal_return


@pytest.mark.parametrize("goal", [(0, 0), (16, 16), (8, 9)])
def test_dark_room_hard_optimal_return_and_actions_match_brute_force(goal):
    env = DarkRoomEnv(goal, size=17, hard=True)

    def set_state(s, t):
        env.pos, env.t = s, t

    _check_exact(env, all_cells(17), set_state, start_cell(17))


@pytest.mark.parametrize("key,door", [((0, 0), (8, 8)), ((4, 5), (4, 4)), ((8, 1), (0, 7))])
def test_key_to_door_optimal_return_and_actions_match_brute_force(key, door):
    env = KeyDoorEnv(key, door)
    states = [(x, y, k) for (x, y) in all_cells(9) for k in (0, 1)]

    def set_state(s, t):
        env.pos, env.has_key, env.t = (s[0], s[1]), bool(s[2]), t

    _check_exact(env, states, set_state, (4, 4, 0))
    assert env.optimal_return == 2.0
    assert KeyDoorBatch(np.array([key]), np.array([door])).optimal_returns[0] == 2.0


@pytest.mark.parametrize("order", [[1, 2, 3, 4, 0], [2, 0, 4, 1, 3]])  # not involutions: an order and its inverse differ
def test_a_permuted_label_makes_the_move_its_order_names_and_the_optimal_labels_stay_optimal(order):
    goal = (3, 6)
    plain, permuted = DarkRoomEnv(goal), DarkRoomEnv(goal, action_order=order)
    rng = np.random.default_rng(0)
    plain.reset(), permuted.reset()
    for label in rng.integers(0, 5, 60):
        np.testing.assert_array_equal(permuted.step(int(label))[0], plain.step(order[label])[0])

    def set_state(s, t):
        permuted.pos, permuted.t = s, t

    permuted.reset()
    _check_exact(permuted, all_cells(9), set_state, start_cell(9))
    batch = DarkRoomBatch(np.array([goal]), action_orders=[order])
    cells = np.arange(81)
    labels = batch.optimal_actions(cells, np.zeros(81, dtype=np.int64))
    assert labels.tolist() == [permuted.optimal_action(xy) for xy in batch.observations_of(cells)]
    next_cells, rewards, _ = batch.tables()
    cell = int(batch.state_index()[0])
    for label in range(5):  # the tables the generators step are the labels' moves too
        nxt = int(next_cells[0, cell, label])
        np.testing.assert_array_equal(batch.observations_of(np.array([nxt]))[0], np.array(start_cell(9)) + MOVES[order[label]])
        assert rewards[0, cell, label] == float(nxt == goal[1] * 9 + goal[0])


def test_permuted_dark_room_keeps_darkrooms_goals_and_draws_each_held_out_task_its_own_order():
    plain, permuted = BENCHMARKS["darkroom"], BENCHMARKS["darkroom-permuted"]
    train, held = split_tasks(plain, 81, 16, split_seed=0)
    p_train, p_held = split_tasks(permuted, 81, 16, split_seed=0)
    assert p_train == train  # the training tasks (and so their histories) are darkroom's
    assert [t["goal"] for t in p_held] == [t["goal"] for t in held]
    orders = [tuple(t["action_order"]) for t in p_held]
    assert all(sorted(o) == [0, 1, 2, 3, 4] for o in orders) and len(set(orders)) > 10
    assert split_tasks(permuted, 81, 16, split_seed=0)[1] == p_held


def test_an_action_order_that_is_not_a_permutation_is_refused_in_one_line():
    with pytest.raises(ValueError, match=r"action_order must be a permutation of 0\.\.4, got \[0, 0, 1, 2, 3\]"):
        DarkRoomEnv((1, 1), action_order=[0, 0, 1, 2, 3])
    with pytest.raises(ValueError, match="2 action orders for 1 goals"):
        DarkRoomBatch(np.array([(1, 1)]), action_orders=[None, None])


def test_breadth_first_distances_are_manhattan_on_the_open_grid():
    cells = np.array(all_cells(9))
    manhattan = np.abs(cells[:, None, :] - cells[None, :, :]).sum(-1)
    np.testing.assert_array_equal(distance_table(9), manhattan)


@pytest.mark.parametrize("noise", ["bernoulli", "gaussian"])
def test_bandit_batch_of_one_agrees_with_single_env_and_means_are_what_optimality_assumes(noise):
    means = [0.2, 0.9, 0.5]
    env, batch = BanditEnv(means, noise=noise), BanditBatch(np.array([means]), noise=noise, seed=7)
    env.reset(seed=7)
    rng = np.random.default_rng(1)
    for a in rng.integers(0, 3, 200):
        obs, r, term, trunc, _ = env.step(int(a))
        b_obs, b_r, b_term, b_trunc = batch.step(np.array([a]))
        assert np.float32(r) == b_r[0] and term and b_term[0] and not trunc and not b_trunc[0]
        np.testing.assert_array_equal(obs, b_obs[0])
    # the exact optimum (best arm) agrees with a Monte-Carlo estimate of every arm's mean through the env
    many = BanditBatch(np.tile(means, (20_000, 1)), noise=noise, seed=3)
    estimates = [many.step(np.full(20_000, a))[1].mean() for a in range(3)]
    np.testing.assert_allclose(estimates, means, atol=0.02)
    assert env.optimal_action() == int(np.argmax(estimates)) == batch.optimal_actions()[0] == 1
    assert env.optimal_return == batch.optimal_returns[0] == 0.9


@pytest.mark.parametrize("name", sorted(BENCHMARKS))
def test_split_is_seeded_disjoint_and_its_held_out_set_does_not_depend_on_the_task_count(name):
    bench = BENCHMARKS[name]
    train, held = split_tasks(bench, 20, 5, split_seed=3)
    again_train, again_held = split_tasks(bench, 20, 5, split_seed=3)
    assert (train, held) == (again_train, again_held) and len(train) == 15 and len(held) == 5
    keys = {str(t) for t in train}
    assert len(keys) == 15 and not keys & {str(t) for t in held}
    assert split_tasks(bench, 12, 5, split_seed=3)[1] == held
    assert split_tasks(bench, 20, 5, split_seed=4)[1] != held
    for task in train + held:  # every task builds
        bench.env_class(**task, **bench.env_kwargs)


def test_adversarial_bandit_favours_odd_arms_in_training_and_even_arms_held_out():
    train, held = split_tasks(BENCHMARKS["bandit"], 1200, 200, split_seed=0, variant="adversarial")
    best_train = np.array([np.argmax(t["means"]) for t in train])
    best_held = np.array([np.argmax(t["means"]) for t in held])
    assert 0.92 < (best_train % 2 == 1).mean() < 0.98
    assert 0.9 < (best_held % 2 == 0).mean()
    uniform, _ = split_tasks(BENCHMARKS["bandit"], 1200, 200, split_seed=0, variant="uniform")
    assert 0.4 < (np.array([np.argmax(t["means"]) for t in uniform]) % 2).mean() < 0.6


def test_offbench_suite_rebuilds_tasks_from_a_card():
    card = {
        "env": {"suite": "offbench", "id": "offbench/KeyDoor-v0"},
        "source": {"recipe": {"generator": "keydoor", "params": {"tasks": 6, "held_out": 2}}},
    }
    train, held = card_tasks(card)
    env = make_env(card["env"], task=held[0])
    assert env.unwrapped.key == tuple(held[0]["key"]) and env.reset()[0].tolist() == [4, 4, 0]
    batch = make_batch_env(card["env"], train)
    assert batch.num_envs == 4
    with pytest.raises(OffbenchError, match="needs a task"):
        make_env(card["env"])
    with pytest.raises(OffbenchError, match="cannot make"):
        make_env({"suite": "offbench", "id": "offbench/DarkRoom-v0"}, task={"goal": [9, 9]})
