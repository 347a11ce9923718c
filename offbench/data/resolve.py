"""From a dataset id or a path to an EpisodeStore: download or generate on first use, then open."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from offbench.data.cards import DatasetCard, get_card
from offbench.data.formats import detect_format, load_path
from offbench.data.store import EpisodeStore, is_native
from offbench.paths import data_dir


def native_path(card: DatasetCard) -> Path:
    """Where the native copy of a registered dataset lives: $OFFBENCH_HOME/data/<id>/data.h5."""
    return data_dir(card.id) / "data.h5"


def ensure_local(card: DatasetCard, mirror: str | None = None, quiet: bool = False) -> Path:
    """Path of the dataset's native file, downloading (and converting) or generating it first if needed."""
    target = native_path(card)
    if is_native(target):
        return target
    if card.source_kind == "recipe":
        from offbench.generators import generate_from_card

        return generate_from_card(card, target, quiet=quiet)
    from offbench.data.download import fetch_card

    return fetch_card(card, target, mirror=mirror, quiet=quiet)


@dataclass(frozen=True)
class Located:
    """A dataset opened from an id or a path, with what was found on the way."""

    store: EpisodeStore
    path: Path  # the file or folder opened (a registered id's native copy)
    format: str  # the format of `path`, detected once
    card: DatasetCard | None  # the registered card; None when a path was given


def locate(id_or_path: str | Path, mirror: str | None = None, quiet: bool = False) -> Located:
    """Open a path (format detected by content) or a registered id (fetched or generated on first use)."""
    path = Path(id_or_path)
    if path.exists():
        fmt = detect_format(path)
        return Located(load_path(path, fmt), path, fmt, None)
    card = get_card(str(id_or_path))
    local = ensure_local(card, mirror=mirror, quiet=quiet)  # always the native format
    return Located(load_path(local, "offbench"), local, "offbench", card)


def resolve(id_or_path: str | Path, mirror: str | None = None, quiet: bool = False) -> EpisodeStore:
    return locate(id_or_path, mirror=mirror, quiet=quiet).store
