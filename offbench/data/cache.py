"""`offbench cache list|delete`: the datasets on this machine, under `$OFFBENCH_HOME/data/<id>/`, and the work
generators share between datasets (training runs), under `$OFFBENCH_HOME/work/<generator>/` (`paths.work_dir`).

A dataset's folder holds its native file `data.h5` once it is complete, and while it is being prepared the
download's `raw/` files (`*.part` until verified), a generator's staging file or work folder, and the lock
`resolve.ensure_local` takes. A folder is listed as `complete` when the registered card finds it ready to open
(`resolve.is_local`; without a card, when `data.h5` is a native file), else as `partial`.

Deleting never touches anything outside `$OFFBENCH_HOME/data`: an id is cut into safe path components, must
name a listed dataset folder (not a namespace holding others, not a link out), and is refused while another
process holds its lock (a download or generation in progress). The folder is first renamed to a hidden
`.<name>.deleting` beside it, in one step, and only then removed: a delete cut short leaves that folder,
which no id resolves to (so nothing half-deleted looks complete); `cache list` shows it as `interrupted
delete` and `cache delete ID` finishes it. Cards stay registered: the data is fetched or generated again on
next use.

A generator's work folder goes only when named (`cache delete --work GENERATOR`), the same way: renamed aside in one
step, then removed, so a generator never resumes from half a training run; the next generation trains again. It is
refused while another process holds one of the folder's work locks (`generators.work_lock`: a run being trained or measured),
and the rename happens holding them all. A folder holding nothing but lock files is no work and is not listed.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import typer

from offbench.errors import OffbenchError
from offbench.generators.work_lock import guarded_work, is_lock_file, lock_files
from offbench.paths import offbench_home, work_root
from offbench.utils import safe_component

DELETING_SUFFIX = ".deleting"
INTERNAL_DIRS = ("raw",)  # a dataset folder's own sub-folders (besides hidden ones and generators' *.work)


@dataclass(frozen=True)
class CachedDataset:
    id: str
    path: Path
    size: int  # bytes on disk (allocated blocks, as du counts them)
    status: str  # complete | partial | interrupted delete


@dataclass(frozen=True)
class WorkFolder:
    generator: str
    path: Path
    size: int  # bytes on disk, as CachedDataset's
    status: str  # reusable | interrupted delete


def data_root() -> Path:
    return offbench_home() / "data"


def _is_internal(entry: os.DirEntry) -> bool:
    return entry.name.startswith(".") or entry.name in INTERNAL_DIRS or entry.name.endswith(".work")


def _disk_usage(path: Path) -> int:
    """Bytes allocated to everything under `path`, links not followed."""
    total = 0
    for folder, dirs, files in os.walk(path):
        for name in (*dirs, *files):
            stat = os.lstat(os.path.join(folder, name))
            total += getattr(stat, "st_blocks", 0) * 512 or stat.st_size
    return total


def _status(dataset_id: str, path: Path) -> str:
    from offbench.data.cards import get_card
    from offbench.data.resolve import is_local
    from offbench.data.store import is_native

    try:
        card = get_card(dataset_id)
    except OffbenchError:  # no card (any more): the native file alone says whether the data is whole
        return "complete" if is_native(path / "data.h5") else "partial"
    return "complete" if is_local(card) else "partial"


def cached_datasets() -> list[CachedDataset]:
    """Every dataset folder and interrupted delete under the data root, by id."""
    found: list[CachedDataset] = []

    def walk(folder: Path, prefix: str) -> None:
        with os.scandir(folder) as scan:
            entries = sorted(scan, key=lambda entry: entry.name)
        for entry in entries:
            if not entry.is_dir(follow_symlinks=False):
                continue
            path = Path(entry.path)
            if entry.name.startswith(".") and entry.name.endswith(DELETING_SUFFIX):
                dataset_id = prefix + entry.name[1 : -len(DELETING_SUFFIX)]
                found.append(CachedDataset(dataset_id, path, _disk_usage(path), "interrupted delete"))
            elif not _is_internal(entry):
                with os.scandir(path) as scan:
                    if any(not child.is_dir(follow_symlinks=False) or _is_internal(child) for child in scan):
                        dataset_id = prefix + entry.name
                        found.append(CachedDataset(dataset_id, path, _disk_usage(path), _status(dataset_id, path)))
                walk(path, f"{prefix}{entry.name}/")  # ids may nest: minigrid/tiny-near-optimal

    root = data_root()
    if root.is_dir():
        walk(root, "")
    return sorted(found, key=lambda dataset: (dataset.id, dataset.status))


def work_folders() -> list[WorkFolder]:
    """Every generator's work folder and interrupted delete under the work root, by generator."""
    root = work_root()
    if not root.is_dir():
        return []
    found = []
    with os.scandir(root) as scan:
        for entry in scan:
            path = Path(entry.path)
            if not entry.is_dir(follow_symlinks=False):
                continue
            if entry.name.startswith(".") and entry.name.endswith(DELETING_SUFFIX):
                found.append(WorkFolder(entry.name[1 : -len(DELETING_SUFFIX)], path, _disk_usage(path), "interrupted delete"))
            elif not entry.name.startswith(".") and _holds_work(path):
                found.append(WorkFolder(entry.name, path, _disk_usage(path), "reusable"))
    return sorted(found, key=lambda folder: (folder.generator, folder.status))


