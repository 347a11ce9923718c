"""Data is checked before it trains: id and label columns of native files, XLand files on open and chunk by chunk,
MTDiff folders on import. Every file is tiny and written here; each bad one is a one-line error naming the file
and the field, with exit code 2 from the CLI and nothing written."""

from __future__ import annotations

import os

import gymnasium as gym
import h5py
import numpy as np
import pytest

import offbench
from offbench.data.samplers import make_sampler
from offbench.data.store import EpisodeStore, load_native
from offbench.data.xland import LAYOUT, XLandHistories, write_xland_file
from offbench.errors import OffbenchError


def cli(capsys, *args) -> tuple[int, str, str]:
    from offbench import cli as offbench_cli

    with pytest.raises(SystemExit) as exit_info:
        offbench_cli.main([str(a) for a in args])
    out, err = capsys.readouterr()
    return exit_info.value.code, out, err


# ---------------------------------------------------------------------------------------------- native files

DARKROOM_CARD = {
    "id": "test/darkroom-copy",
    "kind": "learning-history",
    "source": {"recipe": {"generator": "darkroom", "params": {"tasks": 10, "held_out": 2}}},
}
MULTITASK_CARD = {"id": "test/mt3", "kind": "multi-task", "env": {"suite": "minigrid", "id": "MT3", "kwargs": {"tasks": ["a", "b", "c"]}}}


