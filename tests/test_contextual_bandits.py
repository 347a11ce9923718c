"""Contextual bandits: the environments (single and batched) are seeded, the in-context protocol's regret is each
pull's own optimum minus the pulled arm's mean (0 for the oracle, its expectation for a uniform player), LinUCB and
linear Thompson sampling learn, generation is reproducible and refuses bad recipes in one line, and AD runs end to
end on a contextual card with regret as its headline."""

from __future__ import annotations

import json

import gymnasium as gym
import numpy as np
import pytest
from helpers import TRAINING_CONFIGS, read_jsonl

import offbench.envs  # noqa: F401  (registers the Gymnasium ids)
from offbench.data.cards import get_card, read_card
from offbench.data.store import load_native
from offbench.envs.benchmarks import CONTEXTUAL_BENCHMARKS, card_tasks, get_benchmark, make_batch_env, split_tasks
from offbench.envs.contextual_bandits import ContextualBanditBatch, draw_contexts
from offbench.errors import OffbenchError
from offbench.evaluation.protocols import EvaluationSetup, InContext
from offbench.generators import get_generator
from offbench.generators.contextual import ArmPosteriors, read_recipe, run_histories
from offbench.machine import made_on

SMALL = "contextual-bandit-linucb-small"
THETAS = [[1.0, 0.0], [0.0, 1.0], [-0.5, -0.5]]


def pulls(env, seed: int, actions: list[int]) -> list[tuple]:
    observation, _ = env.reset(seed=seed)
    seen = []
    for action in actions:
        shown = observation
        observation, reward, terminated, truncated, info = env.step(action)
        seen.append((shown.tolist(), reward, terminated, truncated, info["expected_reward"], info["optimal_expected_reward"]))
        observation, _ = env.reset()
    return seen


def test_the_single_environment_is_determined_by_its_seed():
    env = gym.make("offbench/ContextualBandit-v0", thetas=THETAS)
    first, again, other = pulls(env, 3, [0, 1, 2, 0]), pulls(env, 3, [0, 1, 2, 0]), pulls(env, 4, [0, 1, 2, 0])
    assert first == again and first != other
    assert all(terminated and not truncated for _, _, terminated, truncated, _, _ in first)  # every pull is an episode
    for (context, _, _, _, mean, best), action in zip(first, [0, 1, 2, 0]):
        means = np.asarray(THETAS) @ np.asarray(context, dtype=np.float64)
        assert mean == pytest.approx(means[action]) and best == pytest.approx(means.max())
    assert gym.make("offbench/HeadlessContextualBandit-v0", thetas=THETAS).unwrapped.sigma == 1.0  # Headless-AD's N(0, 1) noise


def test_the_batch_is_determined_by_its_seed_and_shows_each_context_before_its_pull():
    thetas = np.array([THETAS, np.flip(THETAS, axis=1).tolist()])

    def run(seed):
        env = ContextualBanditBatch(thetas, sigma=0.3, seed=seed)
        contexts, log = env.reset(), []
        for _ in range(5):
            means = np.einsum("rad,rd->ra", thetas, contexts.astype(np.float64))
            _, rewards, terminated, truncated = env.step(np.array([0, 2]))
            assert terminated.all() and not truncated.any()
            np.testing.assert_allclose(env.expected_rewards(np.arange(2), np.array([0, 2]), rewards), means[[0, 1], [0, 2]])
            np.testing.assert_allclose(env.optimal_expected_rewards(), means.max(axis=1))
            log.append((contexts.copy(), rewards))
            contexts = env.reset()
        return log

    a, b, c = run(0), run(0), run(1)
    assert all(np.array_equal(x[0], y[0]) and np.array_equal(x[1], y[1]) for x, y in zip(a, b))
    assert not np.array_equal(a[0][0], c[0][0])


class _Scripted:
    """A policy for the in-context protocol: `choose(observations) -> actions`, no memory."""

    def __init__(self, choose):
        self.choose = choose

    def policy(self, options):
        return self

    def reset(self, n):
        pass

    def act(self, observations):
        return self.choose(observations)

    def observe(self, rewards, done):
        pass


def protocol(episodes: int) -> InContext:
    return InContext(EvaluationSetup(card=get_card(SMALL), seed=0, episodes=episodes, every_steps=1))