def _holds_work(folder: Path) -> bool:
    """Whether anything but work locks lies under `folder` (a generation that failed before writing leaves its lock)."""
    return any(not is_lock_file(name) for _, _, names in os.walk(folder) for name in names)


def _targets(dataset_ids: list[str]) -> list[CachedDataset]:
    """What deleting these ids removes, after every check (so either all are deleted or none)."""
    root = data_root()
    on_disk = cached_datasets()
    targets = []
    for dataset_id in dict.fromkeys(dataset_ids):
        parts = dataset_id.strip("/").split("/")
        for part in parts:
            safe_component(part, f"{dataset_id}: id part")
        path = root.joinpath(*parts)
        if path.is_symlink():
            raise OffbenchError(
                f"{path}: a link (to {os.readlink(path)}); offbench deletes only what lies under {root}, remove the link yourself"
            )
        mine = [dataset for dataset in on_disk if dataset.id == "/".join(parts)]
        if not mine:
            raise OffbenchError(f"{dataset_id}: not on disk under {root} (see `offbench cache list`)")
        nested = [dataset.id for dataset in on_disk if dataset.id.startswith(f"{'/'.join(parts)}/")]
        if nested and any(dataset.path == path for dataset in mine):
            raise OffbenchError(f"{path}: also holds the datasets {', '.join(nested)}; delete those first")
        targets += sorted(
            mine, key=lambda dataset: dataset.status != "interrupted delete"
        )  # its leftover first: the rename needs its place
    return targets


def _work_targets(generators: list[str]) -> list[WorkFolder]:
    """The work folders `--work` names, after every check (an interrupted delete before its folder, as `_targets`)."""
    root, on_disk = work_root(), work_folders()
    targets = []
    for generator in dict.fromkeys(generators):
        path = root / safe_component(generator, "--work")
        if path.is_symlink():
            raise OffbenchError(
                f"{path}: a link (to {os.readlink(path)}); offbench deletes only what lies under {root}, remove the link yourself"
            )
        mine = [folder for folder in on_disk if folder.generator == generator]
        if not mine:
            raise OffbenchError(f"--work {generator}: no work folder under {root} (see `offbench cache list`)")
        targets += sorted(mine, key=lambda folder: folder.status != "interrupted delete")
    return targets


def _set_aside(path: Path) -> Path:
    """`path` renamed in one step to the hidden `.<name>.deleting` beside it (an earlier delete's leftover there
    removed first), which nothing resolves to; returns the new path."""
    graveyard = path.with_name(f".{path.name}{DELETING_SUFFIX}")
    if graveyard.exists():
        shutil.rmtree(graveyard)
    os.rename(path, graveyard)
    return graveyard


def _remove_work(folder: WorkFolder) -> None:
    """Rename the work folder aside (holding each of its work locks, so no generation is writing into it), then
    remove it."""
    graveyard = folder.path
    if folder.status != "interrupted delete":
        with ExitStack() as held:
            for path in lock_files(folder.path):
                refusal = f"--work {folder.generator}: another process is working on {guarded_work(path)} (it holds {path}); delete the work folder once that is done"
                held.enter_context(_held_now(path, refusal))
            graveyard = _set_aside(folder.path)
    shutil.rmtree(graveyard)