def darkroom_copy(card=DARKROOM_CARD, episodes=6, length=5, obs_space=None, observations=None) -> EpisodeStore:
    """A Dark-Room-shaped learning history: (x, y) int64 cells, Discrete(5), task_id / history_id / optimal_action."""
    rng = np.random.default_rng(0)
    eps = []
    for e in range(episodes):
        ends = np.zeros(length, bool)
        ends[-1] = True
        eps.append(
            {
                "observations": rng.integers(0, 9, (length + 1, 2)) if observations is None else observations(length + 1),
                "actions": rng.integers(0, 5, length),
                "rewards": rng.random(length).astype(np.float32),
                "terminations": np.zeros(length, bool),
                "truncations": ends,
                "task_id": np.full(length, e % 3, np.int32),
                "history_id": np.full(length, e // 2, np.int32),
                "optimal_action": rng.integers(0, 5, length).astype(np.uint8),
            }
        )
    space = obs_space or gym.spaces.Box(0, 8, (2,), np.int64)
    return EpisodeStore.from_episodes(eps, observation_space=space, action_space=gym.spaces.Discrete(5), card=dict(card))


def rewrite(path, name, values) -> None:
    """Replace one array of a written native file (the dtype may change), as a hand-edited copy would."""
    with h5py.File(path, "r+") as f:
        del f[name]
        f[name] = values


@pytest.mark.parametrize(
    ("card", "change", "message"),
    [
        (
            DARKROOM_CARD,
            lambda ids: ids.__setitem__(7, 99),
            r"columns/task_id\[7\] = 99 is out of range \(the card's recipe's tasks - held_out names 8 task\(s\): ids 0\.\.7\)",
        ),
        (
            MULTITASK_CARD,
            lambda ids: ids.__setitem__(12, 3),
            r"columns/task_id\[12\] = 3 is out of range \(the card's env.kwargs.tasks names 3 task\(s\)",
        ),
        (MULTITASK_CARD, lambda ids: ids.__setitem__(0, -1), r"columns/task_id\[0\] = -1 is out of range"),
        (
            {"id": "no-count"},
            lambda ids: ids.__setitem__(29, -1),
            r"columns/task_id\[29\] = -1 is out of range \(a task id is never negative\)",
        ),
    ],
)
def test_task_ids_outside_the_cards_tasks_are_refused_by_verify_and_by_training(tmp_path, capsys, card, change, message):
    path = darkroom_copy(card).save(tmp_path / "d.h5")
    ids = load_native(path).columns["task_id"][()].copy()
    change(ids)
    rewrite(path, "columns/task_id", ids)
    code, out, err = cli(capsys, "verify", path)
    assert code == 2 and not out and err.count("\n") == 1
    assert str(path) in err
    assert __import__("re").search(message, err), err
    code, _, err = cli(capsys, "run", "baseline", "bc", "--dataset", path, "--out", tmp_path / "runs", "--steps", "1")
    assert code == 2 and err.count("\n") == 1 and "columns/task_id" in err
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_a_float_task_id_column_and_a_missing_one_on_a_multi_task_card_are_refused(tmp_path):
    path = darkroom_copy(MULTITASK_CARD).save(tmp_path / "d.h5")
    rewrite(path, "columns/task_id", load_native(path).columns["task_id"][()].astype(np.float32))
    with pytest.raises(OffbenchError, match=r"d\.h5: columns/task_id must hold one integer per step, got dtype float32"):
        load_native(path)
    with h5py.File(path, "r+") as f:
        del f["columns/task_id"]
    with pytest.raises(OffbenchError, match=r"d\.h5: the card is multi-task but there is no column task_id"):
        load_native(path)
    store = darkroom_copy(DARKROOM_CARD)  # a learning-history card may leave it out (one task)
    del store.columns["task_id"]
    store.validate()


def test_an_optimal_action_outside_the_action_space_is_refused_before_dpt_indexes_with_it(tmp_path, capsys):
    path = darkroom_copy().save(tmp_path / "d.h5")
    labels = load_native(path).columns["optimal_action"][()].copy()
    labels[17] = 77
    rewrite(path, "columns/optimal_action", labels)
    code, _, err = cli(capsys, "verify", path)
    assert code == 2 and err.count("\n") == 1
    assert f"{path}: columns/optimal_action[17] = 77 is outside the action space Discrete(5)" in err.replace("\n", "")
    rewrite(path, "columns/optimal_action", labels.astype(np.float64) * 0 + 0.5)
    with pytest.raises(
        OffbenchError, match=r"columns/optimal_action must hold integers in the discrete action space Discrete\(5\), got dtype float64"
    ):
        load_native(path)
    rewrite(path, "columns/optimal_action", np.zeros((len(labels), 2), np.uint8))
    with pytest.raises(OffbenchError, match=r"columns/optimal_action rows have shape \(2,\), but the action space is Discrete\(5\)"):
        load_native(path)


def test_observations_outside_a_bounded_integer_box_are_refused(tmp_path):
    space = gym.spaces.Box(0, 255, (4,), np.uint8)
    path = darkroom_copy(obs_space=space, observations=lambda n: np.full((n, 4), 7, np.int64)).save(tmp_path / "d.h5")
    observations = load_native(path).observations[()].copy()
    observations[11, 2] = 10**15
    rewrite(path, "observations", observations)
    with pytest.raises(
        OffbenchError,
        match=r"d\.h5: observations\[11\] = \[ *7 +7 +1000000000000000 +7\] is outside the observation space Box\(0, 255, \(4,\), uint8\)",
    ):
        load_native(path)
    rewrite(path, "observations", observations.astype(np.float64) * 0 + 2.5)  # not integers
    with pytest.raises(OffbenchError, match=r"observations\[0\] = \[2.5 2.5 2.5 2.5\] is outside"):
        load_native(path)
    finals = np.full((6, 4), 7, np.int64)
    finals[4, 0] = -1
    rewrite(path, "observations", np.full((30, 4), 7, np.int64))
    rewrite(path, "final_observations", finals)
    with pytest.raises(OffbenchError, match=r"final_observations\[4\] = \[-1 +7 +7 +7\] is outside"):
        load_native(path)
    with pytest.raises(OffbenchError, match=r"observations\[3\] = \[9 0\] is outside the observation space Box\(0, 8, \(2,\), int64\)"):
        darkroom_copy(observations=lambda n: np.array([[0, 0]] * 3 + [[9, 0]] + [[0, 0]] * (n - 4)))


def test_bounds_that_differ_by_dimension_are_checked_dimension_by_dimension():
    """Key-to-Door's (x, y, has_key) under Box(0, [8, 8, 1]): 8 is fine in x, not in has_key."""
    space = gym.spaces.Box(0, np.array([8, 8, 1]), (3,), np.int64)
    darkroom_copy(obs_space=space, observations=lambda n: np.tile([8, 8, 1], (n, 1)).astype(np.uint8))
    with pytest.raises(OffbenchError, match=r"observations\[2\] = \[0 0 8\] is outside"):
        darkroom_copy(obs_space=space, observations=lambda n: np.array([[8, 8, 1]] * 2 + [[0, 0, 8]] + [[1, 1, 0]] * (n - 3), np.uint8))


def test_continuous_optimal_actions_must_be_finite():
    store = darkroom_copy()
    store.action_space = gym.spaces.Box(-1, 1, (2,), np.float32)
    store.actions = np.zeros((len(store.actions), 2), np.float32)
    store.columns["optimal_action"] = np.zeros((len(store.actions), 2), np.float32)
    store.validate()
    store.columns["optimal_action"][4, 1] = np.nan
    with pytest.raises(OffbenchError, match=r"columns/optimal_action\[4\] = \[ 0. nan\] is not finite"):
        store.validate()


def test_label_checks_read_a_memory_mapped_file_in_blocks(tmp_path, monkeypatch):
    """The first bad row is found across block boundaries (blocks of 4 rows here), in the mapped file."""
    from offbench.data import store as store_module

    path = darkroom_copy(MULTITASK_CARD).save(tmp_path / "d.h5")
    with h5py.File(path, "r+") as f:
        f["columns/task_id"][22] = 5
    original = store_module._first_row
    blocks = []

    def in_blocks(arr, is_bad, block_rows=4):
        blocks.append(type(arr))
        return original(arr, is_bad, block_rows)

    monkeypatch.setattr(store_module, "_first_row", in_blocks)
    with pytest.raises(OffbenchError, match=r"columns/task_id\[22\] = 5"):
        load_native(path)
    assert np.memmap in blocks


def test_a_uint8_image_under_box_0_255_is_not_read_for_the_bounds():
    """No uint8 value can leave Box(0, 255, uint8): nothing to read, whatever the size."""
    from offbench.data.store import _outside

    assert _outside(np.dtype(np.uint8), np.asarray(0), np.asarray(255)) is None
    assert _outside(np.dtype(np.int64), np.asarray(0), np.asarray(255)) is not None


# ---------------------------------------------------------------------------------------------- XLand files


def reshape_xland(path, shape_of, fill=True) -> None:
    """Replace every dataset of every group by one of shape `shape_of(old shape)` (chunks (1, 128, ...)); with
    `fill`, the first 128 steps are written (the rest is declared only)."""
    with h5py.File(path, "a") as f:
        for task in f:
            for name in LAYOUT:
                old = f[task][name]
                data, dtype, shape = old[()], old.dtype, shape_of(old.shape)
                del f[task][name]
                new = f[task].create_dataset(
                    name, shape=shape, dtype=dtype, chunks=(1, 128, *shape[2:]), compression="gzip", maxshape=(None, None, *shape[2:])
                )
                if fill and shape[0] and shape[1]:
                    new[:, :128] = data[: shape[0], :128]


@pytest.mark.parametrize(
    ("shape_of", "message"),
    [
        (lambda s: (0, *s[1:]), r"group 0/rewards: shape \(0, 300\): no histories"),
        (lambda s: (s[0], 0, *s[2:]), r"group 0/rewards: shape \(2, 0\): no steps"),
        (
            lambda s: (s[0], 10**10, *s[2:]),
            r"datasets: declare 2 tasks x 2 histories x 10,000,000,000 steps, at least [\d,]+ bytes even at deflate's best ratio; the file has",
        ),
    ],
)
def test_info_and_verify_refuse_an_empty_or_absurd_shape_in_one_line(tmp_path, capsys, shape_of, message):
    path = write_xland_file(tmp_path / "x.hdf5", 2, 2, 300, chunk_steps=128)
    reshape_xland(path, shape_of)
    before = path.read_bytes()
    for command in ("info", "verify"):
        code, out, err = cli(capsys, command, path)
        assert code == 2 and not out and err.count("\n") == 1, (command, err)
        assert __import__("re").search(rf"{path}: {message}", err.replace("\n", "")), err
    assert path.read_bytes() == before


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("abc", "attribute ruleset-id must be an integer, got 'abc'"),
        (np.float64(1.5), "attribute ruleset-id must be an integer, got"),
        (np.int64(-3), "attribute ruleset-id must be >= 0, got -3"),
        (np.array([1, 2]), "attribute ruleset-id must be an integer, got array"),
    ],
)
def test_info_and_verify_agree_on_a_bad_ruleset_id(tmp_path, capsys, value, message):
    path = write_xland_file(tmp_path / "x.hdf5", 2, 2, 300, chunk_steps=128)
    with h5py.File(path, "a") as f:
        f["1"].attrs["ruleset-id"] = value
    errors = []
    for command in ("info", "verify"):
        code, out, err = cli(capsys, command, path)
        assert code == 2 and not out and err.count("\n") == 1
        errors.append(err)
    assert errors[0] == errors[1] and f"{path}: group 1: {message}" in errors[0]


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda f: f["1"].attrs.__setitem__("env-id", 7), "group 1: attribute env-id must be text, got 7"),
        (
            lambda f: f["0"].attrs.__setitem__("env-id", "MiniGrid-Empty"),
            "group 0: attribute env-id 'MiniGrid-Empty' is not an XLand-MiniGrid id",
        ),
        (lambda f: f["1"].attrs.__delitem__("benchmark-id"), "group 1: missing attribute 'benchmark-id'"),
        (
            lambda f: (f["1"].__delitem__("dones"), f["1"].create_dataset("dones", (2, 300), bool, chunks=(1, 128), compression="gzip")),
            "group 1/dones: never written (no data stored for it)",
        ),
        (
            lambda f: (
                f["1"].__delitem__("actions"),
                f["1"].create_dataset("actions", data=np.zeros((2, 300), np.uint8), chunks=(1, 64), compression="gzip"),
            ),
            r"group 1/actions: chunks (1, 64), group 0 has (1, 128)",
        ),
        (
            lambda f: (
                f["0"].__delitem__("states"),
                f["0"].create_dataset("states", data=np.zeros((2, 300, 5, 5), np.uint8), chunks=(1, 128, 5, 1), compression="gzip"),
            ),
            "group 0/states: chunks (1, 128, 5, 1) split the (5, 5) items",
        ),
        (lambda f: f.move("1", "x"), "task groups: must be named 0..1; found x"),
    ],
)
def test_opening_runs_the_metadata_check(tmp_path, edit, message):
    path = write_xland_file(tmp_path / "x.hdf5", 2, 2, 300, chunk_steps=128)
    with h5py.File(path, "a") as f:
        edit(f)
    with pytest.raises(OffbenchError) as error:
        offbench.load(path)
    assert str(error.value).startswith(f"{path}: {message}") and "\n" not in str(error.value)


