"""MTDiff's Meta-World layout (HarmoDT's training data) imported into the native format.

Folders and archives are synthetic, written by the tests in the published layout; the URL test serves
an archive from 127.0.0.1."""

from __future__ import annotations

import functools
import tarfile
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest
import tomli_w

import offbench
from offbench.data.cards import read_card
from offbench.data.formats import detect_format
from offbench.data.mtdiff import import_mtdiff
from offbench.data.store import load_native

STEPS = 500  # Meta-World's max_path_length


def write_episode(path, rng, steps=STEPS, flag_key="terminals", flags_at=(), next_observations=False):
    observations = rng.normal(size=(steps, 39))  # float64, as Meta-World returns them
    flags = np.zeros(steps, bool)
    flags[-1] = True  # the collectors mark the time limit as terminal
    flags[list(flags_at)] = True
    arrays = {
        "observations": observations,
        "actions": rng.uniform(-1, 1, (steps, 4)),
        "rewards": rng.uniform(0, 10, steps),
        flag_key: flags,
        "success": rng.random(steps) < 0.1,
    }
    if next_observations:
        arrays["next_observations"] = np.concatenate([observations[1:], rng.normal(size=(1, 39))])
    np.savez(path, **arrays)
    return arrays


def write_layout(root, tasks=("reach-v2", "push-v2"), episodes=3, seed=0, **kwargs):
    rng = np.random.default_rng(seed)
    written = {}
    for task in tasks:
        (root / task).mkdir(parents=True)
        written[task] = [write_episode(root / task / f"{i}.npz", rng, **kwargs) for i in range(episodes)]
    return written


def cli(capsys, *args):
    from offbench import cli as offbench_cli

    with pytest.raises(SystemExit) as exit_info:
        offbench_cli.main([str(a) for a in args])
    out, err = capsys.readouterr()
    return exit_info.value.code, out, err


def test_import_keeps_every_step_but_the_unknown_last_s_prime_and_nothing_terminates(tmp_path, capsys):
    source = tmp_path / "MT50"
    written = write_layout(source)
    assert detect_format(source) == "mtdiff"
    code, out, err = cli(capsys, "import", "mtdiff", source, "--out", tmp_path / "out", "--quality", "near-optimal")
    assert code == 0, err
    store = load_native(tmp_path / "out" / "data.h5")
    card = read_card(tmp_path / "out" / "card.toml")
    assert card.kind == "multi-task" and card.env["suite"] == "metaworld" and card.env["id"] == "MT1"
    assert card.env["kwargs"]["tasks"] == ["push-v3", "reach-v3"] and card.env["kwargs"]["max_episode_steps"] == STEPS
    assert card.source["import"] == {"format": "mtdiff", "from": str(source.resolve())}
    assert store.num_episodes == 6 and (store.episode_lengths == STEPS - 1).all()
    assert not store.terminations.any()  # Meta-World truncates at 500 steps, never terminates
    assert np.array_equal(np.flatnonzero(store.truncations), store.episode_starts[1:] - 1)
    for episode, (task_id, task) in zip(range(6), [(0, "push-v2")] * 3 + [(1, "reach-v2")] * 3):
        source_episode = written[task][episode % 3]
        got = store.episode(episode)
        assert np.allclose(got["observations"], source_episode["observations"])  # T - 1 steps + the last observation as final
        assert np.allclose(got["rewards"], source_episode["rewards"][:-1])
        assert (got["task_id"] == task_id).all() and (got["source_episode"] == episode % 3).all()
        assert np.array_equal(got["infos/success"], source_episode["success"][:-1])
    assert (
        read_card(tmp_path / "out" / "card.toml").extra["mtdiff"]["per_task"]["push-v2"]["rows_dropped_for_missing_next_observation"] == 3
    )


def test_next_observations_keep_all_500_steps_and_dones_is_read_like_terminals(tmp_path):
    source = tmp_path / "data"
    written = write_layout(source, tasks=("reach-v2",), episodes=2, flag_key="dones", next_observations=True)
    store = import_mtdiff(source)
    assert (store.episode_lengths == STEPS).all() and not store.terminations.any() and store.truncations.sum() == 2
    assert np.allclose(store.final_observations[1], written["reach-v2"][1]["next_observations"][-1])


