"""`offbench export` and `offbench info` on foreign formats, and their one-line errors on bad input."""

import hashlib
import json
import re

import h5py
import numpy as np
import pytest
from helpers import make_store

from offbench.data.d4rl_format import export_d4rl
from offbench.data.minari_format import export_minari


def snapshot(folder):
    """Every file under `folder` with its bytes' hash, to prove that nothing on disk changed."""
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.rglob("*")) if p.is_file()}


def assert_one_line_error(proc, *fragments):
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("offbench: error:"), proc.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def test_export_each_format_and_info_names_it(tmp_path, run_cli):
    store = make_store()
    store.card = {"id": "test/cli-v0"}
    native = store.save(tmp_path / "src" / "data.h5")
    run_cli("export", native, "--format", "minari", "--out", tmp_path / "minari", check=True)
    minari_dir = tmp_path / "minari" / "test" / "cli-v0"
    out = run_cli("export", minari_dir, "--format", "d4rl", "--out", tmp_path / "d4rl", check=True)
    d4rl_file = tmp_path / "d4rl" / "test-cli-v0.hdf5"
    assert str(d4rl_file) in out.stdout
    run_cli("export", d4rl_file, "--format", "offbench", "--out", tmp_path / "native", check=True)
    for path, name in ((minari_dir, "minari"), (d4rl_file, "d4rl"), (tmp_path / "native" / "data.h5", "offbench")):
        info = run_cli("info", path, check=True)
        assert re.search(rf"format found\s+{name}\b", info.stdout), info.stdout
        assert store.content_sha256()[:32] in info.stdout  # the same arrays after three conversions


def test_minari_folder_with_missing_metadata_key(tmp_path, run_cli):
    dataset = export_minari(make_store(), tmp_path / "root")
    meta_path = dataset / "data" / "metadata.json"
    meta = json.loads(meta_path.read_text())
    del meta["total_steps"]
    meta_path.write_text(json.dumps(meta))
    before = snapshot(tmp_path)
    proc = run_cli("export", dataset, "--format", "d4rl", "--out", tmp_path / "out")
    assert_one_line_error(proc, str(meta_path), "missing metadata key(s) total_steps")
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("damage, command", [("truncated", "info"), ("foreign", "info"), ("no-actions", "export")])
def test_bad_hdf5_files(damage, command, tmp_path, run_cli):
    path = tmp_path / "data.hdf5"
    if damage == "truncated":
        data = export_d4rl(make_store(), tmp_path / "full.hdf5").read_bytes()
        (tmp_path / "full.hdf5").unlink()
        path.write_bytes(data[: len(data) // 2])
        expected = "truncated or corrupt"
    elif damage == "foreign":
        with h5py.File(path, "w") as f:
            f["weights"] = np.zeros(3)
        expected = "not a dataset in any known format"
    else:
        with h5py.File(path, "w") as f:
            for key in ("observations", "rewards", "terminals", "timeouts"):
                f[key] = np.zeros(4)
        expected = "missing actions"
    before = snapshot(tmp_path)
    args = ("info", path) if command == "info" else ("export", path, "--format", "minari", "--out", tmp_path / "out")
    assert_one_line_error(run_cli(*args), str(path), expected)
    assert snapshot(tmp_path) == before


def test_export_refuses_to_replace_and_unknown_format(tmp_path, run_cli):
    native = make_store().save(tmp_path / "src.h5")
    export_d4rl(make_store(), tmp_path / "out")
    before = snapshot(tmp_path)
    assert_one_line_error(run_cli("export", native, "--format", "d4rl", "--out", tmp_path / "out"), "already exists")
    assert_one_line_error(run_cli("export", native, "--format", "rlds", "--out", tmp_path / "out"), "unknown format 'rlds'")
    assert snapshot(tmp_path) == before


def test_generated_multitask_data_exports_under_its_own_id(tmp_path, run_cli):
    """A dataset made by `offbench generate` carries its id, so each export is named from it (not dataset-v0 or
    dataset.hdf5), and each loads back with the same arrays and card id."""
    from helpers import require_extra

    from offbench.data.cards import read_card
    from offbench.data.formats import load_path
    from offbench.data.store import load_native

    require_extra("minigrid", "minigrid")
    run_cli("generate", "minigrid", "--suite", "MT3", "--episodes", "2", "--seed", "1", "--workers", "1", "--out", tmp_path / "gen",
            "--quiet", check=True)  # fmt: skip
    dataset_id = "generated/minigrid-mt3-near-optimal-e2-s1"
    assert read_card(tmp_path / "gen" / "card.toml").id == dataset_id
    native = load_native(tmp_path / "gen" / "data.h5")
    assert native.card["id"] == dataset_id
    for fmt, written in (
        ("minari", tmp_path / "minari" / f"{dataset_id}-v0"),
        ("d4rl", tmp_path / "d4rl" / "generated-minigrid-mt3-near-optimal-e2-s1.hdf5"),
    ):
        out = run_cli("export", tmp_path / "gen" / "data.h5", "--format", fmt, "--out", tmp_path / fmt, check=True)
        assert str(written) in out.stdout
        back = load_path(written)
        assert back.content_sha256() == native.content_sha256() and back.card["id"] == dataset_id


def test_data_without_an_embedded_id_exports_under_the_id_it_was_opened_by(tmp_path, run_cli):
    """Multi-task data generated before ids were embedded: its card in the file has none, so an export is named
    from the registered id it was opened by (a path: its file name), not offbench/dataset-v0."""
    from offbench.data.cards import card_from_dict, write_card
    from offbench.data.formats import load_path
    from offbench.data.resolve import native_path
    from offbench.paths import user_cards_dir

    card = card_from_dict(
        {
            "id": "test/old-mt3",
            "description": "generated before ids were embedded",
            "format": "offbench",
            "source": {"recipe": {"generator": "test", "seed": 0}},
        }
    )
    write_card(card, user_cards_dir() / "test-old-mt3.toml")
    store = make_store()
    store.card = {"kind": "offline"}
    store.save(native_path(card))
    store.save(tmp_path / "mt3-old.h5")
    out = run_cli("export", "test/old-mt3", "--format", "minari", "--out", tmp_path / "minari", check=True)
    assert str(tmp_path / "minari" / "test" / "old-mt3-v0") in out.stdout
    assert load_path(tmp_path / "minari" / "test" / "old-mt3-v0").card["id"] == "test/old-mt3"
    out = run_cli("export", "test/old-mt3", "--format", "d4rl", "--out", tmp_path / "d4rl", check=True)
    assert str(tmp_path / "d4rl" / "test-old-mt3.hdf5") in out.stdout
    out = run_cli("export", tmp_path / "mt3-old.h5", "--format", "d4rl", "--out", tmp_path / "d4rl", check=True)
    assert str(tmp_path / "d4rl" / "mt3-old.hdf5") in out.stdout
