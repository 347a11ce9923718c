"""From a dataset id or a path to an opened dataset (an EpisodeStore, or an InPlaceStore for a file read in place):
download or generate on first use, then open."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Callable

from filelock import FileLock

from offbench import records
from offbench.data.cards import DatasetCard, card_from_dict, get_card
from offbench.data.formats import detect_format, load_path, reads_in_place
from offbench.data.store import EpisodeStore, InPlaceStore, Store, is_native
from offbench.errors import OffbenchError
from offbench.paths import data_dir
from offbench.utils import acquire_announced, ensure_dir

PREPARE_LOCK = ".prepare.lock"  # in a dataset's folder, held while it is downloaded or generated (`offbench cache delete` takes it too)


def native_path(card: DatasetCard) -> Path:
    """Where the native copy of a registered dataset lives: $OFFBENCH_HOME/data/<id>/data.h5, or the folder of one
    of its former ids (`formerly`) where only that one holds its data: data made before a rename is used as it is,
    not made again."""
    folders = [data_dir(dataset_id) for dataset_id in (card.id, *card.formerly)]
    return next((folder for folder in folders if _holds_data(folder)), folders[0]) / "data.h5"


def _holds_data(folder: Path) -> bool:
    """Whether a dataset folder holds a native file or a download (not just a lock left by an attempt)."""
    return (folder / "data.h5").exists() or (folder / "raw").is_dir()


def in_place_path(card: DatasetCard) -> Path | None:
    """Where a read-in-place card's downloaded payload lies (its one file, or raw/), None for other cards."""
    if card.source_kind != "files" or not reads_in_place(card.format):
        return None
    from offbench.data.download import remote_files

    raw = native_path(card).parent / "raw"
    files = remote_files(card)
    return raw / files[0].relpath if len(files) == 1 else raw


def is_local(card: DatasetCard) -> bool:
    """Whether the dataset is on disk, ready to open (a file keeps its final name only once verified)."""
    payload = in_place_path(card)
    if payload is None:
        return is_native(native_path(card))
    from offbench.data.download import remote_files

    raw = native_path(card).parent / "raw"
    return all((raw / remote.relpath).is_file() for remote in remote_files(card))


def ensure_local(card: DatasetCard, mirror: str | None = None, quiet: bool = False) -> Path:
    """Path of the dataset's native file, downloading (and converting) or generating it first if needed.
    A read-in-place card (XLand) gives its verified download instead, never converted. Processes preparing
    the same dataset at once take turns (one `filelock` per dataset): the first makes it, the others wait
    and then find it made. A card that cannot be prepared fails before anything is written."""
    target = native_path(card)
    ready = _local_copy(card, target)
    if ready is not None:
        return ready
    make = _preparation(card, target, mirror, quiet)
    lock = FileLock(str(ensure_dir(target.parent) / PREPARE_LOCK))
    acquire_announced(lock, f"preparing {card.id}")
    try:
        return _local_copy(card, target) or make()
    finally:
        lock.release()


def _local_copy(card: DatasetCard, target: Path) -> Path | None:
    payload = in_place_path(card)
    if payload is not None and is_local(card):
        return payload
    return target if is_native(target) else None


def _preparation(card: DatasetCard, target: Path, mirror: str | None, quiet: bool) -> Callable[[], Path]:
    """What makes the card's local copy, after the checks that need neither disk nor network."""
    imported, recipe = card.source.import_, card.source.recipe  # a card's source is exactly one kind
    if imported is not None:
        raise OffbenchError(
            f"{card.id}: its data file {target} is missing; it was imported, import it again: "
            f"offbench import {imported.format} {imported.from_} --id {card.id}"
        )
    if recipe is not None:
        from offbench.generators import generate_from_card, get_generator

        get_generator(recipe.generator)
        return partial(generate_from_card, card, target, quiet=quiet)
    from offbench.data.download import fetch_card, fetchable_files

    fetchable_files(card)
    return partial(fetch_card, card, target, mirror=mirror, quiet=quiet)


def download(dataset_id: str, mirror: str | None = None, quiet: bool = False) -> Path:
    """`offbench download`: fetch (or generate, for a recipe card) a registered dataset; its local path."""
    return ensure_local(get_card(dataset_id), mirror=mirror, quiet=quiet)


@dataclass(frozen=True)
class Dataset:
    """A dataset opened from an id or a path: what training, evaluation and `offbench info` need of it."""

    id: str  # the card's id; for a path without a stored card, the file's stem
    path: Path  # the file or folder opened (a registered id's native copy), absolute
    format: str  # the format of `path`, detected once
    store: EpisodeStore | InPlaceStore
    card: DatasetCard | None  # the registered card, or for a path the card stored in the file (None if none)


def _stored_card(store: Store) -> DatasetCard | None:
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
    local = ensure_local(card, mirror=mirror, quiet=quiet)  # the native format, unless read in place
    fmt = card.format if reads_in_place(card.format) else "offbench"
    store = load_path(local, fmt)
    if fmt != "offbench":
        store.card = card.to_dict()
    return Dataset(card.id, local.resolve(), fmt, store, _with_measured_scores(card, store))


def _with_measured_scores(card: DatasetCard, store: Store) -> DatasetCard:
    """A generated card whose generator measures its reference returns (mujoco-local: random actions and the expert
    it trained) cannot state them before generation; opened by id, it takes them from the file it generated, so
    runs by id are normalised as runs by path are. Reference returns a card states are never replaced."""
    if card.source.recipe is None or card.ref_min_score is not None:
        return card
    stored = _stored_card(store)
    if stored is None or stored.ref_min_score is None:
        return card
    return card_from_dict({**card.to_dict(), "scores": records.to_dict(stored.scores)}, card.card_path)


def resolve(id_or_path: str | Path, mirror: str | None = None, quiet: bool = False) -> EpisodeStore | InPlaceStore:
    return open_dataset(id_or_path, mirror=mirror, quiet=quiet).store
