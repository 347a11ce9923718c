"""The typed record layer every file kind is read through (offbench/records.py): one line per problem, naming the
file and the field, and writers round-trip through the same classes."""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Literal

import pytest

from offbench.errors import OffbenchError
from offbench.records import (
    Invalid,
    field_table,
    fill_field_tables,
    from_dict,
    ranged,
    read_json,
    read_toml,
    to_dict,
    write_field_tables,
)


@dataclasses.dataclass(frozen=True)
class Recipe:
    generator: str
    seed: int = ranged(0, ge=0)


@dataclasses.dataclass(frozen=True)
class Card:
    id: str = ranged(doc="the dataset id")
    recipe: Recipe | None = None
    kind: Literal["offline", "learning-histories"] = "offline"
    sizes: tuple[int, ...] = ranged((), ge=1)
    scores: dict[str, float] = dataclasses.field(default_factory=dict)
    low: float | None = None
    high: float | None = None

    def check(self) -> None:
        if self.low is not None and self.high is not None and self.low >= self.high:
            raise Invalid(f"'low' must be below 'high', got {self.low} and {self.high}")


def test_a_valid_record_round_trips_through_to_dict():
    data = {"id": "a/b", "recipe": {"generator": "ad", "seed": 3}, "sizes": [1, 2], "scores": {"x": 1}, "low": 0, "high": 1.5}
    card = from_dict(Card, data, "card.toml")
    assert card == Card(id="a/b", recipe=Recipe("ad", 3), sizes=(1, 2), scores={"x": 1.0}, low=0.0, high=1.5)
    assert from_dict(Card, to_dict(card), "again") == card
    assert "low" not in to_dict(Card(id="x"))  # None fields are left out (TOML has no null)


@pytest.mark.parametrize(
    "data, message",
    [
        ({}, "card.toml: missing required key 'id'"),
        ({"id": 1}, "card.toml: 'id' must be a string, got 1"),
        ({"id": "x", "colour": 1}, "card.toml: 'colour' is not a known key (known: "),
        ({"id": "x", "recipe": {"seed": 1}}, "card.toml: missing required key 'recipe.generator'"),
        ({"id": "x", "recipe": {"generator": "g", "seed": -1}}, "card.toml: 'recipe.seed' must be at least 0, got -1"),
        ({"id": "x", "recipe": {"generator": "g", "seed": True}}, "card.toml: 'recipe.seed' must be an integer, got True"),
        ({"id": "x", "recipe": []}, "card.toml: 'recipe' must be a table, got []"),
        ({"id": "x", "kind": "online"}, "card.toml: 'kind' must be one of offline, learning-histories, got 'online'"),
        ({"id": "x", "sizes": [1, 0]}, "card.toml: 'sizes' must be at least 1"),
        ({"id": "x", "sizes": [1, "2"]}, "card.toml: 'sizes[1]' must be an integer"),
        ({"id": "x", "scores": {"a": float("nan")}}, "card.toml: 'scores.a' must be a finite number, got nan"),
        ({"id": "x", "low": 2, "high": 1}, "card.toml: 'low' must be below 'high', got 2.0 and 1.0"),
        ([1], "card.toml must be a table, got [1]"),
    ],
)
def test_every_bad_field_is_one_line_naming_the_file_and_field(data, message):
    with pytest.raises(OffbenchError) as caught:
        from_dict(Card, data, "card.toml")
    assert str(caught.value).startswith(message)
    assert "\n" not in str(caught.value)


def test_extra_keys_are_kept_only_when_the_record_asks():
    @dataclasses.dataclass(frozen=True)
    class Open:
        name: str
        extra: dict = dataclasses.field(default_factory=dict)

    record = from_dict(Open, {"name": "n", "note": "kept"}, "x", extra=True)
    assert record.extra == {"note": "kept"} and to_dict(record) == {"name": "n", "note": "kept"}
    with pytest.raises(OffbenchError, match="'note' is not a known key"):
        from_dict(Open, {"name": "n", "note": "kept"}, "x")


