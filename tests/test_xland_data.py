"""XLand-100B / Trivial-20B files read in place: layout, chunk reader, samplers, info/verify, download.

Every file here is a small synthetic one in the published layout, written by the test; the download
test serves it from 127.0.0.1."""

from __future__ import annotations

import functools
import hashlib
import multiprocessing
import pickle
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

import h5py
import numpy as np
import pytest
import tomli_w

import offbench
from offbench.data.formats import FORMATS, detect_format
from offbench.data.samplers import make_sampler
from offbench.data.xland import ChunkReader, XLandHistories, decode_states, encode_states, write_xland_file
from offbench.errors import OffbenchError

TASKS, HISTORIES, STEPS, CHUNK = 3, 4, 2_500, 512  # the last chunk of each history is partial (2,500 = 4 x 512 + 452)


@pytest.fixture(scope="module")
def xland_file(tmp_path_factory):
    return write_xland_file(
        tmp_path_factory.mktemp("xland") / "xland.hdf5", TASKS, HISTORIES, STEPS, seed=3, chunk_steps=CHUNK, palette=None
    )


@pytest.fixture(scope="module")
def arrays(xland_file):
    with h5py.File(xland_file, "r") as f:
        return {
            name: np.stack([f[str(t)][name][()] for t in range(TASKS)])
            for name in ("states", "actions", "rewards", "dones", "expert_actions")
        }


def test_published_layout_is_detected_and_described(xland_file):
    assert detect_format(xland_file) == "xland" and FORMATS["xland"].read_in_place
    with h5py.File(xland_file, "r") as f:  # what collection/combine.py writes
        ds = f["0/states"]
        assert ds.dtype == np.uint8 and ds.shape == (HISTORIES, STEPS, 5, 5) and ds.chunks == (1, CHUNK, 5, 5)
        assert ds.compression == "gzip" and ds.compression_opts == 6 and f["0/rewards"].dtype == np.float16
        assert set(f["0"].attrs) == {"env-id", "benchmark-id", "ruleset-id"}
    histories = offbench.load(xland_file)
    assert isinstance(histories, XLandHistories)
    assert (histories.num_tasks, histories.histories, histories.steps) == (TASKS, HISTORIES, STEPS)
    assert histories.num_transitions == TASKS * HISTORIES * STEPS
    assert histories.ruleset_ids.tolist() == [0, 1, 2]
    histories.validate()


def test_states_decode_to_tile_and_colour():
    packed = np.array([[0, 11, 12, 155]], np.uint8)
    decoded = decode_states(packed)
    assert decoded.tolist() == [[[0, 0], [0, 11], [1, 0], [12, 11]]]
    assert np.array_equal(encode_states(decoded), packed)


def test_chunk_reader_matches_h5py_across_chunk_edges_and_the_partial_last_chunk(xland_file, arrays):
    reader = ChunkReader(xland_file, cache_bytes=3 * CHUNK * 25)  # room for three state chunks: evictions happen
    rng = np.random.default_rng(0)
    tasks, histories = rng.integers(0, TASKS, 40), rng.integers(0, HISTORIES, 40)
    steps = np.sort(rng.integers(0, STEPS, (40, 300)), axis=1)
    steps[0] = np.arange(STEPS - 300, STEPS)  # ends in the partial chunk
    steps[1] = np.arange(CHUNK - 150, CHUNK + 150)  # crosses a chunk edge
    for name in ("states", "actions", "rewards", "dones", "expert_actions"):
        got = reader.take(name, tasks, histories, steps)
        assert np.array_equal(got, arrays[name][tasks[:, None], histories[:, None], steps]), name
    assert reader.misses > 0 and reader.hits > 0 and reader._cached_bytes <= reader.cache_bytes + CHUNK * 25 * 4


def _locate_window(arrays, task, actions, rewards):
    """(history, first step) where the window's actions and rewards occur in `task` (unique for random data)."""
    length = len(actions)
    for h in range(HISTORIES):
        views = np.lib.stride_tricks.sliding_window_view(arrays["actions"][task, h], length)
        for start in np.flatnonzero((views == actions).all(axis=1)):
            if np.array_equal(arrays["rewards"][task, h, start : start + length].astype(np.float32), rewards):
                return h, int(start)
    raise AssertionError("window not found in its task")


