"""From a dataset id or a path to an EpisodeStore: download or generate on first use, then open."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from offbench.data.cards import DatasetCard, card_from_dict, get_card
from offbench.data.formats import detect_format, load_path
from offbench.data.store import EpisodeStore, is_native
from offbench.errors import OffbenchError
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


def download(dataset_id: str, mirror: str | None = None, quiet: bool = False) -> Path:
    """`offbench download`: fetch (or generate, for a recipe card) a registered dataset; its local path."""
    return ensure_local(get_card(dataset_id), mirror=mirror, quiet=quiet)


@dataclass(frozen=True)
class Dataset:
    """A dataset opened from an id or a path: what training, evaluation and `offbench info` need of it."""

    id: str  # the card's id; for a path without a stored card, the file's stem
    path: Path  # the file or folder opened (a registered id's native copy), absolute
    format: str  # the format of `path`, detected once
    store: EpisodeStore
    card: DatasetCard | None  # the registered card, or for a path the card stored in the file (None if none)


def _stored_card(store: EpisodeStore) -> DatasetCard | None:
    """The card a file carries (written at conversion or generation), when it is a valid one."""
    if not store.card:
        return None
    try:
        return card_from_dict(store.card)
    except OffbenchError:
        return None


def open_dataset(id_or_path: str | Path, mirror: str | None = None, quiet: bool = False) -> Dataset:
    """Open a path (format detected by content) or a registered id (fetched or generated on first use)."""
    path = Path(id_or_path)
    if path.exists():
        fmt = detect_format(path)
        store = load_path(path, fmt)
        card = _stored_card(store)
        return Dataset(card.id if card else path.stem, path.resolve(), fmt, store, card)
    card = get_card(str(id_or_path))
    local = ensure_local(card, mirror=mirror, quiet=quiet)  # always the native format
    return Dataset(card.id, local.resolve(), "offbench", load_path(local, "offbench"), card)


def resolve(id_or_path: str | Path, mirror: str | None = None, quiet: bool = False) -> EpisodeStore:
    return open_dataset(id_or_path, mirror=mirror, quiet=quiet).store
