"""The data side of the public API: an EpisodeStore as a sequence of episodes and a table of transitions, its
one-line repr, and `offbench.data.samplers.sampler` (exported as `offbench.sampler`), whose samplers are torch
IterableDatasets."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from helpers import make_store
from test_samplers import CONTRACT_OPTIONS, dpt_store
from torch.utils.data import DataLoader, IterableDataset

from offbench.data.samplers import SAMPLERS, sampler
from offbench.data.store import EpisodeStore, load_native
from offbench.data.xland import XLandHistories, write_xland_file
from offbench.errors import OffbenchError


def multitask_store() -> EpisodeStore:
    """Episodes of lengths 3, 5, 2 with a per-step task id and info column."""
    return make_store(task_id=lambda n: np.full(n, n, np.int64), **{"infos/success": lambda n: np.arange(n) == n - 1})


def assert_same_batches(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor]) -> None:
    assert got.keys() == want.keys()
    for key in want:
        assert torch.equal(got[key], want[key]), key


# ----------------------------------------------------------------------------- episodes


def test_len_indexing_and_iteration_give_every_episode_with_its_final_observation(tmp_path):
    store = multitask_store()
    mapped = load_native(store.save(tmp_path / "d.h5"))
    for dataset in (store, mapped):
        assert len(dataset) == dataset.num_episodes == 3
        episodes = list(dataset)
        assert len(episodes) == 3
        for i, episode in enumerate(episodes):
            lo, hi = dataset.episode_starts[i], dataset.episode_starts[i + 1]
            assert set(episode) == {"observations", "actions", "rewards", "terminations", "truncations", "task_id", "infos/success"}
            np.testing.assert_array_equal(episode["observations"][:-1], dataset.observations[lo:hi])
            np.testing.assert_array_equal(episode["observations"][-1], dataset.final_observations[i])  # kept, not dropped
            for name in ("actions", "rewards", "terminations", "truncations"):
                np.testing.assert_array_equal(episode[name], getattr(dataset, name)[lo:hi])
            for name in ("task_id", "infos/success"):
                np.testing.assert_array_equal(episode[name], dataset.columns[name][lo:hi])
            for a, b in ((episode, dataset[i]), (episode, dataset.episode(i)), (episode, dataset[i - 3])):
                assert all(np.array_equal(a[k], b[k]) for k in a)
        assert list(dataset.iter_episodes())[1]["observations"].shape == (6, 4)  # T + 1 rows
    rebuilt = EpisodeStore.from_episodes(list(store), observation_space=store.observation_space, action_space=store.action_space)
    assert rebuilt.content_sha256() == store.content_sha256()


@pytest.mark.parametrize("index", [3, -4, 10])
def test_an_episode_out_of_range_is_an_index_error_saying_how_many_there_are(index):
    with pytest.raises(IndexError, match=rf"episode {index} out of range \(the dataset has 3 episodes"):
        make_store()[index]


# ----------------------------------------------------------------------------- to_pandas


def test_to_pandas_has_one_row_per_transition_holding_the_store_values():
    store = multitask_store()
    frame = store.to_pandas()
    assert len(frame) == store.num_transitions
    assert list(frame.columns) == [
        "episode", "step", "observation_0", "observation_1", "observation_2", "observation_3", "action_0", "action_1",
        "reward", "terminated", "truncated", "infos/success", "task_id",
    ]  # fmt: skip
    assert frame["episode"].tolist() == [0, 0, 0, 1, 1, 1, 1, 1, 2, 2]
    assert frame["step"].tolist() == [0, 1, 2, 0, 1, 2, 3, 4, 0, 1]
    np.testing.assert_array_equal(frame[[f"observation_{k}" for k in range(4)]].to_numpy(), store.observations)
    np.testing.assert_array_equal(frame[["action_0", "action_1"]].to_numpy(), store.actions)
    np.testing.assert_array_equal(frame["reward"].to_numpy(), store.rewards)
    np.testing.assert_array_equal(frame["terminated"].to_numpy(), store.terminations)
    np.testing.assert_array_equal(frame["truncated"].to_numpy(), store.truncations)
    np.testing.assert_array_equal(frame["task_id"].to_numpy(), store.columns["task_id"])
    assert frame["reward"].dtype == np.float32 and frame["terminated"].dtype == bool


def test_to_pandas_takes_chosen_episodes_and_flattens_observations_in_c_order():
    base = make_store()
    store = EpisodeStore(
        observations=np.asarray(base.observations).reshape(-1, 2, 2),
        final_observations=base.final_observations.reshape(-1, 2, 2),
        actions=np.arange(10, dtype=np.int64) % 3,  # discrete: one column
        rewards=base.rewards, terminations=base.terminations, truncations=base.truncations, episode_starts=base.episode_starts,
    )  # fmt: skip
    part = store.to_pandas(episodes=slice(1, 3))
    assert len(part) == 5 + 2 and part["episode"].tolist() == [1] * 5 + [2] * 2
    assert "action" in part.columns and "action_0" not in part.columns
    np.testing.assert_array_equal(part["action"].to_numpy(), store.actions[3:])
    np.testing.assert_array_equal(part[[f"observation_{k}" for k in range(4)]].to_numpy(), store.observations[3:].reshape(7, 4))
    assert store.to_pandas(episodes=[2, 0])["episode"].tolist() == [2, 2, 0, 0, 0]
    assert store.to_pandas(episodes=-1)["step"].tolist() == [0, 1]


# ----------------------------------------------------------------------------- repr


def test_repr_is_one_short_line_with_the_counts_and_neither_arrays_nor_card(tmp_path):
    store = make_store()
    store.card = {"id": "test/hand-built", "format": "offbench", "description": "x" * 1000}
    for dataset in (store, load_native(store.save(tmp_path / "d.h5"))):
        text = repr(dataset)
        assert text == (
            "EpisodeStore(id='test/hand-built', format='offbench', episodes=3, transitions=10, "
            "observation_space=Box(-inf, inf, (4,), float32), action_space=Box(-1.0, 1.0, (2,), float32))"
        )
    bare = make_store()
    bare.card = {}
    assert repr(load_native(bare.save(tmp_path / "mine.h5"))).startswith("EpisodeStore(id='mine', format=None, episodes=3,")
    wide = make_store(obs_dim=12)
    wide.observation_space = gym.spaces.Box(np.zeros(12, np.float32), np.arange(1, 13, dtype=np.float32))  # gymnasium prints its bounds
    assert "observation_space=Box(shape=(12,), dtype=float32)" in repr(wide) and len(repr(wide)) < 300


def test_xland_histories_have_len_and_a_short_repr(tmp_path):
    histories = XLandHistories(write_xland_file(tmp_path / "xland.hdf5", tasks=2, histories=3, steps=40, chunk_steps=16))
    assert len(histories) == histories.num_histories == 6
    text = repr(histories)
    assert text.startswith("XLandHistories(id='xland', format=None, tasks=2, histories=6, transitions=240, ")
    assert "\n" not in text and len(text) < 300
    windows = sampler(histories, "ad_windows", batch_size=3, seed=1, window_length=8)
    assert_same_batches(
        next(iter(DataLoader(windows, batch_size=None))), sampler(histories, "ad_windows", batch_size=3, seed=1, window_length=8).sample()
    )


# ----------------------------------------------------------------------------- sampler


@pytest.mark.parametrize("kind", sorted(SAMPLERS))
def test_a_dataloader_gives_the_batches_sample_gives(kind):
    store, options = dpt_store(), CONTRACT_OPTIONS[kind]
    batches = sampler(store, kind, batch_size=8, seed=3, **options)
    assert isinstance(batches, IterableDataset)
    reference = sampler(store, kind, batch_size=8, seed=3, **options)
    loaded = iter(DataLoader(batches, batch_size=None))
    for _ in range(3):
        assert_same_batches(next(loaded), reference.sample())


def test_dataloader_workers_draw_the_documented_distinct_streams():
    """Worker k draws from np.random.default_rng(seed).spawn(k + 1)[k]; the loader takes workers in turn."""
    store = make_store()
    batches = list(zip(range(4), DataLoader(sampler(store, "transitions", batch_size=6, seed=7), batch_size=None, num_workers=2)))
    workers = [sampler(store, "transitions", batch_size=6, seed=7) for _ in range(2)]
    for k, worker in enumerate(workers):
        worker.rng = np.random.default_rng(7).spawn(k + 1)[k]
    for j, batch in batches:
        assert_same_batches(batch, workers[j % 2].sample())
    assert not torch.equal(batches[0][1]["observations"], batches[1][1]["observations"])


def test_sampler_opens_a_path_as_load_does(tmp_path):
    store = make_store()
    path = store.save(tmp_path / "d.h5")
    want = sampler(store, "transitions", batch_size=5, seed=2).sample()
    for dataset in (path, str(path)):
        assert_same_batches(sampler(dataset, "transitions", batch_size=5, seed=2).sample(), want)


@pytest.mark.parametrize(
    ("dataset", "kind", "options", "message"),
    [
        (make_store(), "nope", {}, "unknown sampler kind 'nope' (known: ad_windows, dpt, prompt_segments, segments, transitions)"),
        (make_store(), "segments", {"window_length": 3}, "sampler 'segments' has no option window_length (options: segment_length)"),
        (make_store(), "ad_windows", {}, "sampler 'ad_windows' needs the option window_length"),
        (np.zeros(3), "transitions", {}, "offbench.sampler samples a dataset (offbench.load's result, an id or a path), not a ndarray"),
    ],
)
def test_unknown_kind_option_or_dataset_is_a_one_line_error(dataset, kind, options, message):
    with pytest.raises(OffbenchError) as error:
        sampler(dataset, kind, batch_size=4, **options)
    assert str(error.value) == message


def test_dataloader_workers_refuse_to_build_batches_off_the_cpu():
    batches = sampler(make_store(), "transitions", batch_size=2, device="meta")
    assert batches.sample()["observations"].device.type == "meta"  # fine in the main process
    with pytest.raises(OffbenchError, match="DataLoader workers build batches on the CPU; make the sampler with device='cpu'"):
        next(iter(DataLoader(batches, batch_size=None, num_workers=1)))
