"""Typed records: every file offbench reads or writes is a dataclass, read by one function.

A record declares its fields with types (`bool`, `int`, `float`, `str`, optional, lists / tuples, `dict[str, X]`,
`Literal[...]`, nested records) and, next to a field, its allowed values (`ranged(default, ge=..., choices=...)`).
`from_dict(Record, data, where)` checks every key against them and builds the record, or raises one
`OffbenchError` line naming the file and the field (`cards/x.toml: 'source.recipe.seed' must be at least 0, got -1`),
which the CLI prints and exits 2 on. A record may add checks that span fields in a `check()` method that raises
`Invalid("'field' problem")`; `from_dict` puts it on the field's dotted path. Writers build the same classes and
call `to_dict`, so what is written is what is read. A key that is a Python keyword (`import`, `from`) is declared
as a field with a trailing underscore (`import_`), as PEP 8 names such attributes.

Why not pydantic (installed here as a dependency of ray): its errors are several lines per field and its import
costs about 60 ms on every CLI call; the rules our files need are the few above, which fit in this module.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import keyword
import math
import re
import tomllib
import types
import typing
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal, TypeVar

from offbench.errors import OffbenchError
from offbench.utils import atomic_write_text, read_text

R = TypeVar("R")


class Invalid(ValueError):
    """A record's own `check()` found a problem; the message starts with the field, `from_dict` adds the file."""


def ranged(
    default: Any = dataclasses.MISSING,
    *,
    ge: float | None = None,
    gt: float | None = None,
    le: float | None = None,
    lt: float | None = None,
    choices: tuple[Any, ...] | None = None,
    default_factory: Any = dataclasses.MISSING,
    doc: str = "",
    null: bool | Callable[[Any], bool] = False,
) -> Any:
    """A record field with its allowed values declared next to it (bounds and choices apply to every item of a
    list), checked whenever the record is read: a bad value is refused before anything is made from it. `doc`
    is the field's one-line meaning, for the generated field tables in docs/. `null` (JSON files): `to_dict`
    writes the field as null when it is None instead of leaving it out, so a reader sees it was measured and
    has no value; a function of the record says when (`null=lambda line: line.in_context_returns is not None`)."""
    limits = {key: value for key, value in (("ge", ge), ("gt", gt), ("le", le), ("lt", lt), ("choices", choices)) if value is not None}
    return dataclasses.field(default=default, default_factory=default_factory, metadata={"allowed": limits, "doc": doc, "null": null})


def describe(annotation: Any) -> str:
    """A field type in words, for error messages and field tables: 'a number', 'a list of numbers', ..."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(describe(a) for a in args if a is not type(None))
    if origin is Literal:
        return "one of " + ", ".join(map(str, args))
    if origin in (tuple, list):
        fixed = origin is tuple and args and args[-1] is not Ellipsis
        if fixed and len(set(args)) > 1:  # a fixed tuple of mixed types: each position's own type, in order
            return "a list of [" + ", ".join(_noun(describe(a)) for a in args) + "]"
        item = describe(args[0]) if args else "values"
        plural = {
            "a number": "numbers",
            "an integer": "integers",
            "a string": "strings",
            "true or false": "booleans",
            "a table": "tables",
            "any value": "values",
        }.get(item, item)
        if plural.startswith("a list of "):
            plural = "lists of " + plural.removeprefix("a list of ")
        return f"a list of {len(args)} {plural}" if fixed else f"a list of {plural}"
    if origin is dict:
        return "a table"
    if dataclasses.is_dataclass(annotation):
        return "a table"
    return {bool: "true or false", int: "an integer", float: "a number", str: "a string", Any: "any value"}.get(annotation, str(annotation))


def _noun(description: str) -> str:
    """'a string' -> 'string', for a position in a fixed list: [string, integer]."""
    return {"true or false": "boolean", "any value": "value"}.get(description, re.sub(r"^an? ", "", description))


def coerce(value: Any, annotation: Any, where: str) -> Any:
    """`value` as the field type `annotation` wants, or OffbenchError naming `where` (file and key)."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        return _union(value, annotation, args, where)
    if origin is Literal:
        if any(value == choice and type(value) is type(choice) for choice in args):
            return value
        raise OffbenchError(f"{where} must be one of {', '.join(map(str, args))}, got {_shown(value)}")
    if origin in (tuple, list):
        return _sequence(value, annotation, origin, args, where)
    if origin is dict:
        if not isinstance(value, Mapping):
            raise OffbenchError(f"{where} must be a table, got {_shown(value)}")
        key_type, item = args if args else (str, Any)
        return {coerce(k, key_type, f"{where} key"): coerce(v, item, _nested(where, str(k))) for k, v in value.items()}
    if dataclasses.is_dataclass(annotation) and isinstance(annotation, type):
        return from_dict(annotation, value, where)
    if annotation is Any:
        return value
    return _scalar(value, annotation, where)


