"""String-keyed registries (samplers, formats, environment suites, generators): one way to add an entry
and one way to look one up, so every "unknown X" error reads the same."""

from __future__ import annotations

from typing import Callable, TypeVar

from offbench.errors import OffbenchError

T = TypeVar("T")


def register(table: dict[str, T], name: str) -> Callable[[T], T]:
    """Decorator (or call on a value) adding an entry under `name`; a later entry with the same name
    replaces it, so a user's module can override a built-in one."""

    def add(entry: T) -> T:
        table[name] = entry
        return entry

    return add


def lookup(table: dict[str, T], name: str, what: str) -> T:
    """The entry under `name`, or a one-line error naming the known ones."""
    if name not in table:
        raise OffbenchError(f"unknown {what} '{name}' (known: {', '.join(sorted(table)) or 'none'})")
    return table[name]
