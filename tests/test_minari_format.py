"""Minari's layout, both directions, checked against the real `minari` package (0.5.x)."""

import json

import gymnasium as gym
import numpy as np
import pytest
from helpers import make_store, require_extra

from offbench.data.formats import detect_format, load_path
from offbench.data.minari_format import export_minari

minari = require_extra("minari", "minari")
pytest.importorskip("jax", reason="Minari's DataCollector needs jax: pip install 'minari[create]' (in offbench's dev extra)")


class InfoWrapper(gym.Wrapper):
    """Adds per-step infos (a counter, a nested dict) so that the info mapping is exercised."""

    def reset(self, **kwargs):
        obs, _ = self.env.reset(**kwargs)
        self.t = 0
        return obs, {"t": np.int64(0), "nested": {"x": np.float32(0.5)}}

    def step(self, action):
        obs, reward, terminated, truncated, _ = self.env.step(action)
        self.t += 1
        return obs, reward, terminated, truncated, {"t": np.int64(self.t), "nested": {"x": np.float32(self.t + 0.5)}}


def collect(env_id: str, dataset_id: str, episodes: int = 3, max_steps: int = 9):
    """A tiny dataset made by Minari's own DataCollector (random actions, seeded)."""
    env = minari.DataCollector(InfoWrapper(gym.make(env_id, max_episode_steps=max_steps)), record_infos=True)
    env.action_space.seed(0)
    for seed in range(episodes):
        env.reset(seed=seed)
        done = False
        while not done:
            _, _, terminated, truncated, _ = env.step(env.action_space.sample())
            done = terminated or truncated
    with pytest.warns(UserWarning):  # minari warns about the author fields we leave empty
        return env.create_dataset(dataset_id, algorithm_name="random", description="tiny test dataset")


def assert_same_episodes(ours, theirs):
    """offbench store vs a MinariDataset: every array identical, infos mapped as documented."""
    assert ours.num_episodes == theirs.total_episodes
    for i, ep in enumerate(theirs.iterate_episodes()):
        mine = ours.episode(i)
        for key in ("observations", "actions", "rewards", "terminations", "truncations"):
            theirs_arr = getattr(ep, key)
            assert mine[key].dtype == theirs_arr.dtype, key
            np.testing.assert_array_equal(mine[key], theirs_arr, err_msg=key)
        for key, rows in _flat(ep.infos).items():
            if len(rows) == len(ep.rewards) + 1:
                np.testing.assert_array_equal(ours.episode_columns[f"reset_infos/{key}"][i], rows[0])
                rows = rows[1:]
            np.testing.assert_array_equal(mine[key if key in ours.columns else f"infos/{key}"], rows)


def _flat(infos, prefix=""):
    out = {}
    for key, value in infos.items():
        out.update(_flat(value, f"{prefix}{key}/") if isinstance(value, dict) else {f"{prefix}{key}": value})
    return out


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
def test_datacollector_dataset_loads_identical(env_id, tmp_path):
    collect(env_id, "test/tiny-v0")
    folder = tmp_path / "minari_home" / "test" / "tiny-v0"
    for path in (folder, folder / "data", folder / "data" / "main_data.hdf5"):
        assert detect_format(path) == "minari"
    store = load_path(folder)
    theirs = minari.load_dataset("test/tiny-v0")
    assert_same_episodes(store, theirs)
    assert store.columns["infos/t"].tolist()[:3] == [1, 2, 3]  # step-aligned: info returned with reward t
    assert store.episode_columns["reset_infos/t"].tolist() == [0, 0, 0]
    assert store.episode_columns["seed"].tolist() == [0, 1, 2]
    assert store.card["id"] == "test/tiny-v0" and store.card["minari"]["algorithm_name"] == "random"
    assert store.observation_space == theirs.observation_space and store.action_space == theirs.action_space
    # and back: offbench's export of it is, for Minari, the same dataset
    store.card = {**store.card, "id": "test/again-v0"}
    export_minari(store, tmp_path / "minari_home")
    assert_same_episodes(store, minari.load_dataset("test/again-v0"))
    again = minari.load_dataset("test/again-v0")
    assert again.storage.metadata["algorithm_name"] == "random"  # the source's own provenance is carried over
    assert again.env_spec.id == env_id  # a gymnasium env keeps its registered spec
    for a, b in zip(theirs.iterate_episodes(), again.iterate_episodes()):
        assert json.dumps(_flat(a.infos), default=str) == json.dumps(_flat(b.infos), default=str)