def _union(value: Any, annotation: Any, args: tuple[Any, ...], where: str) -> Any:
    """`X | Y | None`: None where allowed, else the first option the value reads as."""
    options = [a for a in args if a is not type(None)]
    if value is None and len(options) < len(args):
        return None
    if len(options) == 1:  # optional X: X's own error says more than 'X or none'
        return coerce(value, options[0], where)
    for option in options:
        try:
            return coerce(value, option, where)
        except OffbenchError:
            continue
    raise OffbenchError(f"{where} must be {describe(annotation)}, got {_shown(value)}")


def _sequence(value: Any, annotation: Any, origin: type, args: tuple[Any, ...], where: str) -> list[Any] | tuple[Any, ...]:
    """A list, a tuple of any length (`tuple[X, ...]`) or a fixed tuple (`tuple[X, Y]`: that many items, each its type)."""
    if not isinstance(value, (list, tuple)):
        raise OffbenchError(f"{where} must be {describe(annotation)}, got {_shown(value)}")
    if origin is tuple and args and args[-1] is not Ellipsis:
        if len(value) != len(args):
            raise OffbenchError(f"{where} must be {describe(annotation)}, got {_shown(value)}")
        return tuple(coerce(v, a, _item(where, i)) for i, (v, a) in enumerate(zip(value, args)))
    item = args[0] if args else Any
    items = [coerce(v, item, _item(where, i)) for i, v in enumerate(value)]
    return tuple(items) if origin is tuple else items


def _scalar(value: Any, annotation: Any, where: str) -> Any:
    if annotation is bool:
        if isinstance(value, bool):
            return value
        raise OffbenchError(f"{where} must be true or false, got {_shown(value)}")
    if annotation is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise OffbenchError(f"{where} must be an integer, got {_shown(value)}")
    if annotation is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            return float(value)
        raise OffbenchError(f"{where} must be a finite number, got {_shown(value)}")
    if annotation is str:
        if isinstance(value, str):
            return value
        raise OffbenchError(f"{where} must be a string, got {_shown(value)}")
    raise TypeError(f"record field type {annotation!r} is not supported")


def _shown(value: Any) -> str:
    """A value as an error message shows it: short, one line."""
    text = repr(value).replace("\n", " ")
    return text if len(text) <= 80 else text[:77] + "..."


_BOUNDS = {
    "ge": ("at least", lambda v, b: v >= b),
    "gt": ("greater than", lambda v, b: v > b),
    "le": ("at most", lambda v, b: v <= b),
    "lt": ("less than", lambda v, b: v < b),
}


def check_allowed(value: Any, allowed: Mapping[str, Any], where: str) -> Any:
    """`value` if it (every item of it, for a list) is within the field's declared `ranged` limits. Bounds apply to
    numbers: a string a field also takes (`int | Literal["auto"]`) is checked by its type alone."""
    items = value if isinstance(value, (list, tuple)) else (value,)
    for item in items:
        if item is None or (isinstance(item, str) and "choices" not in allowed):
            continue
        if "choices" in allowed and item not in allowed["choices"]:
            raise OffbenchError(f"{where} must be one of {', '.join(map(str, allowed['choices']))}, got {_shown(item)}")
        bounds = [(symbol, bound, test) for key, (symbol, test) in _BOUNDS.items() if (bound := allowed.get(key)) is not None]
        if not all(test(item, bound) for _, bound, test in bounds):
            wanted = " and ".join(f"{symbol} {bound if isinstance(bound, int) else format(bound, 'g')}" for symbol, bound, _ in bounds)
            raise OffbenchError(f"{where} must be {wanted}, got {_shown(item)}")
    return value


