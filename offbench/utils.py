"""Small helpers shared across layers: safe file names, atomic writes, one-line errors for files the user
can fix, JSON that never holds pickles, a progress bar."""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import socket
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator

from offbench.errors import OffbenchError

if TYPE_CHECKING:
    from filelock import FileLock

_SAFE_COMPONENT = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,127}")


def safe_component(name: str, what: str) -> str:
    """`name` if it is one safe path component (letters, digits, `._+-`, not starting with a dot or dash,
    at most 128 characters); else an OffbenchError naming `what` and the value. Every file or folder name
    taken from a URL, a card, a run or a label goes through here, so none can climb out of its folder."""
    if not isinstance(name, str) or not _SAFE_COMPONENT.fullmatch(name) or name in (".", ".."):
        raise OffbenchError(f"{what} {name!r} is not a safe file name (1-128 of A-Z a-z 0-9 . _ + -, starting with a letter or digit)")
    return name


# ---------------------------------------------------------------------------------------- errors
_SPACE_ERRNOS = {errno.ENOSPC, errno.EDQUOT}
USER_FIXABLE_ERRNOS = _SPACE_ERRNOS | {
    errno.EFBIG,
    errno.EACCES,
    errno.EPERM,
    errno.EROFS,
    errno.ENOTDIR,
    errno.EISDIR,
    errno.EEXIST,
    errno.ENAMETOOLONG,
    errno.ELOOP,
}


def os_error_number(exc: OSError) -> int | None:
    """The errno of an OSError, also where h5py only puts it in the text ("errno = 28, error message = ...")."""
    if exc.errno is not None:
        return exc.errno
    text = str(exc)
    found = re.search(r"errno = (\d+)", text)
    if found:
        return int(found.group(1))
    return errno.ENOSPC if "No space left on device" in text else None


def disk_full_error(path: str | Path, need: int | None = None) -> OffbenchError:
    folder = Path(path).parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    free = shutil.disk_usage(folder).free
    needs = f"; {need:,} bytes needed" if need else ""
    return OffbenchError(f"disk full writing {path} ({free:,} bytes free{needs}); free space or write elsewhere (OFFBENCH_HOME, --out)")


def write_error(path: str | Path, exc: OSError) -> OffbenchError | None:
    """One line for an OSError the user can fix (full disk, no permission, read-only, a file where a folder
    should be, a name too long); None for anything else, which stays a bug with its traceback."""
    number = os_error_number(exc)
    if number in _SPACE_ERRNOS:
        return disk_full_error(path)
    if number in USER_FIXABLE_ERRNOS:
        return OffbenchError(f"cannot write {path}: {os.strerror(number)}")
    return None


@contextmanager
def user_fixable_write_errors(path: str | Path) -> Iterator[None]:
    """Turn the OSErrors `write_error` knows into its one-line OffbenchError naming `path`."""
    try:
        yield
    except OSError as exc:
        error = write_error(path, exc)
        if error is None:
            raise
        raise error from None