def test_offbench_export_loads_in_minari_and_round_trips(tmp_path):
    store = make_store(
        task_id=lambda n: np.full(n, 2, np.int32),
        **{"infos/success": lambda n: np.arange(n) == n - 1},
    )
    store.episode_columns = {"seed": np.array([7, 8, 9], np.uint64), "reset_infos/success": np.zeros(3, bool)}
    store.card = {"id": "test/hand-built", "description": "d", "scores": {"ref_min": 0.0, "ref_max": 10.0}}
    root = tmp_path / "minari_home"
    target = export_minari(store, root)
    assert target == root / "test" / "hand-built-v0"
    theirs = minari.load_dataset("test/hand-built-v0")
    assert theirs.total_steps == store.num_transitions
    assert theirs.observation_space == store.observation_space and theirs.action_space == store.action_space
    assert minari.get_normalized_score(theirs, np.array([5.0])) == pytest.approx(0.5)  # a fraction, not x100
    assert_same_episodes(store, theirs)
    ep = next(iter(theirs.iterate_episodes()))
    assert ep.infos["task_id"].tolist() == [2, 2, 2]  # visible to Minari users as an info
    assert [m["seed"] for m in theirs.storage.get_episode_metadata(range(3))] == [7, 8, 9]
    back = load_path(target)
    assert back.content_sha256() == store.content_sha256()
    assert set(back.columns) == {"task_id", "infos/success"}
    assert back.card == store.card
    with pytest.raises(Exception, match="already exists"):
        export_minari(store, root)


def test_dict_observations_are_flattened_and_recorded(tmp_path):
    from minari.data_collector import EpisodeBuffer

    space = gym.spaces.Dict({"pos": gym.spaces.Box(-1, 1, (2,), np.float32), "room": gym.spaces.Discrete(3)})
    rng = np.random.default_rng(0)
    steps = 4
    buffer = EpisodeBuffer(
        observations={"pos": rng.uniform(-1, 1, (steps + 1, 2)).astype(np.float32), "room": rng.integers(0, 3, steps + 1)},
        actions=rng.integers(0, 2, steps),
        rewards=rng.normal(size=steps),
        terminations=np.array([0, 0, 0, 1], bool),
        truncations=np.zeros(steps, bool),
    )
    with pytest.warns(UserWarning):
        minari.create_dataset_from_buffers(
            "test/dict-v0", [buffer], observation_space=space, action_space=gym.spaces.Discrete(2), algorithm_name="x"
        )
    store = load_path(tmp_path / "minari_home" / "test" / "dict-v0")
    theirs = next(iter(minari.load_dataset("test/dict-v0").iterate_episodes()))
    rows = [{k: v[t] for k, v in theirs.observations.items()} for t in range(steps + 1)]
    expected = np.stack([gym.spaces.flatten(space, row) for row in rows])
    np.testing.assert_array_equal(store.episode(0)["observations"], expected)
    assert store.observation_space == gym.spaces.flatten_space(space)
    assert json.loads(store.card["minari"]["original_observation_space"])["type"] == "Dict"