def test_a_passed_check_is_remembered_per_file_and_verify_runs_it_afresh(tmp_path, isolated_home):
    path = write_xland_file(tmp_path / "x.hdf5", 2, 2, 300, chunk_steps=128)
    XLandHistories(path)
    assert (isolated_home / "xland" / "layout-checked.json").exists()
    with h5py.File(path, "a") as f:  # an edit changes the modification time: checked again
        f["1"].attrs["ruleset-id"] = np.int64(-1)
    with pytest.raises(OffbenchError, match="ruleset-id must be >= 0"):
        XLandHistories(path)
    with h5py.File(path, "a") as f:
        f["1"].attrs["ruleset-id"] = np.int64(1)
    XLandHistories(path)
    stat = path.stat()
    with h5py.File(path, "a") as f:  # same size, modification time put back: the remembered verdict stands ...
        f["1"].attrs["ruleset-id"] = np.int64(-1)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert path.stat().st_size == stat.st_size
    histories = XLandHistories(path)
    with pytest.raises(OffbenchError, match="ruleset-id must be >= 0"):  # ... but verify looks again
        histories.verify(None, "nothing")


def corrupt(path, task, name, history, step, value) -> None:
    with h5py.File(path, "a") as f:
        f[f"{task}/{name}"][history, step] = value


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("actions", 6, "group 0/actions, history 0, step 700: action 6 is outside Discrete(6)"),
        ("rewards", np.nan, "group 0/rewards, history 0, step 700: reward nan is not finite"),
        ("rewards", -np.inf, "group 0/rewards, history 0, step 700: reward -inf is not finite"),
        (
            "states",
            np.full((5, 5), 156, np.uint8),
            "group 0/states, history 0, step 700: state byte 156 decodes to tile 13 (XLand-MiniGrid has 13 tiles)",
        ),
    ],
)
def test_the_ad_sampler_never_hands_over_a_bad_action_reward_or_tile(tmp_path, name, value, message):
    path = write_xland_file(tmp_path / "x.hdf5", 1, 1, 1000, chunk_steps=256)
    corrupt(path, 0, name, 0, 700, value)
    sampler = make_sampler("ad_windows", offbench.load(path), batch_size=1, seed=0, window_length=1000)  # the whole history
    with pytest.raises(OffbenchError) as error:
        sampler.sample()
    assert str(error.value) == f"{path}: {message}"


