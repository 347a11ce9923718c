"""Fetch a registered dataset over HTTP(S), verify it, and convert it to the native format.

What `fetch_card` guarantees, whatever the network does:

* Streamed to `<name>.part` next to the final file, with a rich progress bar on a terminal.
* An interrupted transfer resumes from the `.part` file with an HTTP `Range` request (within one call,
  after a retry, and across calls, e.g. after Ctrl-C). A server that ignores `Range` gets a restart.
* Connection errors, timeouts and HTTP 5xx/429 are retried with exponential back-off
  (`RETRY_BASE_SECONDS * 2**k`, `MAX_ATTEMPTS` in a row without progress).
* Bounded: a body longer than the card's `size` is refused as soon as the server's Content-Length says so,
  or else as soon as the bytes received pass it (one-line error naming the URL and both sizes; the part is
  discarded: it is not the card's file). Without a card `size`, at most `$OFFBENCH_MAX_DOWNLOAD` bytes are
  read (default `MAX_UNDECLARED_BYTES`, 512 GiB; bytes, or K / M / G / T, e.g. `OFFBENCH_MAX_DOWNLOAD=2T`):
  a larger Content-Length is refused before the body, an endless body stops at the limit, in one line,
  keeping the part, so a run with a higher limit resumes from it. A transfer slower than
  `MIN_RATE_BYTES` (1 KiB/s) over `RATE_WINDOW_SECONDS` (60 s) is cut and retried like a timeout, and
  counts towards `MAX_ATTEMPTS` even though it grew the part: a server trickling a byte every few seconds
  is given up on after about `MAX_ATTEMPTS` windows (read timeouts alone never fire on it).
* sha256 and size are checked *before* the file gets its final name (fsync, then atomic rename):
  no half or unverified file ever sits under the final name. A wrong checksum deletes the payload.
* One lock per dataset id (`filelock`, taken by `resolve.ensure_local` around downloading and generating
  alike): a second process preparing the same id waits, then finds the dataset done.
* 404, other HTTP errors, a wrong checksum, a full disk and no network each end in a one-line
  `OffbenchError` naming the URL or file.

A card file entry without `sha256` (D4RL publishes none) is trusted on first use, once it has proved
readable: its sha256 is recorded in `$OFFBENCH_HOME/data/<id>/raw/SHA256SUMS` (the `sha256sum` format)
only after the payload converted to the native file, and every later re-download is checked against
that record. A first download that does not convert (say, an HTML error page served with status 200)
is deleted unrecorded, so the next attempt starts clean.

Sources (see `offbench.data.cards`):

* `files = [{url, sha256, size}, ...]`: each file is saved as `raw/<basename of the URL path>`, a name
  that must be one safe path component (`offbench.utils.safe_component`) once percent-decoded.
* `minari_id = "<namespace>/<name>-v<N>"`, e.g. `"mujoco/hopper/medium-v0"`, optional
  `revision` (a branch or commit, default `main`). Minari 0.5 keeps its remote datasets on the
  Hugging Face hub (`minari.storage.remotes.HuggingFaceStorage`, default remote
  `hf://farama-minari`): the first component of the id names a dataset repository
  `farama-minari/<first>`, the rest is a folder in it. The two files are

      https://huggingface.co/datasets/farama-minari/<first>/resolve/<revision>/<rest>/data/metadata.json
      https://huggingface.co/datasets/farama-minari/<first>/resolve/<revision>/<rest>/data/main_data.hdf5

  e.g. `.../farama-minari/mujoco/resolve/main/hopper/medium-v0/data/main_data.hdf5`. They are placed
  in Minari's own layout, `raw/<minari_id>/data/{metadata.json, main_data.hdf5}` (so `raw/` is a
  valid `MINARI_DATASETS_PATH`), and the folder `raw/<minari_id>` is handed to the "minari" format.

Mirrors (`mirror=` / `--mirror` / `$OFFBENCH_MIRROR`): the mirror's scheme, host and port replace
the URL's, and the mirror's path, if any, is put in front of the URL's path:
`apply_mirror("https://huggingface.co/datasets/x/f.h5", "http://m.local:8080/hf")` is
`"http://m.local:8080/hf/datasets/x/f.h5"`.

After the download, the raw payload is read with `offbench.data.formats.load_path(raw, card.format)`,
saved atomically as the native file at `target` with the card in its attributes, and deleted
(`SHA256SUMS` stays). Any registered format plugs in without a change here.
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import shutil
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit, urlunsplit

import requests
import urllib3
from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn, TransferSpeedColumn

from offbench.data.cards import DatasetCard
from offbench.errors import OffbenchError
from offbench.utils import atomic_write_text, disk_full_error, ensure_dir, os_error_number, safe_component

MAX_ATTEMPTS = 5  # attempts in a row that did not grow the .part file before giving up
RETRY_BASE_SECONDS = 0.5  # back-off: 0.5, 1, 2, 4 s
CHUNK_BYTES = 1 << 16  # urllib3 drops a partly read chunk when the link breaks: keep the loss small
TIMEOUT_SECONDS = (10, 60)  # (connect, read between bytes)
MAX_UNDECLARED_BYTES = 512 << 30  # a file whose size nobody declares (XLand-100B, ~326 GB, has none); $OFFBENCH_MAX_DOWNLOAD
MAX_DOWNLOAD_ENV = "OFFBENCH_MAX_DOWNLOAD"
MIN_RATE_BYTES = 1024  # bytes per second, measured over RATE_WINDOW_SECONDS: slower is cut and retried
RATE_WINDOW_SECONDS = 60.0
MINARI_REMOTE = "https://huggingface.co/datasets/farama-minari"
MINARI_FILES = ("metadata.json", "main_data.hdf5")
SUMS_FILE = "SHA256SUMS"

_stderr = Console(stderr=True, highlight=False, soft_wrap=True)


@dataclass(frozen=True)
class RemoteFile:
    """One file to fetch: where from, where to (relative to raw/), and what it must hash to if known."""

    url: str
    relpath: str
    sha256: str | None = None
    size: int | None = None


class _Retryable(Exception):
    """A failure worth another attempt (network hiccup, 5xx); the message is the one-line reason."""


class _TooSlow(_Retryable):
    """A transfer below the minimum rate: retried, but counted as a failure even though the part grew."""


_SIZE_SUFFIXES = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def undeclared_limit() -> int:
    """Bytes read at most from a file of no declared size: `$OFFBENCH_MAX_DOWNLOAD` (bytes, or with a K / M / G / T
    suffix, powers of 1024), else MAX_UNDECLARED_BYTES."""
    text = os.environ.get(MAX_DOWNLOAD_ENV, "").strip()
    if not text:
        return MAX_UNDECLARED_BYTES
    found = re.fullmatch(r"(\d+)\s*([KMGT]?)(?:i?B)?", text, re.IGNORECASE)
    if not found or int(found[1]) == 0:
        raise OffbenchError(f"{MAX_DOWNLOAD_ENV}={text!r} is not a positive number of bytes (e.g. 800G, 2T, 1000000)")
    return int(found[1]) * _SIZE_SUFFIXES[found[2].upper()]


def _blocks(response: requests.Response):
    """The body as it arrives, in blocks of at most CHUNK_BYTES: whatever one read returned, so a trickle is seen
    byte by byte (requests' iter_content waits for a whole chunk). urllib3's errors become requests' ones."""
    raw = response.raw
    if not hasattr(raw, "read1"):  # urllib3 1.x: whole chunks only
        yield from response.iter_content(CHUNK_BYTES)
        return
    try:
        while block := raw.read1(CHUNK_BYTES, decode_content=True):
            yield block
    except urllib3.exceptions.ReadTimeoutError as exc:
        raise requests.ConnectionError(exc) from exc
    except urllib3.exceptions.HTTPError as exc:  # ProtocolError (cut short of Content-Length), DecodeError, SSLError
        raise requests.ConnectionError(exc) from exc


# ---------------------------------------------------------------------------------------- URLs
def apply_mirror(url: str, mirror: str | None) -> str:
    """Replace scheme + host (+ port) of `url` by the mirror's, prefixing the mirror's path, if any."""
    if not mirror:
        return url
    parts, base = urlsplit(url), urlsplit(mirror)
    if base.scheme not in ("http", "https") or not base.netloc:
        raise OffbenchError(f"mirror {mirror!r} is not an http(s) URL with a host")
    return urlunsplit((base.scheme, base.netloc, base.path.rstrip("/") + parts.path, parts.query, ""))


def minari_urls(minari_id: str, revision: str = "main") -> list[tuple[str, str]]:
    """(url, relpath under raw/) of a Minari remote dataset's two files; see the module docstring."""
    if not re.fullmatch(r"[\w.-]+(/[\w.-]+)*/[\w.-]+-v\d+", minari_id):
        raise OffbenchError(f"minari_id {minari_id!r} is not of the form <namespace>/<name>-v<N>")
    for part in minari_id.split("/"):  # the id is also the folder under raw/
        safe_component(part, f"minari_id {minari_id!r}: component")
    repo, path_in_repo = minari_id.split("/", 1)
    return [(f"{MINARI_REMOTE}/{repo}/resolve/{revision}/{path_in_repo}/data/{name}", f"{minari_id}/data/{name}") for name in MINARI_FILES]


def remote_files(card: DatasetCard) -> list[RemoteFile]:
    """The files a `files` or `minari_id` card needs, with the raw/ path each one goes to."""
    where = str(card.card_path or card.id)
    source = card.source
    if source.minari_id is not None:
        return [RemoteFile(url, rel) for url, rel in minari_urls(source.minari_id, source.revision or "main")]
    if source.files is None:
        raise OffbenchError(f"{where}: source '{card.source_kind}' is not downloadable")
    files = []
    for entry in source.files:
        name = unquote(urlsplit(entry.url).path.rsplit("/", 1)[-1])
        if not name:
            raise OffbenchError(f"{where}: URL {entry.url} does not end in a file name")
        safe_component(name, f"{where}: the file name of URL {entry.url}")
        files.append(RemoteFile(entry.url, name, entry.sha256, entry.size))
    names = [f.relpath for f in files]
    if len(set(names)) != len(names):
        raise OffbenchError(f"{where}: two source files share a file name ({', '.join(names)})")
    return files


# ---------------------------------------------------------------------------------------- checksums
def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(CHUNK_BYTES):
            digest.update(block)
    return digest.hexdigest()


def read_sums(raw: Path) -> dict[str, str]:
    """relpath -> sha256 recorded by earlier unverified downloads (`sha256sum` format)."""
    path = raw / SUMS_FILE
    if not path.is_file():
        return {}
    sums = {}
    for line in path.read_text().splitlines():
        digest, _, rel = line.partition("  ")
        if len(digest) == 64 and rel:
            sums[rel] = digest
    return sums


def record_sums(raw: Path, digests: dict[str, str]) -> None:
    """Add `digests` (relpath -> sha256 of a first download that no card verifies) to `raw`'s record, which
    `read_sums` gives later downloads to be checked against."""
    sums = read_sums(raw) | digests
    atomic_write_text(raw / SUMS_FILE, "".join(f"{d}  {r}\n" for r, d in sorted(sums.items())))


# ---------------------------------------------------------------------------------------- errors
def _network_reason(exc: BaseException, url: str) -> str:
    """One line saying why a connection failed: DNS, refused, timeout, or the bare reason."""
    host = urlsplit(url).netloc
    seen, todo = set(), [exc]
    while todo:  # walk requests -> urllib3 -> socket causes
        cause = todo.pop()
        if cause is None or id(cause) in seen:
            continue
        seen.add(id(cause))
        if isinstance(cause, socket.gaierror):
            return f"cannot resolve host {urlsplit(url).hostname} (no network or DNS failure)"
        if isinstance(cause, ConnectionRefusedError):
            return f"connection refused by {host}"
        if isinstance(cause, (socket.timeout, requests.Timeout)):
            return f"{host} timed out"
        todo += [getattr(cause, "reason", None), cause.__cause__, cause.__context__]
        todo += [a for a in getattr(cause, "args", ()) if isinstance(a, BaseException)]
    return f"network error talking to {host} ({str(exc).splitlines()[0][:160]})"


# ---------------------------------------------------------------------------------------- one file
def _attempt(session: requests.Session, url: str, part: Path, expected_size: int | None, progress: Progress, task) -> None:
    """One GET of `url` into `part`, resuming from its current size. Raises _Retryable on hiccups (_TooSlow on
    a trickle), OffbenchError past the declared size or, with none, past `undeclared_limit()`."""
    offset = _resume_offset(part, expected_size)
    if offset is None:
        return  # already complete, verify next
    headers = {"Accept-Encoding": "identity"}  # byte offsets must match the stored bytes
    if offset:
        headers["Range"] = f"bytes={offset}-"
    try:
        with session.get(url, headers=headers, stream=True, timeout=TIMEOUT_SECONDS) as response:
            if _answered_complete(response, url, part, offset, expected_size):
                return
            if response.status_code == 200:
                offset = 0  # no range support (or a fresh start): rewrite from the beginning
            limit = _check_announced_size(response, url, part, offset, expected_size, progress, task)
            _write_body(response, url, part, offset, expected_size, limit, progress, task)
    except requests.RequestException as exc:
        raise _Retryable(f"{url}: {_network_reason(exc, url)}") from None


def _resume_offset(part: Path, expected_size: int | None) -> int | None:
    """Where to resume: the bytes a part already holds (a part past the declared size starts over); None when
    it already holds the declared size."""
    offset = part.stat().st_size if part.is_file() else 0
    if expected_size is not None and offset > expected_size:
        part.unlink()
        offset = 0
    return None if expected_size is not None and offset == expected_size else offset


def _answered_complete(response: requests.Response, url: str, part: Path, offset: int, expected_size: int | None) -> bool:
    """The answer's status: True when it says the part is already whole (416 to a resume, no size declared);
    _Retryable for what a later attempt may not meet, OffbenchError for what it would."""
    status = response.status_code
    if status == 416 and offset:
        if expected_size is None:
            return True
        part.unlink()
        raise _Retryable(f"{url}: server refused to resume (HTTP 416); starting over")
    if status == 404:
        raise OffbenchError(f"{url}: not found (HTTP 404)")
    if status >= 500 or status == 429:
        raise _Retryable(f"{url}: server error (HTTP {status} {response.reason})")
    if status not in (200, 206):
        raise OffbenchError(f"{url}: HTTP {status} {response.reason}")
    if status == 206 and not response.headers.get("Content-Range", "").startswith(f"bytes {offset}-"):
        part.unlink()
        raise _Retryable(f"{url}: server answered a resume with the wrong range; starting over")
    return False


def _check_announced_size(
    response: requests.Response, url: str, part: Path, offset: int, expected_size: int | None, progress: Progress, task
) -> int:
    """The byte limit of the body (the declared size, else `undeclared_limit()`), after refusing a body the server
    announces past it or that the disk has no room for; starts the progress bar at `offset`."""
    length = response.headers.get("Content-Length")
    announced = offset + int(length) if length and length.isdigit() else None
    total = expected_size or announced
    limit = expected_size if expected_size is not None else undeclared_limit()
    if announced is not None and announced > limit:
        if expected_size is None:
            raise _undeclared_too_large(url, part, announced, limit, "the server says")
        part.unlink(missing_ok=True)
        raise OffbenchError(f"{url}: size mismatch (the server says {announced:,} bytes, card says {expected_size:,}); download discarded")
    if total and shutil.disk_usage(part.parent).free < total - offset:
        raise disk_full_error(part, total - offset)
    progress.update(task, completed=offset, total=total)
    return limit


def _write_body(
    response: requests.Response, url: str, part: Path, offset: int, expected_size: int | None, limit: int, progress: Progress, task
) -> None:
    """Append the body to `part` (from `offset`), never a byte past `limit`, and give up (_TooSlow) on a body
    slower than MIN_RATE_BYTES over a window; a full disk removes the part and says so."""
    try:
        with open(part, "ab" if offset else "wb") as handle:
            received, window_start, window_bytes = offset, time.monotonic(), 0
            for block in _blocks(response):
                if received + len(block) > limit:  # not one byte past the limit reaches the disk
                    handle.flush()
                    raise _past_limit(url, part, received + len(block), expected_size, limit)
                handle.write(block)
                received += len(block)
                progress.advance(task, len(block))
                window_bytes += len(block)
                elapsed = time.monotonic() - window_start
                if elapsed >= RATE_WINDOW_SECONDS:
                    if window_bytes < MIN_RATE_BYTES * elapsed:
                        raise _TooSlow(
                            f"{url}: too slow ({window_bytes / elapsed:,.0f} bytes/s over {elapsed:.3g} s, "
                            f"below the minimum of {MIN_RATE_BYTES:,} bytes/s)"
                        )
                    window_start, window_bytes = time.monotonic(), 0
            handle.flush()
            os.fsync(handle.fileno())
    except OSError as exc:
        if os_error_number(exc) == errno.ENOSPC:
            part.unlink(missing_ok=True)
            raise disk_full_error(part) from None
        raise


def _undeclared_too_large(url: str, part: Path, total: int, limit: int, who: str) -> OffbenchError:
    kept = (
        f"; the {part.stat().st_size:,} bytes received are kept in {part}, and a run with a higher limit resumes from them"
        if part.is_file() and part.stat().st_size
        else ""
    )
    return OffbenchError(
        f"{url}: {who} {total:,} bytes, more than the {limit:,} read without a declared size; if the file is really that large, "
        f"raise the limit (e.g. {MAX_DOWNLOAD_ENV}={-(-max(total, 2 * limit) // (1 << 30))}G){kept}"
    )


def _past_limit(url: str, part: Path, received: int, expected_size: int | None, limit: int) -> OffbenchError:
    """The error for a body that goes past the card's size (the part is not the card's file: discarded) or, with
    no declared size, past the limit (the part is kept: a higher limit resumes from it)."""
    if expected_size is None:
        return _undeclared_too_large(url, part, received, limit, "received at least")
    part.unlink(missing_ok=True)
    return OffbenchError(
        f"{url}: the server sent more than the card's size (at least {received:,} bytes, card says {expected_size:,}); download discarded"
    )


def _download(session: requests.Session, url: str, part: Path, expected_size: int | None, progress: Progress, task) -> None:
    """Fetch `url` into `part` completely, retrying with exponential back-off while attempts fail.

    An attempt that grew the part file resets the count, so a flaky link still finishes a large file;
    one that did not (refused, 5xx, or a server without Range support cutting at the same byte) counts.
    """
    failures = 0
    while True:
        before = part.stat().st_size if part.is_file() else 0
        try:
            _attempt(session, url, part, expected_size, progress, task)
            return
        except _Retryable as exc:
            grew = part.is_file() and part.stat().st_size > before
            failures = 0 if grew and not isinstance(exc, _TooSlow) else failures + 1
            if failures >= MAX_ATTEMPTS:
                raise OffbenchError(f"{exc} (gave up after {MAX_ATTEMPTS} attempts)") from None
            time.sleep(RETRY_BASE_SECONDS * 2 ** max(failures - 1, 0))


def fetch_file(session: requests.Session, remote: RemoteFile, raw: Path, mirror: str | None, progress: Progress) -> tuple[Path, str | None]:
    """Download one file to raw/<relpath>, checked against the card's or the recorded sha256 before it
    gets its final name. Caller holds the lock. Returns the path and, for a file with no checksum on
    record yet, its sha256, for the caller to record once the payload has converted."""
    dest = raw / remote.relpath
    url = apply_mirror(remote.url, mirror)
    recorded = read_sums(raw).get(remote.relpath)
    expected = remote.sha256 or recorded
    if dest.is_file():
        if expected is None:  # an earlier first download that never got to convert: try it again
            return dest, file_sha256(dest)
        if file_sha256(dest) == expected:
            return dest, None  # verified when it got its name (a stale or tampered copy is fetched again)
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    task = progress.add_task(remote.relpath, total=remote.size)
    _download(session, url, part, remote.size, progress, task)

    size = part.stat().st_size
    if remote.size is not None and size != remote.size:
        part.unlink()
        raise OffbenchError(f"{url}: size mismatch (got {size:,} bytes, card says {remote.size:,}); download discarded")
    digest = file_sha256(part)
    if expected is not None and digest != expected:
        part.unlink()
        source = (
            "the card"
            if remote.sha256
            else (f"recorded in {raw / SUMS_FILE} at the first download; if that record is wrong, delete its line there and run again")
        )
        raise OffbenchError(f"{url}: checksum mismatch (sha256 {digest[:16]}..., expected {expected[:16]}... {source}); download discarded")
    os.replace(part, dest)
    return dest, (digest if expected is None else None)


# ---------------------------------------------------------------------------------------- a card
def fetchable_files(card: DatasetCard) -> list[RemoteFile]:
    """The card's remote files, once the checks that need neither disk nor network pass (a known format, safe
    file names): a bad card is a one-line error before a long download, and before anything is written."""
    from offbench.data.formats import FORMATS

    if card.format not in FORMATS:
        raise OffbenchError(f"{card.card_path or card.id}: unknown format '{card.format}' (known: {', '.join(FORMATS)})")
    return remote_files(card)


def fetch_card(card: DatasetCard, target: Path, mirror: str | None = None, quiet: bool = False) -> Path:
    """Download a `files` / `minari_id` card's payload, verify it, convert it to the native file `target`. The
    caller (`resolve.ensure_local`) holds the dataset's lock, so no other process writes the same files."""
    from offbench.data.formats import load_path
    from offbench.data.store import EpisodeStore

    target = Path(target)
    mirror = mirror or os.environ.get("OFFBENCH_MIRROR") or None
    remotes = fetchable_files(card)
    raw = ensure_dir(target.parent / "raw")
    show = not quiet and sys.stderr.isatty()
    columns = (TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(), TimeRemainingColumn())
    with requests.Session() as session, Progress(*columns, console=_stderr, disable=not show) as progress:
        session.headers["User-Agent"] = "offbench (dataset download)"
        fetched = [fetch_file(session, remote, raw, mirror, progress) for remote in remotes]
    paths = [path for path, _ in fetched]
    unrecorded = {remote.relpath: digest for remote, (_, digest) in zip(remotes, fetched) if digest is not None}
    if card.source.minari_id is not None:
        payload = raw / card.source.minari_id
    else:
        payload = paths[0] if len(paths) == 1 else raw
    try:
        store = load_path(payload, card.format)
    except OffbenchError as exc:
        if not unrecorded:
            raise
        for relpath in unrecorded:  # never trusted: the next attempt downloads afresh
            (raw / relpath).unlink(missing_ok=True)
        hint = "the URL and --mirror" if mirror else "the URL"
        raise OffbenchError(
            f"{exc}; this first download was not recorded and has been deleted: check {hint}, then run `offbench download {card.id}` again"
        ) from None
    in_place = not isinstance(store, EpisodeStore)  # too large to convert (XLand): the download is the dataset
    if not in_place:
        store.card = {**card.to_dict(), "import": store.card}
        store.save(target)
    if unrecorded:  # only a payload that opened in its format is trusted on first use
        record_sums(raw, unrecorded)
        for relpath, digest in unrecorded.items():
            _stderr.print(f"offbench: unverified first download; recorded sha256 {digest} of {relpath} in {raw / SUMS_FILE}")
    if in_place:
        return payload
    _remove_payload(paths, raw)
    return target


def _remove_payload(paths: list[Path], raw: Path) -> None:
    """Delete the raw files (the native file now holds the data) and the folders they leave empty.
    SHA256SUMS stays, so a re-download is checked against what was recorded the first time."""
    for path in paths:
        path.unlink()
        folder = path.parent
        while folder != raw and not any(folder.iterdir()):
            folder.rmdir()
            folder = folder.parent