@contextmanager
def _held_now(lock_path: Path, refusal: str) -> Iterator[None]:
    """Hold the lock at `lock_path` for the block, or refuse with `refusal` at once if another process holds it:
    a delete never waits for a download, a generation or a training run, nor moves their folder from under them."""
    from filelock import FileLock, Timeout

    lock = FileLock(str(lock_path))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        raise OffbenchError(refusal) from None
    try:
        yield
    finally:
        lock.release()


def _remove(dataset: CachedDataset) -> None:
    """Rename the folder aside in one step (holding its lock, so no download or generation is under way), then
    remove it; then the namespace folders it leaves empty."""
    from offbench.data.resolve import PREPARE_LOCK

    graveyard = dataset.path
    if dataset.status != "interrupted delete":
        lock = dataset.path / PREPARE_LOCK
        with _held_now(lock, f"{dataset.id}: another process is downloading or generating it ({lock}); delete it once that is done"):
            graveyard = _set_aside(dataset.path)
    shutil.rmtree(graveyard)
    root, folder = data_root(), graveyard.parent
    while folder != root and folder.is_relative_to(root) and not any(folder.iterdir()):
        folder.rmdir()
        folder = folder.parent


# ---------------------------------------------------------------------------------------- commands
cache_app = typer.Typer(
    help="Datasets on this machine (under $OFFBENCH_HOME/data) and generators' shared work (under $OFFBENCH_HOME/work): list them, delete them.",
    no_args_is_help=True,
)


def _size(n: int) -> str:
    from rich.filesize import decimal

    return decimal(n)


def _table(heading: str, rows: list[tuple[str, int, str, Path]]) -> None:
    """Rows of (name, size, status, folder) under a header whose first column is `heading`."""
    width = max(len(heading), *(len(name) for name, *_ in rows))
    typer.echo(f"{heading:<{width}}  {'size':>9}  {'status':<18}  path")
    for name, size, status, path in rows:
        typer.echo(f"{name:<{width}}  {_size(size):>9}  {status:<18}  {path}")


@cache_app.command("list")
def list_command() -> None:
    """Every local dataset: id, size on disk, whether it is complete or a partial download, its folder; then each
    generator's work folder (training runs its datasets share), if any."""
    datasets, work = cached_datasets(), work_folders()
    if datasets:
        _table("id", [(dataset.id, dataset.size, dataset.status, dataset.path) for dataset in datasets])
        typer.echo(f"{len(datasets)} dataset(s), {_size(sum(dataset.size for dataset in datasets))} under {data_root()}")
    else:
        typer.echo(f"no datasets under {data_root()}")
    if work:
        typer.echo("")
        _table("work of", [(folder.generator, folder.size, folder.status, folder.path) for folder in work])
        typer.echo(
            f"{len(work)} work folder(s), {_size(sum(folder.size for folder in work))} under {work_root()}: the generators' "
            "training runs, kept for their other datasets; `offbench cache delete --work GENERATOR` deletes one"
        )


@cache_app.command("delete")
def delete_command(
    dataset_ids: list[str] | None = typer.Argument(None, metavar="ID", help="Dataset ids as `offbench cache list` shows them."),
    work: list[str] | None = typer.Option(
        None,
        "--work",
        metavar="GENERATOR",
        help="Also delete this generator's work folder, its training runs shared between datasets (repeatable).",
    ),
    yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask for confirmation."),
) -> None:
    """Delete local datasets (their cards stay registered: the data is fetched or generated again on next use) and,
    with --work, generators' work folders (the next generation trains again)."""
    if not dataset_ids and not work:
        raise OffbenchError("cache delete: name dataset ids, --work GENERATOR, or both (see `offbench cache list`)")
    datasets, folders = _targets(dataset_ids or []), _work_targets(work or [])
    removals = [(dataset.id, dataset.size, dataset.path, partial(_remove, dataset)) for dataset in datasets]
    removals += [(f"work of {folder.generator}", folder.size, folder.path, partial(_remove_work, folder)) for folder in folders]
    if not yes:
        for name, size, path, _ in removals:
            typer.echo(f"  {name}  {_size(size)}  {path}")
        typer.confirm(f"Delete {len(removals)} folder(s), {_size(sum(size for _, size, _, _ in removals))}?", abort=True)
    for name, size, path, remove in removals:
        remove()
        typer.echo(f"deleted {name} ({_size(size)}, {path})")
