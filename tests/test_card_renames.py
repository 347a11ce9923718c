"""A renamed card lists its old ids in `formerly`: asking for one (get_card, `offbench load` / `info`) gives the
renamed card, `offbench list` shows only the new id, data already on disk under an old id's folder is used as it
is, a former id that two cards claim or that is still a card's id is one error line, and no board names a former
id."""

from __future__ import annotations

from pathlib import Path

import pytest
import tomli_w
from helpers import make_store

import offbench
from offbench.data import cards
from offbench.data.cards import all_cards, get_card, read_card
from offbench.data.resolve import open_dataset
from offbench.errors import OffbenchError
from offbench.leaderboard.entries import load_entries
from offbench.leaderboard.spec import known_benchmarks, load_spec
from offbench.paths import builtin_dir, data_dir, user_cards_dir

RENAMED = {
    **{f"minigrid/{name}-sub-optimal": f"minigrid/{name}-noisy-planner" for name in ("mt3", "mt5", "mt7", "tiny")},
    **{f"metaworld/{name}-sub-optimal": f"metaworld/{name}-noisy-expert" for name in ("mt10", "mt10-small", "mt50", "tiny")},
}


def user_card(name: str, dataset_id: str, formerly: list[str] | None = None) -> Path:
    """A user card whose recipe names no generator: opening it can only read data already on disk."""
    data = {
        "id": dataset_id,
        "description": "a renamed test dataset",
        "format": "offbench",
        "source": {"recipe": {"generator": "no-such-generator"}},
        "env": {"id": "Pendulum-v1"},
        **({"formerly": formerly} if formerly else {}),
    }
    path = user_cards_dir() / f"{name}.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(tomli_w.dumps(data))
    return path


def test_noisy_cards_answer_to_their_sub_optimal_ids():
    """MiniGrid's noisy planner and Meta-World's noisy expert: neither is a worse policy's experience, which the
    published sub-optimal sets are (MTDiff's keep that name: `offbench import mtdiff`, not a built-in card)."""
    listed = all_cards()
    for old, new in RENAMED.items():
        assert get_card(old).id == new and get_card(old).formerly == [old]
        assert new in listed and old not in listed
        assert new.endswith("-" + get_card(new).source["recipe"]["params"]["quality"])  # the generator's quality renamed too
    assert not [card_id for card_id in listed if "sub-optimal" in card_id]


def test_offbench_list_shows_only_the_new_id(run_cli):
    listed = run_cli("list", "--kind", "multi-task", check=True).stdout
    assert "minigrid/mt3-noisy-planner" in listed and "minigrid/mt3-sub-optimal" not in listed
    assert "metaworld/mt10-small-noisy-expert" in listed and "metaworld/mt10-small-sub-optimal" not in listed


def test_no_board_names_a_former_id():
    """A board's datasets, pins, behaviour and reported rows and its entries carry the renamed ids, and each entry's
    file name the new id's slug (the pinned checksums are the data's, which the rename did not change)."""
    for name in known_benchmarks():
        spec = load_spec(name)
        named = {*spec.datasets, *spec.dataset_checksums, *spec.behaviour, *(d for row in spec.reported for d in row.scores)}
        assert not named & RENAMED.keys(), name
        for path, entry in load_entries(spec):
            dataset_id = entry["dataset"]["id"]
            assert dataset_id not in RENAMED and dataset_id in spec.datasets, path
            assert path.name.split("--")[2] == dataset_id.replace("/", "-"), path
    mt10, mt50 = load_spec("metaworld-mt10"), load_spec("metaworld-mt50")
    assert mt10.datasets == ("metaworld/mt10-small-near-optimal", "metaworld/mt10-small-noisy-expert")
    assert mt10.dataset_checksums["metaworld/mt10-small-noisy-expert"].startswith("2666f325")  # as pinned under the old id
    assert mt50.datasets == ("metaworld/mt50-near-optimal", "metaworld/mt50-noisy-expert")