def check_writable(path: str | Path) -> Path:
    """Fail fast, creating nothing, where folder `path` (existing or not) could not be made or written
    into: a file in the way (an OFFBENCH_HOME or --out that is a file), a read-only or foreign folder.
    Long work (generating, downloading) calls it before it starts."""
    path = Path(path)
    with user_fixable_write_errors(path):  # a name too long fails already here
        existing = next(p for p in (path, *path.parents) if p.exists() or p.is_symlink())
    if not existing.is_dir():
        raise OffbenchError(f"cannot make folder {path}: {existing} is not a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise OffbenchError(f"cannot write into {existing}: read-only or no permission")
    return path


def ensure_dir(path: str | Path) -> Path:
    """mkdir -p, with a one-line error where that is impossible (a file in the way, no permission, ...)."""
    path = check_writable(path)
    with user_fixable_write_errors(path):
        try:
            path.mkdir(parents=True, exist_ok=True)
        except FileNotFoundError:  # a parent that exists and looks writable but makes no folders (/proc)
            raise OffbenchError(f"cannot make folder {path}: its file system does not allow it") from None
    return path


# ---------------------------------------------------------------------------------------- temporaries
def _host_tag() -> str:
    return re.sub(r"[^A-Za-z0-9-]", "-", socket.gethostname().split(".")[0])[:32] or "host"


_TEMPORARY = re.compile(r"\..+\.(?P<pid>\d+)@(?P<host>[A-Za-z0-9-]+)\.[A-Za-z0-9_]+\.tmp")


def temp_prefix(path: Path) -> str:
    """Name prefix of a temporary for `path`: `.<name>.<pid>@<host>.`, so a later run can tell whether the
    process that made it is still alive (see remove_stale_temporaries)."""
    return f".{path.name}.{os.getpid()}@{_host_tag()}."


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale_temporaries(folder: Path) -> list[Path]:
    """Delete the temporaries in `folder` left by processes of this host that died (kill -9, power loss)
    before they could clean up; those of live processes and of other hosts stay. Returns what it removed."""
    removed = []
    host = _host_tag()
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return removed
    for entry in entries:
        found = _TEMPORARY.fullmatch(entry.name)
        if not found or found["host"] != host or _alive(int(found["pid"])):
            continue
        path = Path(entry.path)
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
        removed.append(path)
    return removed


def die_with_parent() -> None:
    """Have the kernel SIGKILL this process when its parent dies (Linux PR_SET_PDEATHSIG; elsewhere a
    no-op), so a killed sweep or launcher leaves no orphan writing to a run directory. Use as a
    Popen preexec_fn, or call it first thing in a child."""
    import ctypes
    import signal
    import sys

    if sys.platform.startswith("linux"):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG = 1


# Set in a child started on lowered kernels, so that it works in place instead of starting another child where the
# variables did not reach the kernels after all
IN_LOWERED_CHILD = "OFFBENCH_LOWERED_KERNELS_CHILD"


def call_on_kernels(module: str, args: list[str], variables: dict[str, str]) -> None:
    """Run `python -m module *args ERROR_FILE` with `variables` set before torch and NumPy load (the SIMD kernels
    `offbench.machine.kernel_variables` chose); the child writes its one-line error to ERROR_FILE and exits 1. Its
    error is raised here as the same one line; the child dies with this process."""
    import subprocess
    import sys

    with tempfile.TemporaryDirectory(prefix="offbench-kernels-") as scratch:
        error = Path(scratch) / "error.txt"
        env = {**os.environ, **variables, IN_LOWERED_CHILD: "1"}
        code = subprocess.call([sys.executable, "-m", module, *args, str(error)], env=env, preexec_fn=die_with_parent)
        message = error.read_text() if error.exists() else ""
    if code != 0:
        raise OffbenchError(message or f"'python -m {module}' on the lowered kernels failed (exit {code})")


def in_lowered_child() -> bool:
    return bool(os.environ.get(IN_LOWERED_CHILD))


def child_main(work: Callable[[list[str]], None], argv: list[str]) -> int:
    """The child's side of `call_on_kernels`: `work(args)`, its OffbenchError written to the last argument."""
    *args, error = argv
    try:
        work(args)
    except OffbenchError as failure:
        Path(error).write_text(str(failure))
        return 1
    return 0


def carry_niceness_into_session() -> None:
    """Give this process's session the process's own nice value (Linux autogroup; elsewhere a no-op).

    Under autogroup scheduling the kernel shares CPU between sessions first and applies nice only inside one, so a
    child started in a new session (start_new_session) would compete at nice 0 with every other session: `nice
    offbench sweep` would leave the user's shell as slow as without it. Raising a session's nice needs no privilege;
    a failure leaves the default. Call it in the child, after setsid (a Popen preexec_fn runs there)."""
    niceness = os.getpriority(os.PRIO_PROCESS, 0) if hasattr(os, "getpriority") else 0
    if niceness <= 0:
        return
    try:
        with open("/proc/self/autogroup", "w") as group:
            group.write(str(niceness))
    except OSError:  # no autogroup (not Linux, or a kernel built without it): plain nice already applies
        pass


def keep_freed_memory() -> bool:
    """Have glibc's malloc keep freed blocks for reuse instead of handing them back to the kernel; True if it took.

    By default blocks over 128 KiB may each be a fresh `mmap`, and the heap's top is trimmed on free, so a tensor of
    that size (a 50-row x 60-token activation is 3 MiB) can be page-faulted in anew on its first write: a Decision
    Transformer's evaluation step over 50 rows spent about a quarter of its time there
    (benchmarks/studies/multitask-speed.md). Fixing both thresholds (mmap 32 MiB, glibc's maximum; trim 1 GiB) lets the allocator
    reuse them; the cost is a process that keeps its peak heap. False where the C library is not glibc."""
    import ctypes
    import sys

    if not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):  # musl and other C libraries: nothing to tune
        return False
    m_trim_threshold, m_mmap_threshold = -1, -3  # <malloc.h>
    return bool(mallopt(m_mmap_threshold, 32 * 1024 * 1024)) and bool(mallopt(m_trim_threshold, 1024 * 1024 * 1024))