def test_jpeg_encoded_images_decode_like_minari(tmp_path):
    from minari.data_collector import EpisodeBuffer

    space = gym.spaces.Box(0, 255, (32, 32, 3), np.uint8)
    rng = np.random.default_rng(1)
    frames = rng.integers(0, 256, (4, 32, 32, 3), dtype=np.uint8)
    buffer = EpisodeBuffer(
        observations=list(frames), actions=np.zeros(3, np.int64), rewards=np.ones(3),
        terminations=np.array([0, 0, 1], bool), truncations=np.zeros(3, bool),
    )  # fmt: skip
    with pytest.warns(UserWarning):
        minari.create_dataset_from_buffers("test/img-v0", [buffer], observation_space=space, action_space=gym.spaces.Discrete(2))
    store = load_path(tmp_path / "minari_home" / "test" / "img-v0")
    theirs = next(iter(minari.load_dataset("test/img-v0").iterate_episodes()))
    np.testing.assert_array_equal(store.episode(0)["observations"], theirs.observations)
    assert not np.array_equal(theirs.observations, frames)  # it really was lossy JPEG on disk


def test_damaged_minari_folders_get_one_line_errors(tmp_path):
    from offbench.errors import OffbenchError

    dataset = export_minari(make_store(), tmp_path / "root")
    meta_path = dataset / "data" / "metadata.json"
    meta = json.loads(meta_path.read_text())
    meta["total_episodes"] = 4
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(OffbenchError, match="episode_3 is missing"):
        load_path(dataset)
    meta_path.unlink()
    assert detect_format(dataset) == "minari"  # by its HDF5 content
    with pytest.raises(OffbenchError, match="metadata.json: missing"):
        load_path(dataset)


MINIGRID_ENV = {
    "suite": "minigrid",
    "id": "MT3",
    "kwargs": {"tasks": ["MiniGrid-LavaGapS7-v0", "MiniGrid-MemoryS11-v0"], "observation": "flat"},
}


@pytest.mark.parametrize("env, recipe, task, algorithm", [
    (MINIGRID_ENV, {"generator": "minigrid", "seed": 0, "params": {"suite": "MT3"}}, 1, "planner"),
    ({"suite": "offbench", "id": "offbench/DarkRoom-v0"},
     {"generator": "darkroom", "seed": 0, "params": {"algo": "q-learning", "tasks": 4, "held_out": 1}}, {"goal": [3, 5]}, "q-learning"),
])  # fmt: skip
def test_generated_data_recovers_its_environment_and_names_its_maker(env, recipe, task, algorithm, tmp_path):
    if env["suite"] == "minigrid":
        require_extra("minigrid", "minigrid")
    store = make_store()
    store.card = {"id": "generated/tiny", "env": env, "source": {"recipe": recipe}}
    export_minari(store, tmp_path / "minari_home")
    theirs = minari.load_dataset("generated/tiny-v0")
    meta = theirs.storage.metadata
    assert meta["author"] == {"offbench"} and meta["algorithm_name"] == algorithm
    from offbench.errors import OffbenchError

    with pytest.raises(OffbenchError, match="task"):  # the data spans tasks: the user says which
        theirs.recover_environment()
    recovered = theirs.recover_environment(task=task)
    from offbench.envs.factory import make_env

    rebuilt = make_env(env, task)
    assert recovered.observation_space == rebuilt.observation_space and recovered.action_space == rebuilt.action_space
    assert np.array_equal(recovered.reset(seed=3)[0], rebuilt.reset(seed=3)[0])  # the same task, the same layout


def test_hand_built_data_has_no_maker_and_no_environment(tmp_path):
    store = make_store()
    store.card = {"id": "test/plain"}
    meta = json.loads((export_minari(store, tmp_path) / "data" / "metadata.json").read_text())
    assert not {"env_spec", "author", "algorithm_name"} & set(meta)


def test_data_downloaded_from_minari_exports_its_own_provenance(tmp_path):
    store = make_store()
    original = {"author": ["Farama"], "algorithm_name": "SAC", "code_permalink": "https://example.org/code"}
    store.card = {
        "id": "mujoco/hopper/medium-v0",
        "import": {"id": "mujoco/hopper/medium-v0", "minari": original},
    }  # as fetch_card stores it
    meta = json.loads((export_minari(store, tmp_path) / "data" / "metadata.json").read_text())
    assert {key: meta[key] for key in original} == original