def test_a_flag_inside_a_file_ends_an_episode_there(tmp_path):
    source = tmp_path / "data"
    write_layout(source, tasks=("reach-v2",), episodes=1, flags_at=(199,), next_observations=True)
    store = import_mtdiff(source)
    assert store.episode_lengths.tolist() == [200, 300] and not store.terminations.any()
    assert store.card["mtdiff"]["per_task"]["reach-v2"]["episodes_shorter_than_time_limit"] == 2


def test_episodes_option_takes_the_first_files_and_a_gap_is_one_line(tmp_path, capsys):
    source = tmp_path / "data"
    write_layout(source, tasks=("reach-v2",), episodes=3)
    assert import_mtdiff(source, episodes=2).num_episodes == 2
    (source / "reach-v2" / "1.npz").unlink()
    code, _, err = cli(capsys, "import", "mtdiff", source, "--out", tmp_path / "out")
    assert code == 2 and err.count("\n") == 1 and "1.npz is missing" in err
    assert not (tmp_path / "out" / "data.h5").exists()
    np.savez(source / "reach-v2" / "1.npz", observations=np.zeros((5, 39)), actions=np.zeros((5, 4)))
    code, _, err = cli(capsys, "import", "mtdiff", source, "--out", tmp_path / "out")
    assert code == 2 and "1.npz: missing rewards, terminals (or dones)" in err


def test_registered_import_opens_by_id_and_says_how_to_import_again(tmp_path, capsys, isolated_home):
    source = tmp_path / "MT50"
    write_layout(source, tasks=("reach-v2",), episodes=1)
    code, out, _ = cli(capsys, "import", "mtdiff", source)
    assert code == 0 and out.startswith("imported/mtdiff-MT50:")
    code, out, _ = cli(capsys, "info", "imported/mtdiff-MT50")
    assert code == 0 and "499" in out and "MT1 (metaworld)" in out
    (isolated_home / "data" / "imported" / "mtdiff-MT50" / "data.h5").unlink()
    code, _, err = cli(capsys, "info", "imported/mtdiff-MT50")
    assert code == 2 and f"offbench import mtdiff {source.resolve()} --id imported/mtdiff-MT50" in err.replace("\n", "")
    assert cli(capsys, "import", "mtdiff", source)[0] == 0  # the card stays; the data comes back
    assert cli(capsys, "info", "imported/mtdiff-MT50")[0] == 0


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


def test_archive_url_gives_the_same_data_as_the_folder_by_import_and_by_download(tmp_path, monkeypatch, isolated_home, capsys):
    source = tmp_path / "src" / "MT50"
    write_layout(source, episodes=2)
    served = tmp_path / "served"
    served.mkdir()
    with tarfile.open(served / "mt50.tar.gz", "w:gz") as tf:
        tf.add(source, arcname="MT50")
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_QuietHandler, directory=str(served)))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    url = f"http://127.0.0.1:{httpd.server_address[1]}/mt50.tar.gz"
    card = {
        "id": "test/mt50",
        "description": "served by the test",
        "format": "mtdiff",
        "kind": "multi-task",
        "source": {"files": [{"url": url}]},
    }
    (isolated_home / "datasets").mkdir(parents=True)
    (isolated_home / "datasets" / "mt50.toml").write_text(tomli_w.dumps(card))
    try:
        assert cli(capsys, "import", "mtdiff", url, "--out", tmp_path / "from-url")[0] == 0
        from_url = load_native(tmp_path / "from-url" / "data.h5")
        downloaded = offbench.load("test/mt50")  # a card whose source is the archive: fetched, then converted
    finally:
        httpd.shutdown()
        httpd.server_close()
    from_folder = import_mtdiff(source)
    assert from_url.content_sha256() == from_folder.content_sha256() == downloaded.content_sha256()