def give_default_permissions(path: str | Path) -> None:
    """The mode a plain open()/mkdir() would have given (mkstemp and mkdtemp make files private, 0600/0700,
    which would leave a shared dataset folder unreadable to everyone else)."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(path, (0o777 if Path(path).is_dir() else 0o666) & ~umask)


SPACE_MARGIN = 1 << 20  # bytes kept free beyond what a write needs (file-format overhead, other writers)


def check_space(path: Path, need: int | None) -> None:
    """Refuse a write of about `need` bytes into `path`'s folder that cannot fit, before it starts: HDF5 does
    not recover from a write failing half-way (it may report it only at close, or crash), so a full disk
    must be found first."""
    if need is not None and shutil.disk_usage(path.parent).free < need + SPACE_MARGIN:
        raise disk_full_error(path, need)


def reserve_space(path: Path) -> None:
    """Allocate the disk blocks of file `path` up to its size now (where the system can), so that a full
    disk is an OSError here and not a SIGBUS in a process that later writes to it through a memory map."""
    if hasattr(os, "posix_fallocate"):
        with open(path, "r+b") as file:
            os.posix_fallocate(file.fileno(), 0, os.fstat(file.fileno()).st_size)


@contextmanager
def atomic_path(path: str | Path, need: int | None = None) -> Iterator[Path]:
    """A temp file next to `path` to write into; on success it replaces `path` in one rename, on any
    failure it is removed, so readers never see half a file and an existing file survives a failed write.
    `need` (bytes, if known) is checked against the free space first. A full disk, a read-only folder or a
    name too long become a one-line OffbenchError naming `path`."""
    path = Path(path)
    with user_fixable_write_errors(path):
        ensure_dir(path.parent)
        remove_stale_temporaries(path.parent)
        check_space(path, need)
        fd, name = tempfile.mkstemp(prefix=temp_prefix(path), suffix=".tmp", dir=path.parent)
        os.close(fd)
        tmp = Path(name)
        try:
            yield tmp
            give_default_permissions(tmp)
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise


@contextmanager
def atomic_dir(path: str | Path, need: int | None = None) -> Iterator[Path]:
    """`atomic_path` for a folder: a temp folder next to `path`, renamed to it on success (never replacing
    an existing one), removed on failure."""
    path = Path(path)
    with user_fixable_write_errors(path):
        ensure_dir(path.parent)
        remove_stale_temporaries(path.parent)
        check_space(path, need)
        tmp = Path(tempfile.mkdtemp(prefix=temp_prefix(path), suffix=".tmp", dir=path.parent))
        try:
            yield tmp
            give_default_permissions(tmp)
            os.rename(tmp, path)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise


def atomic_write_bytes(path: str | Path, data: bytes) -> Path:
    """Write via a temp file in the same folder and rename, so readers never see half a file."""
    with atomic_path(path, need=len(data)) as tmp, open(tmp, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    return Path(path)


def atomic_write_text(path: str | Path, text: str) -> Path:
    return atomic_write_bytes(path, text.encode())


def atomic_write_json(path: str | Path, data: Any) -> Path:
    return atomic_write_text(path, json.dumps(data, indent=2, sort_keys=True, allow_nan=False) + "\n")


def read_text(path: str | Path, what: str) -> str:
    """A UTF-8 text file's contents, or a one-line error naming the file (missing, unreadable, not UTF-8)."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise OffbenchError(f"{path}: {what} is not UTF-8 text (byte {exc.start})") from None
    except OSError as exc:
        raise OffbenchError(f"{path}: cannot read {what} ({exc.strerror})") from None