def test_the_dpt_sampler_never_hands_over_a_bad_expert_action(tmp_path):
    path = write_xland_file(tmp_path / "x.hdf5", 1, 1, 300, chunk_steps=128)
    with h5py.File(path, "a") as f:
        f["0/expert_actions"][...] = 9
    sampler = make_sampler("dpt", offbench.load(path), batch_size=2, seed=0, context_size=8)
    with pytest.raises(OffbenchError, match=r"group 0/expert_actions, history 0, step [\d,]+: expert action 9 is outside Discrete\(6\)"):
        sampler.sample()


def test_padding_past_the_last_step_of_an_edge_chunk_is_not_data(tmp_path):
    """300 steps in chunks of 128: the last chunk's 84 steps past the end are never looked at."""
    from offbench.data.xland import check_chunk

    data = np.full((1, 128), 9, np.uint8)
    data[0, :44] = 1
    check_chunk(tmp_path, 0, "actions", data, (0, 256), (1, 300))
    data[0, 43] = 9
    with pytest.raises(OffbenchError, match="history 0, step 299: action 9"):
        check_chunk(tmp_path, 0, "actions", data, (0, 256), (1, 300))


def test_a_chunk_never_written_is_an_error_not_zeros(tmp_path):
    path = write_xland_file(tmp_path / "x.hdf5", 1, 2, 300, chunk_steps=128)
    with h5py.File(path, "a") as f:
        del f["0/actions"]
        ds = f["0"].create_dataset("actions", (2, 300), np.uint8, chunks=(1, 128), compression="gzip")
        ds[:, :128] = 1  # the first chunk of each history only
    reader = offbench.load(path).reader()
    reader.chunk(0, "actions", 1, 0)
    with pytest.raises(OffbenchError, match=r"group 0/actions: the chunk of history 1 from step 128 was never written"):
        reader.chunk(0, "actions", 1, 1)


