"""Dataset cards are read through typed records (offbench/data/cards.py): every rule a card can break is refused in
one line naming the file and the dotted field, unknown top-level keys survive a write, the tables still read as
plain tables for the code that passes them on, and datasets/README.md's field tables are the records' own."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import tomli_w

from offbench.data.cards import CARD_RECORDS, read_card, write_card, write_field_docs
from offbench.errors import OffbenchError
from offbench.paths import builtin_dir
from offbench.records import fill_field_tables

README = builtin_dir("datasets") / "README.md"
SHA = "ab" * 32
URL = "https://example.invalid/x.hdf5"


def card(**changes):
    """A valid files card with `changes` applied (a value of None removes the key)."""
    data = {
        "id": "mine/files",
        "description": "x",
        "format": "d4rl",
        "source": {"files": [{"url": URL, "sha256": SHA, "size": 10}]},
        "env": {"id": "Hopper-v4", "suite": "gymnasium", "kwargs": {}},
        "scores": {"ref_min": 0.0, "ref_max": 1.0},
    }
    data.update(changes)
    return {key: value for key, value in data.items() if value is not None}


def files(**changes):
    return {"files": [{"url": URL, **changes}]}


def written(tmp_path: Path, data: dict) -> Path:
    path = tmp_path / "mine.toml"
    path.write_text(tomli_w.dumps(data))
    return path


@pytest.mark.parametrize(
    "data, problem",
    [
        (card(id=None), "missing required key 'id'"),
        (card(source=None), "missing required key 'source'"),
        (card(id=5), "'id' must be a string, got 5"),
        (card(id="../../evil"), "'id' part '..' is not a safe file name"),
        (card(description=["x"]), "'description' must be a string"),
        (card(source="http://x"), "'source' must be a table, got 'http://x'"),
        (card(source={}), "'source' needs exactly one of files, minari_id, recipe, import, found none"),
        (
            card(source={**files(), "minari_id": "a/b-v0"}),
            "'source' needs exactly one of files, minari_id, recipe, import, found files, minari_id",
        ),
        (card(source={"url": URL}), "'source.url' is not a known key (known: files, import, minari_id, recipe, revision)"),
        (card(source={"files": []}), "'source.files' must list at least one file"),
        (card(source={"files": {"url": URL}}), "'source.files' must be a list of tables"),
        (card(source={"files": [{"sha256": SHA}]}), "missing required key 'source.files[0].url'"),
        (card(source=files(url="ftp://example.invalid/x")), "'source.files[0].url' must be an http(s) URL, got 'ftp://example.invalid/x'"),
        (card(source=files(sha256="abc")), "'source.files[0].sha256' must be 64 hex characters, got 'abc'"),
        (card(source=files(size=0)), "'source.files[0].size' must be at least 1, got 0"),
        (card(source=files(size=1.5)), "'source.files[0].size' must be an integer, got 1.5"),
        (card(source=files(mirror="x")), "'source.files[0].mirror' is not a known key"),
        (card(source={"recipe": {"seed": 1}}), "missing required key 'source.recipe.generator'"),
        (card(source={"recipe": {"generator": "g", "seed": -1}}), "'source.recipe.seed' must be at least 0, got -1"),
        (card(source={"recipe": {"generator": "g", "params": "x"}}), "'source.recipe.params' must be a table, got 'x'"),
        (card(source={"import": {"format": "mtdiff"}}), "missing required key 'source.import.from'"),
        (card(source={"import": {"format": 1, "from": "/x"}}), "'source.import.format' must be a string, got 1"),
        (card(source={**files(), "revision": "v1"}), "'source.revision' applies to a minari_id source only"),
        (card(env=["Hopper-v4"]), "'env' must be a table"),
        (card(env={"id": 4}), "'env.id' must be a string, got 4"),
        (card(env={"id": "Hopper-v4", "kwargs": "fast"}), "'env.kwargs' must be a table, got 'fast'"),
        (card(env={"id": "Hopper-v4", "seed": 0}), "'env.seed' is not a known key"),
        (card(scores={"ref_min": True, "ref_max": 1.0}), "'scores.ref_min' must be a finite number, got True"),
        (card(scores={"ref_min": 1, "ref_max": 1.0}), "'scores.ref_max' must differ from ref_min, both are 1.0"),
        (card(scores={"ref_min": 0.0}), "'scores.ref_max' is missing: the normalised score needs both ref_min and ref_max"),
        (card(scores={"ref_max": 0.0}), "'scores.ref_min' is missing"),
        (card(formerly="mine/old"), "'formerly' must be a list of strings, got 'mine/old'"),
        (card(formerly=["mine/../evil"]), "'formerly' part '..' is not a safe file name"),
        (card(formerly=["mine/files"]), "'formerly' names the card's own id 'mine/files'"),
        (card(analogue="mine/files"), "'analogue' names the card's own id 'mine/files'"),
        (card(analogue=["d4rl/hopper-medium-v2"]), "'analogue' must be a string"),
    ],
)
def test_every_broken_rule_is_one_line_naming_the_file_and_the_field(tmp_path, data, problem):
    path = written(tmp_path, data)
    with pytest.raises(OffbenchError) as caught:
        read_card(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: {problem}") and "\n" not in message


def test_a_card_writes_back_what_it_read_unknown_keys_included(tmp_path):
    data = card(source={"import": {"format": "mtdiff", "from": "/data/mt"}}, split={"seed": 0}, note="kept", kind="multi-task")
    first = read_card(written(tmp_path, data))
    assert first.source.import_.from_ == "/data/mt" and first.source_kind == "import"
    assert first.extra == {"note": "kept"} and first.split == {"seed": 0}
    again = read_card(write_card(first, tmp_path / "again.toml"))
    assert again.to_dict() == first.to_dict() == data
    assert "[source.import]" in (tmp_path / "again.toml").read_text() and again.card_path == tmp_path / "again.toml"


def test_card_tables_read_as_the_plain_tables_of_the_file(tmp_path):
    read = read_card(written(tmp_path, card()))
    assert read.env["id"] == read.env.id == "Hopper-v4" and dict(read.env) == {"id": "Hopper-v4", "suite": "gymnasium", "kwargs": {}}
    assert read.source["files"] == [{"url": URL, "sha256": SHA, "size": 10}] and read.source.files[0].size == 10
    assert read.scores == {"ref_min": 0.0, "ref_max": 1.0} and read.normalise(0.5) == 50.0
    bare = read_card(written(tmp_path, card(env=None, scores=None)))
    assert not bare.env and bare.env.get("suite", "gymnasium") == "gymnasium" and bare.normalise(1.0) is None
    assert "env" not in bare.to_dict() and "scores" not in bare.to_dict()  # a card without them is written without them
    assert bare.formerly == [] and "formerly" not in bare.to_dict()
    renamed = read_card(written(tmp_path, card(formerly=["mine/old"])))
    assert renamed.formerly == ["mine/old"] and renamed.to_dict()["formerly"] == ["mine/old"]


def test_the_readme_field_tables_are_the_card_records():
    text = README.read_text()
    regenerate = 'run `.venv/bin/python -c "from offbench.data.cards import write_field_docs; write_field_docs()"`'
    assert fill_field_tables(text, *CARD_RECORDS) == text, (
        f"datasets/README.md's field tables differ from offbench/data/cards.py: {regenerate}"
    )


def test_write_field_docs_brings_a_stale_page_back(tmp_path):
    page = shutil.copy(README, tmp_path / "README.md")
    text = page.read_text()
    page.write_text(text.replace("| `sha256` |", "| `sha1` |"))
    write_field_docs(page)
    assert page.read_text() == text