def field_types(record: Any) -> dict[str, Any]:
    """Field name -> resolved type annotation, for a record class or instance."""
    return _field_types(record if isinstance(record, type) else type(record))


@functools.cache
def _field_types(cls: type) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls) if f.init}


def field_limits(record: Any) -> dict[str, dict[str, Any]]:
    """Field name -> the limits its `ranged` declaration allows (empty for a plain field)."""
    return {f.name: dict(f.metadata.get("allowed", {})) for f in dataclasses.fields(record) if f.init}


def _item(where: str, index: int) -> str:
    """`file: 'a'` + 1 -> `file: 'a[1]'`."""
    return f"{where[:-1]}[{index}]'" if where.endswith("'") else f"{where}[{index}]"


def _nested(where: str, key: str) -> str:
    """`file: 'a'` + `b` -> `file: 'a.b'`; `file` + `b` -> `file: 'b'`."""
    if where.endswith("'") and ": '" in where:
        return f"{where[:-1]}.{key}'"
    return f"{where}: '{key}'"


def _missing(where: str, key: str) -> str:
    """`file: 'a'` + `b` -> `file: missing required key 'a.b'`."""
    if where.endswith("'") and ": '" in where:
        base, path = where.rsplit(": '", 1)
        return f"{base}: missing required key '{path[:-1]}.{key}'"
    return f"{where}: missing required key '{key}'"


def _located(where: str, message: str) -> str:
    """A record's own `check()` message placed in its file: `file: 'a'` + `'b' is bad` -> `file: 'a.b' is bad`;
    a message that names no field is about the record itself (`file: 'a' needs ...`, `file: needs ...`)."""
    if message.startswith("'") and "'" in message[1:]:
        field, rest = message[1:].split("'", 1)
        return _nested(where, field) + rest
    return f"{where} {message}" if where.endswith("'") and ": '" in where else f"{where}: {message}"


def _required(f: dataclasses.Field) -> bool:
    return f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING


def _key(f: dataclasses.Field) -> str:
    """The key a field is read from and written to: its name, less the trailing underscore of a keyword (`import_`)."""
    return f.name[:-1] if f.name.endswith("_") and keyword.iskeyword(f.name[:-1]) else f.name


def from_dict(cls: type[R], data: Any, where: str, *, extra: bool = False) -> R:
    """Build record `cls` from parsed TOML / JSON data, checking every field; `where` names the file (and the
    table, for a nested record) in errors. Unknown keys are refused, unless `extra` or the class's `open_keys`
    (which holds wherever the record is read, nested too): the record then keeps them in its `extra` field, each
    checked as X when that field is typed `dict[str, X]`."""
    extra = extra or getattr(cls, "open_keys", False)
    if not isinstance(data, Mapping):
        raise OffbenchError(f"{where} must be a table, got {_shown(data)}")
    types_, limits = field_types(cls), field_limits(cls)
    fields = {_key(f): f for f in dataclasses.fields(cls) if f.init}  # type: ignore[arg-type]
    unknown = [key for key in data if key not in fields or (key == "extra" and extra)]
    if unknown and not extra:
        known = ", ".join(sorted(k for k in fields if k != "extra"))
        raise OffbenchError(f"{_nested(where, unknown[0])} is not a known key (known: {known})")
    values: dict[str, Any] = {}
    for key, f in fields.items():
        if extra and f.name == "extra":
            continue
        if key not in data:
            if _required(f):
                raise OffbenchError(_missing(where, key))
            continue
        at = _nested(where, key)
        values[f.name] = check_allowed(coerce(data[key], types_[f.name], at), limits[f.name], at)
    if extra:
        kept = {key: data[key] for key in unknown}
        values["extra"] = coerce(kept, types_["extra"], where) if typing.get_args(types_["extra"]) else kept
    record = cls(**values)
    check = getattr(record, "check", None)
    if callable(check):
        try:
            check()
        except Invalid as exc:
            raise OffbenchError(_located(where, str(exc))) from None
    return record