@contextmanager
def progress_bar(
    quiet: bool, label: str, total: int, unit: str = "episodes", completed: int = 0, fields: tuple[str, ...] = ()
) -> Iterator[Callable[..., None]]:
    """A rich progress bar on stderr (nothing when quiet); yields `advance(n, **values)`: n more done, and new
    values for the extra text columns named in `fields` (the trainer's rate and losses)."""
    if quiet:
        yield lambda n, **values: None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    console = Console(stderr=True)
    if not (console.is_terminal or console.is_jupyter):  # a log file or pipe (SLURM, `> log`): plain lines
        yield from _plain_progress(label, total, unit, completed, fields)
        return
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn(unit),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        *(TextColumn(f"{{task.fields[{name}]}}") for name in fields),
    )
    with Progress(*columns, console=console) as bar:
        task = bar.add_task(label, start=True, total=total, completed=completed, visible=True, **{name: "" for name in fields})
        yield lambda n, **values: bar.update(task, advance=n, **values)


PLAIN_PROGRESS_EVERY_S = 30.0
"""Off a terminal, `progress_bar` writes one plain line this often (and one when it ends)."""


def _plain_progress(label: str, total: int, unit: str, completed: int, fields: tuple[str, ...]) -> Iterator[Callable[..., None]]:
    """`progress_bar` off a terminal: every PLAIN_PROGRESS_EVERY_S seconds one line on stderr with the count, the
    rate, the time left and the extra columns' text (the trainer's losses and last evaluation)."""
    import sys
    import time

    start = time.monotonic()
    state = {"done": completed, "last": start, "printed": completed}
    values = {name: "" for name in fields}

    def line(now: float) -> None:
        done, elapsed = state["done"], now - start
        rate = (done - completed) / elapsed if elapsed > 0 else 0.0
        eta = f"ETA {_clock((total - done) / rate)}" if rate > 0 and done < total else ""
        percent = f"{100 * done / total:.0f}%" if total else ""
        extra = " ".join(str(values[name]) for name in fields if name != "rate" and values[name])
        parts = [f"{label}:", f"{done}/{total} {unit}", percent, f"{rate:.3g} it/s", f"elapsed {_clock(elapsed)}", eta, extra]
        print(" ".join(part for part in parts if part), file=sys.stderr, flush=True)
        state["last"], state["printed"] = now, done

    def advance(n: int, **new_values: Any) -> None:
        state["done"] += n
        values.update(new_values)
        now = time.monotonic()
        if now - state["last"] >= PLAIN_PROGRESS_EVERY_S:
            line(now)

    yield advance
    if state["printed"] != state["done"]:
        line(time.monotonic())


def _clock(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def acquire_announced(lock: FileLock, what: str) -> None:
    """Take `lock`, waiting if another process holds it, and then saying once on stderr that it waits for `what`
    (a silent wait looks like a hang)."""
    from filelock import Timeout
    from rich.console import Console

    try:
        lock.acquire(timeout=0)
    except Timeout:
        Console(stderr=True, soft_wrap=True).print(
            f"offbench: waiting for another process {what} to finish ({lock.lock_file})", highlight=False
        )
        lock.acquire()
