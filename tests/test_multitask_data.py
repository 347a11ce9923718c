"""Multi-task datasets (Meta-World, MiniGrid): structure, quality levels, re-evaluation, reproducibility, resume."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from helpers import require_extra

from offbench.data.cards import read_card
from offbench.data.store import load_native
from offbench.envs.multitask import episode_seed
from offbench.errors import OffbenchError
from offbench.evaluation.lanes import evaluate_tasks, summarise

require_extra("metaworld", "metaworld")
require_extra("minigrid", "minigrid")

REPO = Path(__file__).resolve().parents[1]


def builtin(card_id: str):
    return read_card(REPO / "datasets" / f"{card_id}.toml")


def generate(card_id: str, out: Path, workers: int = 1) -> Path:
    from offbench.generators import get_generator

    recipe = builtin(card_id).source["recipe"]
    return get_generator(recipe["generator"])({**recipe["params"], "workers": workers}, recipe["seed"], out, True)


@pytest.fixture(scope="module")
def metaworld_tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("metaworld")
    return {q: load_native(generate(f"metaworld/tiny-{q}", root / q / "data.h5")) for q in ("near-optimal", "sub-optimal")}


@pytest.fixture(scope="module")
def minigrid_tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("minigrid")
    return {q: load_native(generate(f"minigrid/tiny-{q}", root / q / "data.h5")) for q in ("near-optimal", "noisy-planner")}


def episode_values(store, column):
    return np.asarray(store.columns[column])[store.episode_starts[:-1]]


def check_structure(store, episodes_per_task: int):
    names = store.card["env"]["kwargs"]["tasks"]
    starts = store.episode_starts
    assert store.num_episodes == episodes_per_task * len(names)
    for column in ("task_id", "episode_seed", "behaviour"):  # constant within every episode
        values = np.asarray(store.columns[column])
        assert np.array_equal(values, np.repeat(values[starts[:-1]], store.episode_lengths)), column
    task_ids = episode_values(store, "task_id")
    assert task_ids.tolist() == [t for t in range(len(names)) for _ in range(episodes_per_task)]
    seeds = episode_values(store, "episode_seed")
    assert seeds.tolist() == [episode_seed(0, name, e) for name in names for e in range(episodes_per_task)]
    ended = np.asarray(store.terminations) | np.asarray(store.truncations)
    assert np.array_equal(ended, store.is_last_step)  # every episode ends exactly once, at its last step
    assert store.card["task_stats"].keys() == set(names)


def success_rates(store) -> np.ndarray:
    return np.array([s["success_rate"] for s in store.card["task_stats"].values()])


def test_metaworld_episodes_are_500_step_style_truncations_with_task_ids(metaworld_tiny):
    for store in metaworld_tiny.values():
        check_structure(store, episodes_per_task=4)
        assert (store.episode_lengths == 150).all()  # the tiny recipe's shortened horizon
        assert not np.asarray(store.terminations).any()  # success never ends a Meta-World episode
        assert store.observations.dtype == np.float32 and store.observations.shape[1:] == (39,)
        assert np.abs(store.actions).max() <= 1.0
        goal_ids = np.asarray(store.columns["goal_id"])
        assert goal_ids.min() >= 0 and goal_ids.max() < 50
        # the card's success rate is Meta-World's: info["success"] at any step of the episode
        success = np.logical_or.reduceat(np.asarray(store.columns["infos/success"]), store.episode_starts[:-1])
        per_task = success.reshape(2, 4).mean(axis=1)
        assert np.allclose(per_task, [store.card["task_stats"][n]["success_rate"] for n in ("reach-v3", "push-v3")])


def test_metaworld_near_optimal_succeeds_clearly_more_than_sub_optimal(metaworld_tiny):
    near, sub = metaworld_tiny["near-optimal"], metaworld_tiny["sub-optimal"]
    assert success_rates(near).mean() >= 0.9
    assert success_rates(sub).mean() <= success_rates(near).mean() - 0.3
    assert sub.episode_returns().mean() < near.episode_returns().mean()


def reevaluate(store, behaviour_cls, max_envs):
    """The same behaviour policy, the same seed, through the evaluator (all lanes at once, rebuilt from the card)."""
    from offbench.generators.multitask import Recipe

    card = store.card
    recipe = Recipe(
        card["source"]["recipe"]["generator"],
        card["env"],
        card["quality"],
        card["episodes_per_task"],
        card["source"]["recipe"]["seed"],
        card["behaviour"],
    )
    episodes = evaluate_tasks(
        card["env"], lambda lanes, envs: behaviour_cls(lanes, envs, recipe), card["episodes_per_task"], seed=recipe.seed, max_envs=max_envs
    )
    return summarise(episodes)


def test_metaworld_recorded_success_matches_a_reevaluation(metaworld_tiny):
    from offbench.generators.metaworld import NoisyScriptedExpert

    for store in metaworld_tiny.values():
        table = reevaluate(store, NoisyScriptedExpert, max_envs=2)  # 2 envs, reused over 4 rounds
        for name, stats in store.card["task_stats"].items():
            assert table.loc[name, "success_rate"] == stats["success_rate"]
            assert table.loc[name, "mean_return"] == pytest.approx(stats["mean_return"], rel=1e-5)


def test_metaworld_episode_replays_exactly_in_the_env_rebuilt_from_the_card(metaworld_tiny):
    from offbench.envs.factory import make_env

    store = metaworld_tiny["sub-optimal"]
    episode = store.episode(5)  # push-v3, second episode
    env = make_env(store.card["env"], int(episode["task_id"][0]))
    obs, info = env.reset(seed=int(episode["episode_seed"][0]))
    assert info["goal_id"] == episode["goal_id"][0]
    assert np.array_equal(obs, episode["observations"][0])
    for t, action in enumerate(episode["actions"]):
        obs, reward, _, truncated, _ = env.step(action)
        assert np.array_equal(obs, episode["observations"][t + 1]) and reward == pytest.approx(episode["rewards"][t])
    assert truncated


def test_same_seed_gives_identical_checksum_whatever_the_workers(metaworld_tiny, tmp_path):
    again = load_native(generate("metaworld/tiny-near-optimal", tmp_path / "data.h5", workers=2))
    assert again.content_sha256() == metaworld_tiny["near-optimal"].content_sha256()
    assert not (tmp_path / "data.h5.work").exists()


def test_minigrid_planner_solves_every_suite_task():
    from offbench.envs.factory import make_env
    from offbench.envs.minigrid import SUITES
    from offbench.generators.minigrid import shortest_plan

    spec = {"suite": "minigrid", "id": "MT7", "kwargs": {"tasks": SUITES["MT7"]}}
    for task_id, name in enumerate(SUITES["MT7"]):
        env = make_env(spec, task_id)
        for seed in range(10):
            env.reset(seed=seed)
            plan = shortest_plan(env)
            for step, action in enumerate(plan):
                _, reward, terminated, truncated, info = env.step(action)
                assert not (terminated or truncated) or step == len(plan) - 1, (name, seed)
            assert plan and terminated and info["success"] and reward > 0, (name, seed)


def test_minigrid_data_structure_quality_and_reevaluation(minigrid_tiny):
    from offbench.generators.minigrid import NoisyPlanner

    near, noisy = minigrid_tiny["near-optimal"], minigrid_tiny["noisy-planner"]
    for store in (near, noisy):
        check_structure(store, episodes_per_task=5)
        assert store.observations.dtype == np.uint8 and store.observations.shape[1:] == (148,)
        assert np.asarray(store.observations[:, -1]).max() <= 3  # the direction
        success = np.asarray(store.columns["infos/success"])
        assert not (success & ~np.asarray(store.terminations)).any()  # success ends a MiniGrid episode
        table = reevaluate(store, NoisyPlanner, max_envs=16)
        for name, stats in store.card["task_stats"].items():
            assert table.loc[name, "success_rate"] == stats["success_rate"]
            assert table.loc[name, "mean_return"] == pytest.approx(stats["mean_return"], rel=1e-5)
    assert success_rates(near).min() == 1.0
    assert noisy.episode_returns().mean() < near.episode_returns().mean() - 0.1


def test_noisy_planner_data_is_the_former_sub_optimal_data(minigrid_tiny):
    """The noisy planner's quality was called sub-optimal when boards' entries were made from its data: the rename
    must not change a generated byte (this is the content sha256 of minigrid/tiny-sub-optimal as it was)."""
    assert minigrid_tiny["noisy-planner"].content_sha256() == "3c0236755c8094116e9a5dce2b4e144ce8d916d68a492e90b9ece401eb7c6595"


def test_mixed_quality_flips_a_coin_per_episode(tmp_path):
    from offbench.generators.minigrid import generate_minigrid

    params = {"suite": "MT3", "quality": "mixed", "episodes_per_task": 6, "workers": 1}
    store = load_native(generate_minigrid(params, 0, tmp_path / "m.h5", True))
    behaviour = episode_values(store, "behaviour")
    assert set(behaviour.tolist()) == {0, 1}  # 0: near-optimal, 1: noisy-planner (card's behaviour_profiles)
    assert store.card["behaviour_profiles"] == ["near-optimal", "noisy-planner"]


def test_minigrid_image_observation_keeps_the_view_shape():
    from offbench.envs.factory import make_env

    env = make_env({"suite": "minigrid", "id": "MT3", "kwargs": {"observation": "image"}}, "MiniGrid-MemoryS11-v0")
    obs, _ = env.reset(seed=0)
    assert obs.shape == (7, 7, 3) and obs.dtype == np.uint8 and env.observation_space.contains(obs)


def test_interrupted_collection_resumes_without_redoing_finished_tasks(tmp_path, monkeypatch):
    import offbench.generators.multitask as multitask

    clean = load_native(generate("minigrid/tiny-near-optimal", tmp_path / "clean" / "data.h5")).content_sha256()
    real_run_job = multitask.run_job
    calls = []

    def failing_on_second(*args):
        calls.append(args[2].task)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real_run_job(*args)

    out = tmp_path / "resumed" / "data.h5"
    monkeypatch.setattr(multitask, "run_job", failing_on_second)
    with pytest.raises(KeyboardInterrupt):
        generate("minigrid/tiny-near-optimal", out)
    assert len(list((tmp_path / "resumed" / "data.h5.work").glob("*.npz"))) == 1 and not out.exists()

    calls.clear()
    monkeypatch.setattr(multitask, "run_job", lambda *args: calls.append(args[2].task) or real_run_job(*args))
    generate("minigrid/tiny-near-optimal", out)
    assert calls == ["MiniGrid-RedBlueDoors-6x6-v0", "MiniGrid-MemoryS11-v0"]  # LavaGap was finished
    assert load_native(out).content_sha256() == clean
    calls.clear()
    generate("minigrid/tiny-near-optimal", out)  # already there with this recipe: nothing is redone
    assert calls == []


def test_a_different_recipe_does_not_reuse_an_unfinished_work_folder(tmp_path):
    out = tmp_path / "data.h5"
    (tmp_path / "data.h5.work").mkdir()
    (tmp_path / "data.h5.work" / "recipe.json").write_text("{}")
    with pytest.raises(OffbenchError, match="different recipe"):
        generate("minigrid/tiny-near-optimal", out)


def test_builtin_cards_env_tables_match_their_recipes():
    from offbench.generators.metaworld import metaworld_recipe
    from offbench.generators.metaworld_learned import learned_recipe as metaworld_learned_recipe
    from offbench.generators.minigrid import minigrid_recipe
    from offbench.generators.minigrid_learned import learned_recipe

    recipes = {
        "metaworld": metaworld_recipe,
        "minigrid": minigrid_recipe,
        "minigrid-learned": learned_recipe,
        "metaworld-learned": metaworld_learned_recipe,
    }
    paths = [path for folder in ("metaworld", "minigrid") for path in sorted((REPO / "datasets" / folder).glob("*.toml"))]
    cards = [read_card(path) for path in paths]
    assert len(cards) >= 16
    for card in cards:
        recipe = card.source["recipe"]
        assert card.env == recipes[recipe["generator"]](recipe["params"], recipe["seed"]).env, card.id


def test_env_factory_errors_name_the_problem():
    from offbench.envs.factory import make_env

    with pytest.raises(OffbenchError, match="out of range"):
        make_env({"suite": "minigrid", "id": "MT3"}, 7)
    with pytest.raises(OffbenchError, match="unknown task"):
        make_env({"suite": "metaworld", "id": "MT1", "kwargs": {"tasks": ["reach-v3"]}}, "push-v3")
    with pytest.raises(OffbenchError, match="not in Meta-World MT10"):
        make_env({"suite": "metaworld", "id": "MT10", "kwargs": {"tasks": ["hammer-v3"]}}, 0)


def test_a_missing_suite_package_names_the_extra(monkeypatch):
    import sys

    from offbench.envs.metaworld import suite_tasks

    monkeypatch.setitem(sys.modules, "metaworld", None)  # as if not installed
    with pytest.raises(OffbenchError, match=r"offbench\[metaworld\]"):
        suite_tasks("MT10")


def test_cli_generates_and_registers_a_dataset(run_cli, isolated_home):
    proc = run_cli("generate", "minigrid", "--suite", "MT3", "--episodes", "2", "--workers", "1", "--quiet", "--id", "mine/mt3")
    assert proc.returncode == 0, proc.stderr
    card = read_card(isolated_home / "datasets" / "mine" / "mt3.toml")
    assert card.kind == "multi-task" and card.extra["task_stats"]["MiniGrid-LavaGapS7-v0"]["episodes"] == 2
    assert run_cli("info", "mine/mt3").returncode == 0
    assert load_native(isolated_home / "data" / "mine" / "mt3" / "data.h5").card["id"] == "mine/mt3"  # the file names its dataset

    # a registered card's recipe fills that card's dataset, and the user card adds the data's statistics
    proc = run_cli("generate", "minigrid", "--suite", "MT3", "--episodes", "5", "--workers", "1", "--quiet")
    assert proc.returncode == 0, proc.stderr
    card = read_card(isolated_home / "datasets" / "minigrid" / "tiny-near-optimal.toml")
    assert card.description == builtin("minigrid/tiny-near-optimal").description and "task_stats" in card.extra
    assert (isolated_home / "data" / "minigrid" / "tiny-near-optimal" / "data.h5").is_file()

    bad = run_cli("generate", "metaworld", "--quality", "great", "--quiet")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "unknown quality 'great'" in bad.stderr
    assert not list((isolated_home / "data").rglob("*.work"))


@pytest.mark.parametrize("recipe_of, name", [("metaworld_recipe", "metaworld"), ("minigrid_recipe", "minigrid")])
def test_unknown_recipe_parameter_is_refused_by_name(recipe_of, name):
    import importlib

    module = importlib.import_module(f"offbench.generators.{name}")
    with pytest.raises(OffbenchError, match=f"unknown {name} recipe parameter\\(s\\): episodes \\(known: .*episodes_per_task"):
        getattr(module, recipe_of)({"episodes": 3}, 0)


def test_each_generator_names_its_own_noisy_profile():
    from offbench.generators.metaworld import metaworld_recipe
    from offbench.generators.minigrid import minigrid_recipe

    assert minigrid_recipe({"quality": "noisy-planner"}, 0).profiles == ("near-optimal", "noisy-planner")
    with pytest.raises(OffbenchError, match=r"^unknown quality 'sub-optimal' \(known: near-optimal, noisy-planner, mixed\)$"):
        minigrid_recipe({"quality": "sub-optimal"}, 0)
    assert metaworld_recipe({"quality": "sub-optimal"}, 0).profiles == ("near-optimal", "sub-optimal")  # a real stochastic policy