def test_ad_windows_are_consecutive_steps_of_one_history(xland_file, arrays):
    sampler = make_sampler("ad_windows", offbench.load(xland_file), batch_size=6, seed=1, window_length=700)
    batch = sampler.sample()
    assert set(batch) == {"observations", "actions", "rewards", "task_ids"}  # the native ad_windows keys
    assert batch["observations"].shape == (6, 700, 5, 5, 2) and str(batch["observations"].dtype) == "torch.float32"
    assert str(batch["actions"].dtype) == "torch.int64"
    for b in range(6):
        task = int(batch["task_ids"][b])
        h, start = _locate_window(arrays, task, batch["actions"][b].numpy(), batch["rewards"][b].numpy())
        expected = decode_states(arrays["states"][task, h, start : start + 700]).astype(np.float32)
        assert np.array_equal(batch["observations"][b].numpy(), expected)


def test_dpt_sets_pair_states_with_next_states_and_expert_labels(xland_file, arrays):
    store = offbench.load(xland_file)
    for context in ("window", "random"):
        sampler = make_sampler("dpt", store, batch_size=5, seed=2, context_size=64, context=context)
        batch = sampler.sample()
        assert set(batch) == {
            "query_observations",
            "context_observations",
            "context_actions",
            "context_rewards",
            "context_next_observations",
            "optimal_actions",
            "task_ids",
        }
        packed_all = arrays["states"]
        for b in range(5):
            task = int(batch["task_ids"][b])
            query = encode_states(batch["query_observations"][b].numpy().astype(np.uint8))
            h, t = np.argwhere((packed_all[task] == query).all(axis=(2, 3)))[0]  # random views: one match
            assert int(batch["optimal_actions"][b]) == arrays["expert_actions"][task, h, t]
            for k in (0, 63):  # each context state's s' is the following step of the same history
                state = encode_states(batch["context_observations"][b, k].numpy().astype(np.uint8))
                h, t = np.argwhere((packed_all[task] == state).all(axis=(2, 3)))[0]
                assert t + 1 < STEPS and int(batch["context_actions"][b, k]) == arrays["actions"][task, h, t]
                assert np.array_equal(batch["context_next_observations"][b, k].numpy(), decode_states(packed_all[task, h, t + 1]))


def test_uint8_observations_are_the_same_codes(xland_file):
    store = offbench.load(xland_file)
    as_float = make_sampler("ad_windows", store, batch_size=3, seed=4, window_length=90).sample()
    as_bytes = make_sampler("ad_windows", store, batch_size=3, seed=4, window_length=90, observation_dtype="uint8").sample()
    assert str(as_bytes["observations"].dtype) == "torch.uint8"
    assert np.array_equal(as_bytes["observations"].numpy().astype(np.float32), as_float["observations"].numpy())
    with pytest.raises(OffbenchError, match="observation_dtype must be 'float32' or 'uint8'"):
        make_sampler("dpt", store, batch_size=2, seed=0, context_size=4, observation_dtype="int64")


def test_same_seed_same_batches_and_resume(xland_file):
    store = offbench.load(xland_file)
    first = make_sampler("ad_windows", store, batch_size=4, seed=7, window_length=100)
    second = make_sampler("ad_windows", store, batch_size=4, seed=7, window_length=100, cache_mb=1)
    first.sample()
    state = first.state_dict()
    expected = first.sample()
    second.load_state_dict(state)
    got = second.sample()
    assert all(np.array_equal(expected[k].numpy(), got[k].numpy()) for k in expected)


def cli(capsys, *args) -> tuple[int, str, str]:
    """`offbench ARGS` in-process (a subprocess costs seconds of imports): exit code, stdout, stderr."""
    from offbench import cli as offbench_cli

    with pytest.raises(SystemExit) as exit_info:
        offbench_cli.main([str(a) for a in args])
    out, err = capsys.readouterr()
    return exit_info.value.code, out, err


def _sample_in_child(sampler, queue):
    queue.put((sampler.sample()["actions"].numpy(), sampler.reader._pid))


def test_reader_opens_the_file_again_in_a_forked_worker_and_after_pickling(xland_file):
    sampler = make_sampler("ad_windows", offbench.load(xland_file), batch_size=3, seed=5, window_length=50)
    state = sampler.state_dict()
    parent = sampler.sample()["actions"].numpy()  # the parent's handle is open now
    sampler.load_state_dict(state)
    queue = multiprocessing.get_context("fork").Queue()
    child = multiprocessing.get_context("fork").Process(target=_sample_in_child, args=(sampler, queue))
    child.start()
    actions, pid = queue.get(timeout=60)
    child.join(60)
    assert np.array_equal(actions, parent) and pid == child.pid
    copy = pickle.loads(pickle.dumps(sampler))
    assert copy.reader._file is None and np.array_equal(copy.sample()["actions"].numpy(), parent)