def test_the_oracles_regret_is_zero_and_a_uniform_players_is_its_expectation():
    evaluation = protocol(400)
    thetas = np.array([task["thetas"] for task in evaluation.task_list])
    oracle = _Scripted(lambda x: np.einsum("rad,rd->ra", thetas, x.astype(np.float64)).argmax(axis=1))
    line = evaluation.evaluate(oracle, step=0)[0]
    assert line["regret"] == pytest.approx(0.0, abs=1e-9) and evaluation.score_metric([line]) == "regret"
    # the regret of a constant optimum (E max) would go below 0 on lucky contexts; each pull's own optimum never does
    assert line["in_context_regret"] == pytest.approx([0.0] * 400, abs=1e-9)

    rng = np.random.default_rng(7)
    uniform = _Scripted(lambda x: rng.integers(0, thetas.shape[1], len(x)))
    regret = evaluation.evaluate(uniform, step=0)[0]["regret"]
    contexts = draw_contexts(np.random.default_rng(123), 200_000, thetas.shape[2]).astype(np.float64)
    means = np.einsum("tad,nd->tna", thetas, contexts)
    expected = 400 * float((means.max(axis=2) - means.mean(axis=2)).mean())
    assert regret > 0 and regret == pytest.approx(expected, rel=0.05)


@pytest.mark.parametrize("algo", ["linucb", "linear-thompson"])
def test_the_source_algorithms_regret_grows_sublinearly(algo):
    bench = get_benchmark("contextual-bandit")
    recipe, config = read_recipe(bench.name, {"algo": algo, "tasks": 5, "held_out": 1, "histories_per_task": 2, "episodes": 300})
    train, _ = split_tasks(bench, 5, 1)
    regret = run_histories(bench, recipe, config, train, seed=0).regret.mean(axis=0)
    first, second = regret[:150].sum(), regret[150:].sum()
    assert (regret >= 0).all() and second < first / 3


def test_the_arm_posteriors_are_the_ridge_regression_of_each_arms_pulls():
    rng = np.random.default_rng(0)
    posteriors = ArmPosteriors(rows=2, arms=3, dim=4, prior_variance=0.5, noise_variance=0.09)
    contexts, actions, rewards = rng.standard_normal((30, 2, 4)), rng.integers(0, 3, (30, 2)), rng.standard_normal((30, 2))
    for t in range(30):
        posteriors.update(contexts[t], actions[t], rewards[t])
    query = rng.standard_normal((2, 4))
    means, spreads = posteriors.mean_and_spread(query)
    for row in range(2):
        for arm in range(3):
            x, y = contexts[actions[:, row] == arm, row], rewards[actions[:, row] == arm, row]
            covariance = np.linalg.inv(np.eye(4) / 0.5 + x.T @ x / 0.09)
            assert means[row, arm] == pytest.approx(query[row] @ covariance @ x.T @ y / 0.09)
            assert spreads[row, arm] == pytest.approx(np.sqrt(query[row] @ covariance @ query[row]))


@pytest.mark.parametrize("algo", ["linucb", "linear-thompson"])
def test_the_same_seed_writes_the_same_bytes(tmp_path, algo):
    generate = get_generator("contextual-bandit")
    params = {"algo": algo, "tasks": 4, "held_out": 1, "histories_per_task": 2, "episodes": 60}
    files = [generate(params, seed, tmp_path / f"{name}.h5", True).read_bytes() for name, seed in (("a", 0), ("b", 0), ("c", 1))]
    assert files[0] == files[1] != files[2]


def test_a_generated_card_describes_its_histories_and_learning(tmp_path):
    import offbench

    store = offbench.load(SMALL)
    learning, split = store.card["learning"], card_tasks(store.card)
    assert learning["improvement"] == "regret per pull" and learning["histories_improved"] == learning["histories"] == 32
    assert learning["last_regret_per_pull"] < learning["first_regret_per_pull"] / 4
    assert len(split[0]) == 32 and len(split[1]) == 8 and store.observation_space.shape == (5,)
    assert np.array_equal(np.bincount(store.columns["task_id"]), np.full(32, 500))
    env = make_batch_env(store.card["env"], split[0][:1])  # the labels are the best arm for each step's context
    steps = slice(0, 500)
    means = np.asarray(split[0][0]["thetas"]) @ store.observations[steps].astype(np.float64).T
    assert np.array_equal(store.columns["optimal_action"][steps], means.argmax(axis=0)) and env.num_actions == 5