def test_data_under_a_former_ids_folder_is_used_not_made_again(run_cli, monkeypatch):
    user_card("renamed", "mine/new", formerly=["mine/old"])
    store = make_store(seed=1)
    store.save(data_dir("mine/old") / "data.h5")  # made before the rename; the recipe could not make it again
    for asked in ("mine/new", "mine/old"):
        dataset = open_dataset(asked)
        assert dataset.id == "mine/new" and dataset.path == (data_dir("mine/old") / "data.h5").resolve()
        assert dataset.store.content_sha256() == store.content_sha256()
    assert offbench.load("mine/old").content_sha256() == store.content_sha256()
    monkeypatch.setenv("COLUMNS", "300")  # info's table whole, the checksum and path unabridged
    info = {
        line.split(None, 1)[0]: line.split(None, 1)[1].strip()
        for line in run_cli("info", "mine/old", check=True).stdout.splitlines()
        if line.strip()
    }
    assert info["id"] == "mine/new" and info["file"] == str(data_dir("mine/old") / "data.h5")
    assert not data_dir("mine/new").exists()  # nothing was written under the new id


def test_data_under_the_new_id_wins_over_a_former_ids_folder():
    user_card("renamed", "mine/new", formerly=["mine/old"])
    make_store(seed=1).save(data_dir("mine/old") / "data.h5")
    newer = make_store(seed=2)
    newer.save(data_dir("mine/new") / "data.h5")
    assert open_dataset("mine/old").store.content_sha256() == newer.content_sha256()


def test_two_user_cards_claiming_one_former_id_skip_the_second_with_its_error(capsys):
    user_card("a", "mine/a", formerly=["mine/old"])
    user_card("b", "mine/b", formerly=["mine/old"])
    assert get_card("mine/old").id == "mine/a"
    assert "mine/b" not in all_cards()
    warning = capsys.readouterr().err
    assert warning.count("\n") == 1 and "b.toml: 'formerly' names 'mine/old', which" in warning and "a.toml names too" in warning
    with pytest.raises(OffbenchError, match=r"b\.toml: 'formerly' names 'mine/old', which .*a\.toml names too \(an id names one dataset"):
        get_card("mine/b")


def test_a_user_card_taking_a_builtin_cards_former_id_is_refused_by_name():
    user_card("clash", "minigrid/mt3-sub-optimal")  # e.g. written by `offbench generate` before the rename
    with pytest.raises(OffbenchError) as error:
        get_card("minigrid/mt3-sub-optimal")
    message = str(error.value)
    assert "\n" not in message and message.startswith(str(builtin_dir("datasets") / "minigrid" / "mt3-noisy-planner.toml"))
    assert (
        "'formerly' names 'minigrid/mt3-sub-optimal', which is the id of" in message
        and "clash.toml (an id names one dataset: delete or change one of the two cards)" in message
    )
    assert get_card("minigrid/mt3-noisy-planner").id == "minigrid/mt3-noisy-planner"  # the built-in card stands


def test_builtin_cards_in_a_rename_clash_stop_card_loading_in_one_line(tmp_path, monkeypatch):
    def builtin(name: str, dataset_id: str, formerly: list[str]):
        path = tmp_path / f"{name}.toml"
        path.write_text(
            tomli_w.dumps(
                {"id": dataset_id, "description": "x", "format": "offbench", "formerly": formerly, "source": {"recipe": {"generator": "x"}}}
            )
        )
        return read_card(path)

    claimed_twice = {"x/a": builtin("a", "x/a", ["x/old"]), "x/b": builtin("b", "x/b", ["x/old"])}
    monkeypatch.setattr(cards, "builtin_cards", lambda: claimed_twice)
    with pytest.raises(OffbenchError, match=r"^\S+b\.toml: 'formerly' names 'x/old', which \S+a\.toml names too \(an id names one dataset"):
        all_cards()
    still_live = {"x/a": builtin("a", "x/a", ["x/b"]), "x/b": builtin("b", "x/b", [])}
    monkeypatch.setattr(cards, "builtin_cards", lambda: still_live)
    with pytest.raises(
        OffbenchError, match=r"^\S+a\.toml: 'formerly' names 'x/b', which is the id of \S+b\.toml \(an id names one dataset"
    ):
        get_card("x/a")