@dataclasses.dataclass(frozen=True)
class Draws:
    """A table of fixed keys beside open ones (like a sweep's [random]), each open key an Imported."""

    open_keys: ClassVar[bool] = True
    samples: int = ranged(ge=1)
    extra: dict[str, Imported] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class Sweep:
    draws: Draws | None = None
    seeds: tuple[int, ...] = ranged((), ge=0, lt=2**32)
    values: list[Any] = dataclasses.field(default_factory=list)


def test_a_nested_record_with_open_keys_keeps_and_checks_them():
    sweep = from_dict(Sweep, {"draws": {"samples": 2, "lr": {"from": "a", "span": [1, 2]}}}, "s.toml")
    assert sweep.draws == Draws(samples=2, extra={"lr": Imported(from_="a", span=(1, 2))})
    assert to_dict(sweep) == {"draws": {"samples": 2, "lr": {"from": "a", "span": [1, 2]}}, "seeds": [], "values": []}
    with pytest.raises(OffbenchError, match=r"^s\.toml: 'draws\.lr\.span' must be in increasing order, got \[2, 1\]$"):
        from_dict(Sweep, {"draws": {"samples": 2, "lr": {"from": "a", "span": [2, 1]}}}, "s.toml")
    with pytest.raises(OffbenchError, match=r"^s\.toml: 'draws\.lr' must be a table, got 3$"):
        from_dict(Sweep, {"draws": {"samples": 2, "lr": 3}}, "s.toml")
    with pytest.raises(OffbenchError, match=r"^s\.toml: missing required key 'draws\.samples'$"):
        from_dict(Sweep, {"draws": {"lr": {"from": "a"}}}, "s.toml")


def test_integer_bounds_read_as_integers_and_the_offending_item_is_shown():
    with pytest.raises(OffbenchError, match=r"^s\.toml: 'seeds' must be at least 0 and less than 4294967296, got 4294967296$"):
        from_dict(Sweep, {"seeds": [0, 2**32]}, "s.toml")
    assert "| `seeds` | a list of integers (ge 0, lt 4294967296) |" in field_table(Sweep)
    assert "| `values` | a list of values |" in field_table(Sweep)


@dataclasses.dataclass(frozen=True)
class Split:
    rows: int | Literal["auto"] | None = ranged(None, ge=1)


def test_bounds_apply_to_the_numbers_of_a_field_that_also_takes_a_string():
    assert from_dict(Split, {"rows": "auto"}, "s.toml").rows == "auto"
    assert from_dict(Split, {"rows": 4}, "s.toml").rows == 4
    with pytest.raises(OffbenchError, match=r"^s\.toml: 'rows' must be at least 1, got 0$"):
        from_dict(Split, {"rows": 0}, "s.toml")
    with pytest.raises(OffbenchError, match=r"^s\.toml: 'rows' must be an integer or one of auto, got 'all'$"):
        from_dict(Split, {"rows": "all"}, "s.toml")


def test_files_name_themselves_in_parse_errors(tmp_path):
    (tmp_path / "a.toml").write_text("id = ")
    (tmp_path / "a.json").write_text("{")
    (tmp_path / "b.json").write_bytes(b"\xff")
    with pytest.raises(OffbenchError, match=r"a\.toml: malformed TOML"):
        read_toml(tmp_path / "a.toml", Card, "card")
    with pytest.raises(OffbenchError, match=r"a\.json: card is not valid JSON"):
        read_json(tmp_path / "a.json", Card, "card")
    with pytest.raises(OffbenchError, match=r"b\.json: card is not UTF-8"):
        read_json(tmp_path / "b.json", Card, "card")
    with pytest.raises(OffbenchError, match=r"missing\.json: cannot read card"):
        read_json(tmp_path / "missing.json", Card, "card")


def test_field_table_lists_every_field_with_its_type_default_and_meaning():
    table = field_table(Card)
    assert "| `id` | a string | required | the dataset id |" in table
    assert "| `sizes` | a list of integers (ge 1) | `()` |" in table
    assert table.count("\n") == 1 + len(dataclasses.fields(Card))


@dataclasses.dataclass(frozen=True)
class Fingerprint:
    weights: list[tuple[str, int]] = dataclasses.field(default_factory=list)
    span: tuple[float, float] = (0.0, 1.0)
    returns: list[list[float]] = dataclasses.field(default_factory=list)