def test_every_contextual_card_names_its_benchmark_and_a_recipe_that_validates():
    from offbench.data.cards import all_cards

    cards = [c for c in all_cards().values() if c.source.get("recipe", {}).get("generator") in CONTEXTUAL_BENCHMARKS]
    assert {c.id for c in cards} == {
        f"contextual-bandit-{name}" for name in ("linucb-small", "thompson-small", "linucb", "thompson", "headless-linucb")
    }
    for card in cards:
        recipe = card.source["recipe"]
        read_recipe(recipe["generator"], recipe["params"])
        assert card.kind == "learning-history" and card.env == {
            "suite": "offbench",
            "id": CONTEXTUAL_BENCHMARKS[recipe["generator"]].env_id,
        }
        train, held_out = card_tasks(card)
        assert (len(train), len(held_out)) == (recipe["params"]["tasks"] - recipe["params"]["held_out"], recipe["params"]["held_out"])


@pytest.mark.parametrize(
    "params, message",
    [
        ({"tasks": 4, "held_out": 4}, "'held_out' must be below 'tasks' (4)"),
        ({"tasks": 4, "held_out": 1, "algo": "ucb"}, "'algo' must be one of"),
        ({"tasks": 4, "held_out": 1, "hyperparameters": {"beta": 1.0}}, "beta"),
        ({"tasks": 4, "held_out": 1, "hyperparameters": {"alpha": -1.0}}, "'alpha' must be at least 0"),
    ],
)
def test_a_bad_recipe_is_one_line_naming_the_parameter(tmp_path, params, message):
    with pytest.raises(OffbenchError) as error:
        get_generator("contextual-bandit")(params, 0, tmp_path / "x.h5", True)
    assert message in str(error.value) and "\n" not in str(error.value) and not (tmp_path / "x.h5").exists()


def test_ad_runs_end_to_end_on_a_contextual_card_with_regret_as_its_headline(run_cli, tmp_path):
    proc = run_cli(
        "run", "baseline", "ad", "--dataset", SMALL, "--config", TRAINING_CONFIGS / "ad-tiny.toml", "--out", tmp_path, "--name", "run"
    )
    assert proc.returncode == 0, proc.stderr
    evaluations = read_jsonl(tmp_path / "run" / "evaluations.jsonl")
    assert [line["step"] for line in evaluations] == [20, 40]
    for line in evaluations:
        assert len(line["task_returns"]) == 8 and len(line["in_context_regret"]) == 3
        assert line["regret"] == line["in_context_regret"][-1] > 0
        assert np.all(np.diff([0.0, *line["in_context_regret"]]) >= 0)  # a pull's regret against its own context is never negative
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["score_metric"] == "regret"


def test_dpt_refuses_a_contextual_card_in_one_line_before_any_run_directory(run_cli, tmp_path):
    import offbench

    offbench.load(SMALL)  # generated here, so that stderr holds the refusal alone
    proc = run_cli("run", "baseline", "dpt", "--dataset", SMALL, "--out", tmp_path / "runs", "--name", "run")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    [line] = proc.stderr.strip().splitlines()
    assert f"card {SMALL} is a contextual bandit (offbench/ContextualBandit-v0)" in line and "fresh context" in line
    assert not (tmp_path / "runs" / "run").exists()


def test_the_generate_command_writes_what_the_generator_does(run_cli, tmp_path):
    proc = run_cli(
        "generate",
        "contextual-bandit-headless",
        "--tasks",
        "3",
        "--held-out",
        "1",
        "--histories-per-task",
        "2",
        "--episodes",
        "80",
        "--algo",
        "linear-thompson",
        "--set",
        "posterior_scale=0.5",
        "--allow-unlearned",
        "--out",
        tmp_path / "cli",
        "-q",
    )
    assert proc.returncode == 0, proc.stderr
    assert "learning (regret per pull, first vs last 8 pulls)" in proc.stdout and "histories improved" in proc.stdout
    params = {
        "algo": "linear-thompson",
        "tasks": 3,
        "held_out": 1,
        "histories_per_task": 2,
        "episodes": 80,
        "allow_unlearned": True,
        "hyperparameters": {"posterior_scale": 0.5},
    }
    direct = get_generator("contextual-bandit-headless")(params, 0, tmp_path / "direct.h5", True)
    made, generated = load_native(tmp_path / "cli" / "data.h5"), load_native(direct)
    assert made.content_sha256() == generated.content_sha256()
    assert made.card == {**generated.card, "made_on": made_on()}  # the command adds where it was made, nothing else
    card = read_card(tmp_path / "cli" / "card.toml")
    assert card.source["recipe"]["params"] == {**params, "split_seed": 0} and card.env["id"] == "offbench/HeadlessContextualBandit-v0"

    listed = run_cli("generate", "--help").stdout
    assert "contextual-bandit " in listed and "contextual-bandit-headless" in listed