def to_dict(record: Any) -> dict[str, Any]:
    """A record as TOML / JSON-ready data: nested records as tables, tuples as lists, None fields left out (TOML
    has no null; a missing optional key reads back as its default None) unless declared `ranged(null=...)`."""

    def plain(value: Any) -> Any:
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            return to_dict(value)
        if isinstance(value, (list, tuple)):
            return [plain(v) for v in value]
        if isinstance(value, Mapping):
            return {k: plain(v) for k, v in value.items()}
        return value

    out = {
        _key(f): plain(getattr(record, f.name))
        for f in dataclasses.fields(record)
        if f.init and f.name != "extra" and (getattr(record, f.name) is not None or _written_null(f, record))
    }
    out.update(plain(getattr(record, "extra", None) or {}))
    return out


def _written_null(f: dataclasses.Field, record: Any) -> bool:
    null = f.metadata.get("null", False)
    return bool(null(record) if callable(null) else null)


def read_toml(path: str | Path, cls: type[R], what: str, **options: Any) -> R:
    """Record `cls` from a TOML file; every problem is one line naming the file (`what` says what it is)."""
    try:
        data = tomllib.loads(read_text(path, what))
    except tomllib.TOMLDecodeError as exc:
        raise OffbenchError(f"{path}: malformed TOML ({exc})") from None
    return from_dict(cls, data, str(path), **options)


def read_json(path: str | Path, cls: type[R], what: str, **options: Any) -> R:
    """Record `cls` from a JSON file; every problem is one line naming the file (`what` says what it is)."""
    try:
        data = json.loads(read_text(path, what))
    except json.JSONDecodeError as exc:
        raise OffbenchError(f"{path}: {what} is not valid JSON ({exc.msg} at line {exc.lineno})") from None
    return from_dict(cls, data, str(path), **options)


def field_table(cls: type) -> str:
    """A markdown table of a record's fields (name, type, required or default, meaning): docs/ embeds these
    between markers and a test regenerates them, so the documented fields cannot drift from the code."""
    rows = ["| field | type | default | meaning |", "|---|---|---|---|"]
    types_ = field_types(cls)
    for f in dataclasses.fields(cls):
        if not f.init or f.name == "extra":
            continue
        if _required(f):
            default = "required"
        elif f.default is not dataclasses.MISSING:
            default = (
                "none"
                if f.default is None
                else f"`{json.dumps(f.default)}`"
                if isinstance(f.default, (bool, int, float, str))
                else f"`{f.default!r}`"
            )
        else:
            default = "empty"
        limits = f.metadata.get("allowed", {})
        kind = describe(types_[f.name])
        if limits:
            kind += " (" + ", ".join(f"{k} {v}" if k != "choices" else "one of " + ", ".join(map(str, v)) for k, v in limits.items()) + ")"
        rows.append(f"| `{_key(f)}` | {kind} | {default} | {f.metadata.get('doc', '')} |")
    return "\n".join(rows)


def fill_field_tables(text: str, *classes: type) -> str:
    """`text` (a markdown page) with the block between `<!-- fields:Name -->` and `<!-- /fields:Name -->` made
    afresh by `field_table` for each record class given. A page without a class's block is an error, so a
    renamed record cannot leave its documented fields behind unnoticed."""
    for cls in classes:
        name = cls.__name__
        block = re.compile(rf"(<!-- fields:{name} -->\n).*?(<!-- /fields:{name} -->)", re.DOTALL)
        if not block.search(text):
            raise OffbenchError(f"no <!-- fields:{name} --> ... <!-- /fields:{name} --> block to fill")
        table = field_table(cls)
        text = block.sub(lambda match, table=table: f"{match[1]}{table}\n{match[2]}", text)
    return text


def write_field_tables(page: str | Path, *classes: type) -> Path:
    """Regenerate a docs page's field tables for `classes` in place (`fill_field_tables`); the page's drift test
    names the call that does it."""
    return atomic_write_text(page, fill_field_tables(read_text(page, "page"), *classes))