def test_a_fixed_list_of_mixed_types_is_described_by_its_positions():
    table = field_table(Fingerprint)
    assert "| `weights` | a list of lists of [string, integer] |" in table
    assert "| `span` | a list of 2 numbers |" in table and "| `returns` | a list of lists of numbers |" in table
    assert from_dict(Fingerprint, {"weights": [["ab12", 3]]}, "f.json").weights == [("ab12", 3)]
    with pytest.raises(OffbenchError) as caught:
        from_dict(Fingerprint, {"weights": [["ab12", "3"]]}, "f.json")
    assert str(caught.value) == "f.json: 'weights[0][1]' must be an integer, got '3'"
    with pytest.raises(OffbenchError) as caught:
        from_dict(Fingerprint, {"weights": [["ab12"]]}, "f.json")
    assert str(caught.value) == "f.json: 'weights[0]' must be a list of [string, integer], got ['ab12']"


@dataclasses.dataclass(frozen=True)
class Imported:
    from_: str = ranged(doc="where it came from")
    span: tuple[int, int] | None = None

    def check(self) -> None:
        if self.span is not None and self.span[0] > self.span[1]:
            raise Invalid(f"'span' must be in increasing order, got {list(self.span)}")
        if self.from_ == "nowhere":
            raise Invalid("needs a real origin")


@dataclasses.dataclass(frozen=True)
class Source:
    import_: Imported | None = None
    parts: list[Imported] = dataclasses.field(default_factory=list)


def test_keyword_keys_are_fields_with_a_trailing_underscore():
    source = from_dict(Source, {"import": {"from": "/data"}}, "s.toml")
    assert source.import_ == Imported(from_="/data") and to_dict(source) == {"import": {"from": "/data"}, "parts": []}
    with pytest.raises(OffbenchError, match=r"^s\.toml: 'import\.from_' is not a known key \(known: from, span\)$"):
        from_dict(Source, {"import": {"from_": "/data"}}, "s.toml")
    assert "| `from` | a string | required | where it came from |" in field_table(Imported)
    assert "| `parts` | a list of tables | empty |" in field_table(Source)


@pytest.mark.parametrize(
    "data, message",
    [
        ({"import": {"from": "x", "span": [2, 1]}}, "s.toml: 'import.span' must be in increasing order, got [2, 1]"),
        ({"parts": [{"from": "x"}, {"from": "x", "span": [2, 1]}]}, "s.toml: 'parts[1].span' must be in increasing order"),
        ({"import": {"from": "nowhere"}}, "s.toml: 'import' needs a real origin"),
    ],
)
def test_a_nested_records_own_check_names_the_dotted_field(data, message):
    with pytest.raises(OffbenchError) as caught:
        from_dict(Source, data, "s.toml")
    assert str(caught.value).startswith(message)


def test_field_table_blocks_in_a_page_are_regenerated_and_must_exist():
    page = "intro\n<!-- fields:Imported -->\nstale\n<!-- /fields:Imported -->\nafter\n"
    assert (
        fill_field_tables(page, Imported) == f"intro\n<!-- fields:Imported -->\n{field_table(Imported)}\n<!-- /fields:Imported -->\nafter\n"
    )
    with pytest.raises(OffbenchError, match="no <!-- fields:Source -->"):
        fill_field_tables(page, Source)


@dataclasses.dataclass(frozen=True)
class Line:
    mean: float
    score: float | None = ranged(None, null=True)
    curve: list[float] | None = None
    regret: float | None = ranged(None, null=lambda line: line.curve is not None)


def test_fields_declared_null_are_written_as_null_always_or_when_their_rule_says():
    assert to_dict(Line(1.0)) == {"mean": 1.0, "score": None}
    assert to_dict(Line(1.0, curve=[1.0])) == {"mean": 1.0, "score": None, "curve": [1.0], "regret": None}
    assert from_dict(Line, to_dict(Line(1.0, curve=[1.0])), "l.json") == Line(1.0, curve=[1.0])


def test_write_field_tables_regenerates_a_page_in_place(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("<!-- fields:Imported -->\nstale\n<!-- /fields:Imported -->\n")
    assert write_field_tables(page, Imported) == page
    assert page.read_text() == f"<!-- fields:Imported -->\n{field_table(Imported)}\n<!-- /fields:Imported -->\n"