def test_kinds_that_cannot_read_in_place_are_one_line_errors(xland_file):
    store = offbench.load(xland_file)
    with pytest.raises(OffbenchError, match="sampler 'transitions' cannot read it in place.*ad_windows, dpt"):
        make_sampler("transitions", store, batch_size=2, seed=0)
    with pytest.raises(OffbenchError, match="window_length must be between 1 and the history length 2500"):
        make_sampler("ad_windows", store, batch_size=2, seed=0, window_length=STEPS + 1)
    with pytest.raises(OffbenchError, match="only the expert's labels .*got 'posterior'"):
        make_sampler("dpt", store, batch_size=2, seed=0, context_size=4, label="posterior")
    assert make_sampler("dpt", store, batch_size=2, seed=0, context_size=4, label="optimal").sample()["optimal_actions"].shape == (2,)


def test_info_and_verify_on_a_path(xland_file, capsys):
    code, out, _ = cli(capsys, "info", xland_file)
    assert code == 0 and "xland" in out and "30,000" in out and "read in place" in out
    code, out, _ = cli(capsys, "verify", xland_file)
    assert code == 0 and out.startswith("ok:") and hashlib.sha256(xland_file.read_bytes()).hexdigest() in out.replace("\n", "")


def test_verify_names_a_group_that_departs_from_the_layout(tmp_path, capsys):
    path = write_xland_file(tmp_path / "bad.hdf5", 2, 2, 300, chunk_steps=128)
    with h5py.File(path, "a") as f:
        del f["1/expert_actions"]
        f["1"].create_dataset("expert_actions", data=np.zeros((2, 299), np.uint8))
    code, _, err = cli(capsys, "verify", path)
    assert code == 2 and err.count("\n") == 1
    assert "group 1/expert_actions: shape (2, 299), expected (2, 300)" in err


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


def test_download_keeps_the_file_as_is_records_its_sha256_and_opens_it_in_place(tmp_path, isolated_home, capsys, monkeypatch):
    served = tmp_path / "served"
    served.mkdir()
    write_xland_file(served / "trivial-10k", 2, 2, 300, chunk_steps=128)
    handler = functools.partial(_QuietHandler, directory=str(served))
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        monkeypatch.setenv("NO_PROXY", "127.0.0.1")
        card = {
            "id": "test/xland",
            "description": "served by the test",
            "format": "xland",
            "kind": "learning-history",
            "source": {"files": [{"url": f"http://127.0.0.1:{httpd.server_address[1]}/trivial-10k"}]},
            "env": {"suite": "xland", "id": "XLand-MiniGrid-R1-9x9", "kwargs": {"benchmark": "trivial-1m"}},
        }
        (isolated_home / "datasets").mkdir(parents=True)
        (isolated_home / "datasets" / "xland.toml").write_text(tomli_w.dumps(card))
        code, out, _ = cli(capsys, "download", "test/xland")
        raw = isolated_home / "data" / "test" / "xland" / "raw"
        assert code == 0 and out.strip() == str(raw / "trivial-10k")
        assert (raw / "trivial-10k").read_bytes() == (served / "trivial-10k").read_bytes()  # not converted
        assert not (raw.parent / "data.h5").exists()
        digest = hashlib.sha256((served / "trivial-10k").read_bytes()).hexdigest()
        assert (raw / "SHA256SUMS").read_text() == f"{digest}  trivial-10k\n"
        httpd.shutdown()  # from here on, nothing may need the network
        _, listing, _ = cli(capsys, "list", "--kind", "learning-history")
        assert any(line.startswith("test/xland") and " yes " in line for line in listing.splitlines())
        code, out, _ = cli(capsys, "info", "test/xland")
        assert code == 0 and "test/xland" in out and "1,200" in out
        code, out, _ = cli(capsys, "verify", "test/xland")
        assert code == 0 and f"matches recorded in {raw / 'SHA256SUMS'}" in out.replace("\n", "")
        rotten = bytearray((served / "trivial-10k").read_bytes())
        rotten[len(rotten) // 2] ^= 0xFF  # bit rot
        (raw / "trivial-10k").write_bytes(bytes(rotten))
        code, _, err = cli(capsys, "verify", "test/xland")
        assert code == 2 and "differs from" in err
    finally:
        httpd.shutdown()
        httpd.server_close()
