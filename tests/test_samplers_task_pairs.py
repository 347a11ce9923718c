"""The `task_pairs` option of the ad_windows and dpt samplers: rows 2k and 2k + 1 come from one task (two of its
histories where it has several), the pairs' tasks differ while the dataset has enough of them, resume repeats the
stream, and a dataset that cannot be paired is refused in one line."""

import itertools

import numpy as np
import pytest
import torch
from helpers import make_store
from test_samplers import dpt_store, find_rows

from offbench.data.samplers import make_sampler
from offbench.errors import OffbenchError

# five histories: task 0 has histories 0 and 1, task 1 has 2 and 3, task 2 has history 4 alone
HISTORY_TASKS = (0, 0, 1, 1, 2)


def paired_histories():
    """Five learning histories of two episodes (4 and 5 steps) each, of tasks HISTORY_TASKS."""
    histories = iter(np.repeat(np.arange(5), 2))
    tasks = iter(np.repeat(HISTORY_TASKS, 2))
    return make_store(
        episode_lengths=(4, 5) * 5,
        terminal_last=(False, True) * 5,
        history_id=lambda n, h=histories: np.full(n, next(h), np.int64),
        task_id=lambda n, t=tasks: np.full(n, next(t), np.int64),
    )


def window_histories(store, batch) -> np.ndarray:
    """The history of each row's window, checking the window is consecutive steps of one history."""
    histories = []
    for row in batch["observations"].numpy():
        index = find_rows(np.asarray(store.observations), row)
        np.testing.assert_array_equal(index, np.arange(index[0], index[0] + len(index)))
        assert len(set(store.columns["history_id"][index])) == 1
        histories.append(int(store.columns["history_id"][index[0]]))
    return np.array(histories)


def test_ad_windows_in_task_pairs_come_from_two_histories_of_one_task_and_pairs_from_different_tasks():
    store = paired_histories()
    sampler = make_sampler("ad_windows", store, 6, seed=0, window_length=3, task_pairs=True)
    firsts: dict[int, set[int]] = {}
    for _ in range(60):
        batch = sampler.sample()
        tasks = batch["task_ids"].numpy()
        histories = window_histories(store, batch)
        np.testing.assert_array_equal(tasks, np.asarray(HISTORY_TASKS)[histories])
        assert (tasks[0::2] == tasks[1::2]).all()  # each pair one task
        assert len(set(tasks[0::2])) == 3  # three pairs, three tasks: all different
        for left, right in zip(histories[0::2], histories[1::2]):
            assert left != right or HISTORY_TASKS[left] == 2  # two histories, but where the task has only one
        for row, history in zip(batch["observations"].numpy(), histories):
            firsts.setdefault(int(history), set()).add(int(find_rows(np.asarray(store.observations), row)[0]))
    # every window of every history is drawn (9 steps, windows of 3: 7 first steps each)
    assert all(len(starts) == 7 for starts in firsts.values()) and len(firsts) == 5


def test_more_pairs_than_tasks_repeat_tasks_but_keep_every_pair_one_task():
    batch = make_sampler("ad_windows", paired_histories(), 16, seed=1, window_length=3, task_pairs=True).sample()
    tasks = batch["task_ids"].numpy()
    assert (tasks[0::2] == tasks[1::2]).all() and set(tasks) == {0, 1, 2}


def test_dpt_task_pairs_hold_one_task_each_with_its_own_context_and_query():
    store = dpt_store()  # task 0: histories 0 and 1; task 1: history 2
    sampler = make_sampler("dpt", store, 4, seed=0, context_size=2, task_pairs=True)
    for _ in range(30):
        batch = sampler.sample()
        tasks = batch["task_ids"].numpy()
        assert (tasks[0::2] == tasks[1::2]).all() and set(tasks) == {0, 1}
        histories = [
            int(store.columns["history_id"][find_rows(np.asarray(store.observations), row)[0]])
            for row in batch["context_observations"].numpy()
        ]
        zero = [h for h, t in zip(histories, tasks) if t == 0]
        assert sorted(zero) == [0, 1]  # task 0's pair: its two histories
        assert [h for h, t in zip(histories, tasks) if t == 1] == [2, 2]


@pytest.mark.parametrize(
    "kind, options, store",
    [("ad_windows", {"window_length": 3}, paired_histories), ("dpt", {"context_size": 2}, dpt_store)],
)
def test_task_pairs_resume_the_same_stream(kind, options, store):
    data = store()
    sampler = make_sampler(kind, data, 4, seed=3, task_pairs=True, **options)
    state = sampler.state_dict()
    expected = [sampler.sample() for _ in range(3)]
    resumed = make_sampler(kind, data, 4, seed=99, task_pairs=True, **options)
    resumed.load_state_dict(state)
    for want in expected:
        got = resumed.sample()
        assert all(torch.equal(want[key], got[key]) for key in want)


def one_history_per_episode():
    """A history_id column for make_store: episode i is history i."""
    ids = itertools.count()
    return lambda n: np.full(n, next(ids))


def test_a_dataset_that_cannot_be_paired_is_refused_in_one_line():
    one_task = make_store(history_id=one_history_per_episode(), task_id=lambda n: np.full(n, 4))
    with pytest.raises(OffbenchError, match=r"^task_pairs contrasts pairs .* this dataset has one task \(4\); turn task_pairs off$"):
        make_sampler("ad_windows", one_task, 4, 0, window_length=2, task_pairs=True)
    make_sampler("ad_windows", one_task, 4, 0, window_length=2)  # without the option it samples
    with pytest.raises(OffbenchError, match="^task_pairs draws rows in pairs: batch_size must be even, got 5$"):
        make_sampler("ad_windows", paired_histories(), 5, 0, window_length=2, task_pairs=True)
    no_tasks = make_store(history_id=one_history_per_episode())
    with pytest.raises(OffbenchError, match="ad_windows with task_pairs pairs rows of one task: the dataset has no 'task_id' column"):
        make_sampler("ad_windows", no_tasks, 4, 0, window_length=2, task_pairs=True)