def test_verify_full_reads_every_chunk_where_the_sampled_check_reads_a_few(tmp_path, capsys):
    path = write_xland_file(tmp_path / "x.hdf5", 2, 2, 1000, chunk_steps=128)
    histories = offbench.load(path)
    assert "all 160 chunks decoded and checked" in histories.verify(None, "nothing", full=True)
    corrupt(path, 1, "rewards", 1, 500, np.inf)  # a middle chunk: the sampled check reads first and last ones
    histories = offbench.load(path)
    assert histories.verify(None, "nothing").startswith("ok:")
    with pytest.raises(OffbenchError, match=r"group 1/rewards, history 1, step 500: reward inf is not finite"):
        histories.verify(None, "nothing", full=True)
    code, _, err = cli(capsys, "verify", path, "--full")  # the command line's --full
    assert code == 2 and "reward inf is not finite" in err


# ---------------------------------------------------------------------------------------------- MTDiff folders


def write_npz(path, steps=20, obs_dim=39, **arrays):
    rng = np.random.default_rng(len(str(path)))
    flags = np.zeros(steps, bool)
    flags[-1] = True
    data = {
        "observations": rng.normal(size=(steps, obs_dim)),
        "actions": rng.uniform(-1, 1, (steps, 4)),
        "rewards": rng.uniform(0, 10, steps),
        "terminals": flags,
        **arrays,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez(path, **data)


@pytest.mark.parametrize(
    ("layout", "message"),
    [
        (
            {"reach-v2/0.npz": {}, "reach-v2/1.npz": {"obs_dim": 40}},
            "reach-v2/1.npz: observations rows have shape (40,), but {root}/reach-v2/0.npz has (39,) (every episode of every task must agree)",
        ),
        (
            {"push-v2/0.npz": {}, "reach-v2/0.npz": {"actions": np.zeros((20, 3))}},
            "reach-v2/0.npz: actions rows have shape (3,), but {root}/push-v2/0.npz has (4,)",
        ),
        (
            {"reach-v2/0.npz": {"next_observations": np.zeros((20, 38))}},
            "reach-v2/0.npz: next_observations has shape (20, 38), observations (20, 39)",
        ),
        (
            {"reach-v2/0.npz": {"success": np.zeros(20)}, "reach-v2/1.npz": {"success": np.zeros((20, 2))}},
            "reach-v2/1.npz: success rows have shape (2,), but {root}/reach-v2/0.npz has ()",
        ),
        (
            {"reach-v2/0.npz": {"terminals": np.zeros((20, 2), bool)}},
            "reach-v2/0.npz: terminals has shape (20, 2), expected (20,): one value per step",
        ),
        (
            {"reach-v2/0.npz": {"rewards": np.zeros((20, 3))}},
            "reach-v2/0.npz: rewards has shape (20, 3), expected (20,): one value per step",
        ),
        ({"reach-v2/0.npz": {"rewards": np.array(["1.5"] * 20)}}, "reach-v2/0.npz: rewards holds text, not real numbers"),
        ({"reach-v2/0.npz": {"observations": np.array([b"x"] * 20)}}, "reach-v2/0.npz: observations holds bytes, not real numbers"),
        (
            {"reach-v2/0.npz": {"actions": np.ones((20, 4)) + 1j}},
            "reach-v2/0.npz: actions holds complex numbers (the imaginary part would be lost), not real numbers",
        ),
    ],
)
def test_mtdiff_arrays_that_do_not_fit_together_are_one_line_errors(tmp_path, capsys, layout, message):
    root = tmp_path / "MT"
    for name, arrays in layout.items():
        write_npz(root / name, **arrays)
    out = tmp_path / "out"
    code, printed, err = cli(capsys, "import", "mtdiff", root, "--out", out)
    assert code == 2 and not printed and err.count("\n") == 1, err
    assert f"{root}/{message.format(root=root)}" in err.replace("\n", ""), err
    assert not out.exists()
