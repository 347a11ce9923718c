"""`offbench download` against a real HTTP server on 127.0.0.1 serving files the test made (no outside network)."""

from __future__ import annotations

import hashlib
import json
import re
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

import numpy as np
import pytest
import tomli_w
from helpers import make_store

import offbench
from offbench.data import download as dl
from offbench.data.cards import get_card
from offbench.data.formats import FORMATS, FunctionFormat
from offbench.data.resolve import download, native_path
from offbench.data.store import load_native
from offbench.errors import OffbenchError


# ------------------------------------------------------------------------------------------ server
class FileServer:
    """In-memory files over HTTP/1.1 with Range support, plus faults the tests switch on per path."""

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.cut_after: dict[str, int] = {}  # path -> send this many body bytes once, then drop the connection
        self.errors: dict[str, int] = {}  # path -> answer HTTP 503 this many times first
        self.gates: dict[str, threading.Event] = {}  # path -> send half the body, then wait for the event
        self.log: list[tuple[str, str | None]] = []  # (path, Range header) of every GET
        self.got_request = threading.Event()
        self.port = 0
        self.no_length: set[str] = set()  # paths served without Content-Length: the body ends when the connection closes
        self.streams: dict[str, tuple[int, int | None]] = {}  # path -> (bytes of junk to stream, Content-Length to announce or None)
        self.trickle: dict[str, float] = {}  # path -> send the body one byte per this many seconds
        self.sent: dict[str, int] = {}  # path -> body bytes written so far
        self.stop = threading.Event()  # set at teardown: endless and trickling answers end

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def gets(self, path: str) -> list[str | None]:
        return [rng for p, rng in self.log if p == path]


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:  # keep pytest output clean
        pass

    def do_GET(self) -> None:
        fs: FileServer = self.server.files  # type: ignore[attr-defined]
        path, rng = urlsplit(self.path).path, self.headers.get("Range")
        fs.log.append((path, rng))
        fs.got_request.set()
        data = fs.files.get(path)
        if path in fs.streams:
            self._stream(fs, path, *fs.streams[path])
            return
        if fs.errors.get(path):
            fs.errors[path] -= 1
            self.send_response(503)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if data is None:
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        start = int(re.fullmatch(r"bytes=(\d+)-", rng).group(1)) if rng else 0
        if start >= len(data):
            self.send_response(416)
            self.send_header("Content-Range", f"bytes */{len(data)}")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send_response(206 if rng else 200)
        if rng:
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        body = data[start:]
        if path in fs.no_length:
            self.send_header("Connection", "close")
            self.close_connection = True
        else:
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if path in fs.trickle:
            for k in range(len(body)):
                if fs.stop.is_set():
                    return
                self.wfile.write(body[k : k + 1])
                self.wfile.flush()
                fs.sent[path] = fs.sent.get(path, 0) + 1
                time.sleep(fs.trickle[path])
            return
        if path in fs.cut_after:
            self.wfile.write(body[: fs.cut_after.pop(path)])
            self.wfile.flush()
            self.close_connection = True  # the client sees the connection end short of Content-Length
            return
        if path in fs.gates:
            half = len(body) // 2
            self.wfile.write(body[:half])
            self.wfile.flush()
            fs.gates[path].wait(60)
            body = body[half:]
        self.wfile.write(body)

    def _stream(self, fs: FileServer, path: str, total: int, announce: int | None) -> None:
        """`total` bytes of junk in 64 KiB writes, with `announce` as Content-Length (else none: ends by closing)."""
        self.send_response(200)
        if announce is None:
            self.send_header("Connection", "close")
            self.close_connection = True
        else:
            self.send_header("Content-Length", str(announce))
        self.end_headers()
        block = b"\x5a" * (1 << 16)
        while fs.sent.get(path, 0) < total and not fs.stop.is_set():
            self.wfile.write(block)
            fs.sent[path] = fs.sent.get(path, 0) + len(block)
        self.close_connection = True


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request, client_address) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):  # clients that give up mid-transfer are expected
            super().handle_error(request, client_address)


@pytest.fixture
def server():
    fs = FileServer()
    httpd = _QuietServer(("127.0.0.1", 0), _Handler)
    httpd.files = fs  # type: ignore[attr-defined]
    fs.port = httpd.server_address[1]
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield fs
    fs.stop.set()
    for gate in fs.gates.values():
        gate.set()
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture(autouse=True)
def fast_retries_no_proxy(monkeypatch):
    monkeypatch.setattr(dl, "RETRY_BASE_SECONDS", 0.01)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")  # requests honours proxy variables; the server is local


# ------------------------------------------------------------------------------------------ helpers
def payload(tmp_path: Path, seed: int = 0, steps: int = 6000) -> tuple[bytes, object]:
    """A native dataset file's bytes (large enough to span several network reads) and its store."""
    store = make_store(episode_lengths=(steps, steps // 2), terminal_last=(True, False), seed=seed)
    data = store.save(tmp_path / f"payload{seed}.h5").read_bytes()
    return data, store


def add_card(home: Path, dataset_id: str, files: list[dict], fmt: str = "offbench", **source) -> None:
    card = {"id": dataset_id, "description": "served by the test", "format": fmt, "source": {"files": files} if files else source}
    folder = home / "datasets"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{dataset_id.replace('/', '_')}.toml").write_text(tomli_w.dumps(card))


def entry(url: str, data: bytes | None, sha: bool = True) -> dict:
    out: dict = {"url": url}
    if data is not None:
        out["size"] = len(data)
        if sha:
            out["sha256"] = hashlib.sha256(data).hexdigest()
    return out


def serve(server, home: Path, name: str, data: bytes, served: bytes | None = None) -> None:
    """Serve `served` (default: `data`) at /d/<name>.h5 and register test/<name> with `data`'s size and sha256."""
    server.files[f"/d/{name}.h5"] = data if served is None else served
    add_card(home, f"test/{name}", [entry(server.url(f"/d/{name}.h5"), data)])


def part_file(home: Path, name: str) -> Path:
    """Where an interrupted download of test/<name> keeps what arrived (its folder made)."""
    part = home / "data" / f"test/{name}" / "raw" / f"{name}.h5.part"
    part.parent.mkdir(parents=True)
    return part


def assert_same_arrays(loaded, store) -> None:
    assert loaded.content_sha256() == store.content_sha256()
    np.testing.assert_array_equal(np.asarray(loaded.observations), np.asarray(store.observations))


def leftovers(home: Path, dataset_id: str) -> list[str]:
    raw = home / "data" / dataset_id / "raw"
    return sorted(p.name for p in raw.rglob("*") if p.is_file()) if raw.exists() else []


# ------------------------------------------------------------------------------------------ tests
def test_clean_download_cli_prints_path_then_load_works(tmp_path, server, isolated_home, run_cli):
    data, store = payload(tmp_path)
    serve(server, isolated_home, "clean", data)

    proc = run_cli("download", "test/clean", check=True)
    target = native_path(get_card("test/clean"))
    assert proc.stdout.strip() == str(target)
    loaded = offbench.load("test/clean")
    assert_same_arrays(loaded, store)
    assert loaded.card["id"] == "test/clean" and loaded.card["source"]["files"][0]["sha256"]
    assert leftovers(isolated_home, "test/clean") == []  # raw payload removed once converted
    assert server.gets("/d/clean.h5") == [None]  # one plain GET; the second use found it local


def test_connection_cut_half_way_resumes_with_range(tmp_path, server, isolated_home):
    data, store = payload(tmp_path)
    half = len(data) // 2
    serve(server, isolated_home, "cut", data)
    server.cut_after["/d/cut.h5"] = half

    path = download("test/cut", quiet=True)
    first, resumed = server.gets("/d/cut.h5")
    assert first is None
    start = int(resumed.removeprefix("bytes=").removesuffix("-"))
    assert half - dl.CHUNK_BYTES < start <= half  # kept what arrived, less at most one partly read chunk
    assert_same_arrays(load_native(path), store)


def test_server_errors_are_retried_with_back_off(tmp_path, server, isolated_home, monkeypatch):
    data, store = payload(tmp_path)
    serve(server, isolated_home, "busy", data)
    server.errors["/d/busy.h5"] = 3
    sleeps = []
    monkeypatch.setattr(dl.time, "sleep", sleeps.append)

    assert_same_arrays(offbench.load("test/busy"), store)
    assert sleeps == [0.01, 0.02, 0.04]
    assert server.gets("/d/busy.h5") == [None] * 4

    server.errors["/d/busy.h5"] = 99
    native_path(get_card("test/busy")).unlink()
    with pytest.raises(OffbenchError, match=r"server error \(HTTP 503 Service Unavailable\) \(gave up after 5 attempts\)"):
        offbench.load("test/busy")


def test_part_file_from_an_interrupted_run_is_resumed(tmp_path, server, isolated_home):
    data, store = payload(tmp_path)
    serve(server, isolated_home, "part", data)
    part = part_file(isolated_home, "part")
    part.write_bytes(data[:1000])

    assert_same_arrays(offbench.load("test/part"), store)
    assert server.gets("/d/part.h5") == ["bytes=1000-"]


def test_corrupted_payload_is_rejected_and_nothing_is_left(tmp_path, server, isolated_home):
    data, _ = payload(tmp_path)
    bad = bytearray(data)
    bad[len(bad) // 2] ^= 0xFF
    serve(server, isolated_home, "bad", data, served=bytes(bad))

    with pytest.raises(OffbenchError, match=r"bad\.h5: checksum mismatch .* download discarded") as info:
        offbench.load("test/bad")
    assert "\n" not in str(info.value)
    assert leftovers(isolated_home, "test/bad") == []
    assert not native_path(get_card("test/bad")).exists()


def test_wrong_size_is_rejected_and_nothing_is_left(tmp_path, server, isolated_home):
    data, _ = payload(tmp_path)
    server.files["/d/short.h5"] = data[:-10]
    add_card(isolated_home, "test/short", [{"url": server.url("/d/short.h5"), "size": len(data)}])

    with pytest.raises(OffbenchError, match="size mismatch"):
        offbench.load("test/short")
    assert leftovers(isolated_home, "test/short") == []


def test_404_is_one_line_and_exit_code_2(server, isolated_home, run_cli):
    url = server.url("/nowhere/missing.h5")
    add_card(isolated_home, "test/missing", [{"url": url}])

    proc = run_cli("download", "test/missing")
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"offbench: error: {url}: not found (HTTP 404)"
    assert proc.stdout == ""


def test_two_processes_downloading_one_id_both_succeed_with_one_transfer(tmp_path, server, isolated_home):
    data, store = payload(tmp_path)
    serve(server, isolated_home, "shared", data)
    server.gates["/d/shared.h5"] = gate = threading.Event()
    command = [sys.executable, "-m", "offbench", "download", "test/shared"]
    logs = [tmp_path / "first.err", tmp_path / "second.err"]

    with open(logs[0], "w") as err0, open(logs[1], "w") as err1:
        first = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=err0, text=True)
        assert server.got_request.wait(30), "first download never reached the server"
        second = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=err1, text=True)
        deadline = time.monotonic() + 30
        while "waiting for another process preparing" not in logs[1].read_text() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert "waiting for another process preparing test/shared" in logs[1].read_text()
        gate.set()  # let the first transfer finish while the second holds on the lock
        outs = [first.communicate(timeout=60)[0], second.communicate(timeout=60)[0]]

    assert (first.returncode, second.returncode) == (0, 0), [p.read_text() for p in logs]
    target = native_path(get_card("test/shared"))
    assert [o.strip() for o in outs] == [str(target), str(target)]
    assert server.gets("/d/shared.h5") == [None]
    assert_same_arrays(load_native(target), store)


@pytest.mark.parametrize(
    "url, mirror, expected",
    [
        ("https://rail.eecs.berkeley.edu/datasets/a/b.hdf5", "http://127.0.0.1:8000", "http://127.0.0.1:8000/datasets/a/b.hdf5"),
        ("https://rail.eecs.berkeley.edu/datasets/a/b.hdf5", "http://m.local:81/hf/", "http://m.local:81/hf/datasets/a/b.hdf5"),
        ("http://host:9/x/y.h5?download=1", "https://mirror.org/p", "https://mirror.org/p/x/y.h5?download=1"),
        ("https://host/x.h5", None, "https://host/x.h5"),
    ],
)
def test_apply_mirror(url, mirror, expected):
    assert dl.apply_mirror(url, mirror) == expected


def test_mirror_rewrites_every_url(tmp_path, server, isolated_home, monkeypatch):
    data, store = payload(tmp_path)
    server.files["/mirror/datasets/mirrored.h5"] = data
    add_card(isolated_home, "test/mirrored", [entry("https://data.example.invalid/datasets/mirrored.h5", data)])

    monkeypatch.setenv("OFFBENCH_MIRROR", server.url("/mirror"))
    assert_same_arrays(offbench.load("test/mirrored"), store)
    assert server.gets("/mirror/datasets/mirrored.h5") == [None]
    with pytest.raises(OffbenchError, match="not an http"):
        dl.apply_mirror("https://a/b", "ftp://mirror")


def test_unknown_sha256_is_recorded_then_enforced(tmp_path, server, isolated_home, capsys):
    data, store = payload(tmp_path)
    server.files["/d/nosum.hdf5"] = data
    add_card(isolated_home, "test/nosum", [entry(server.url("/d/nosum.hdf5"), data, sha=False)])
    digest = hashlib.sha256(data).hexdigest()

    assert_same_arrays(offbench.load("test/nosum"), store)
    assert f"unverified first download; recorded sha256 {digest}" in capsys.readouterr().err
    sums = isolated_home / "data" / "test/nosum" / "raw" / "SHA256SUMS"
    assert sums.read_text() == f"{digest}  nosum.hdf5\n"

    native_path(get_card("test/nosum")).unlink()  # force a re-download, now of different bytes
    other, _ = payload(tmp_path, seed=1)
    server.files["/d/nosum.hdf5"] = other[: len(data)].ljust(len(data), b"\0")
    with pytest.raises(OffbenchError, match=r"checksum mismatch .* recorded in .*SHA256SUMS"):
        offbench.load("test/nosum")
    assert leftovers(isolated_home, "test/nosum") == ["SHA256SUMS"]


def test_first_download_is_recorded_only_after_it_converts(tmp_path, server, isolated_home, capsys):
    """An HTML error page served with status 200 must not become the trusted checksum of the card's file."""
    data, store = payload(tmp_path)
    server.files["/d/page.hdf5"] = b"<html><body>Service temporarily unavailable</body></html>"
    add_card(isolated_home, "test/page", [entry(server.url("/d/page.hdf5"), None)])
    with pytest.raises(
        OffbenchError, match=r"page\.hdf5.*not recorded and has been deleted: check the URL, then run `offbench download test/page` again"
    ):
        offbench.load("test/page")
    assert leftovers(isolated_home, "test/page") == [] and "recorded sha256" not in capsys.readouterr().err

    server.files["/d/page.hdf5"] = data  # the server recovers: the next attempt downloads afresh and records
    assert_same_arrays(offbench.load("test/page"), store)
    assert leftovers(isolated_home, "test/page") == ["SHA256SUMS"]
    assert hashlib.sha256(data).hexdigest() in (isolated_home / "data" / "test/page" / "raw" / "SHA256SUMS").read_text()


def test_an_unrecorded_file_from_an_interrupted_first_conversion_is_converted_then_recorded(tmp_path, server, isolated_home):
    data, store = payload(tmp_path)
    add_card(isolated_home, "test/again", [entry(server.url("/d/again.h5"), None)])
    raw = isolated_home / "data" / "test/again" / "raw"
    raw.mkdir(parents=True)
    (raw / "again.h5").write_bytes(data)  # downloaded, then killed before the conversion finished
    assert_same_arrays(offbench.load("test/again"), store)
    assert server.gets("/d/again.h5") == [] and leftovers(isolated_home, "test/again") == ["SHA256SUMS"]


@pytest.mark.parametrize(
    "url",
    ["http://h/a/..%2F..%2F..%2Fx", "http://h/a/%2E%2E", "http://h/a/x%2Fy.h5", "http://h/.hidden.h5", "http://h/" + "a" * 200 + ".h5"],
)
def test_a_url_never_names_a_file_outside_raw(url, isolated_home, tmp_path):
    add_card(isolated_home, "test/escape", [{"url": url}])
    before = sorted(tmp_path.rglob("*"))
    with pytest.raises(OffbenchError, match=r"the file name of URL .* is not a safe file name"):
        offbench.load("test/escape")
    assert sorted(tmp_path.rglob("*")) == before


def test_a_minari_id_never_names_a_folder_outside_raw():
    with pytest.raises(OffbenchError, match=r"component '\.\.' is not a safe file name"):
        dl.minari_urls("mujoco/../../../x-v0")


def test_no_network_errors_are_one_line(isolated_home, monkeypatch):
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    add_card(isolated_home, "test/refused", [{"url": f"http://127.0.0.1:{port}/x.h5"}])
    with pytest.raises(OffbenchError, match=rf"connection refused by 127\.0\.0\.1:{port} \(gave up after 5 attempts\)"):
        offbench.load("test/refused")

    def no_dns(*args, **kwargs):
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", no_dns)  # what an offline machine answers, without asking anyone
    add_card(isolated_home, "test/nodns", [{"url": "https://data.example.invalid/x.h5"}])
    with pytest.raises(OffbenchError, match=r"cannot resolve host data\.example\.invalid \(no network or DNS failure\)"):
        offbench.load("test/nodns")


def test_full_disk_is_one_line_and_leaves_nothing(tmp_path, server, isolated_home):
    data, _ = payload(tmp_path)
    serve(server, isolated_home, "full", data)
    part = part_file(isolated_home, "full")
    part.symlink_to("/dev/full")  # every write to it fails with ENOSPC, as on a full disk

    with pytest.raises(OffbenchError, match=r"disk full writing .*full\.h5\.part"):
        offbench.load("test/full")
    assert not part.is_symlink() and leftovers(isolated_home, "test/full") == []


def test_minari_urls_follow_the_hugging_face_layout():
    urls = dl.minari_urls("mujoco/hopper/medium-v0")
    base = "https://huggingface.co/datasets/farama-minari/mujoco/resolve/main/hopper/medium-v0/data"
    assert urls == [
        (f"{base}/metadata.json", "mujoco/hopper/medium-v0/data/metadata.json"),
        (f"{base}/main_data.hdf5", "mujoco/hopper/medium-v0/data/main_data.hdf5"),
    ]
    with pytest.raises(OffbenchError, match="not of the form"):
        dl.minari_urls("hopper-medium")


def test_minari_source_fetched_through_mirror_into_minari_layout(tmp_path, server, isolated_home, monkeypatch):
    prefix = "/hf/datasets/farama-minari/mujoco/resolve/main/hopper/medium-v0/data"
    metadata = json.dumps({"dataset_id": "mujoco/hopper/medium-v0", "total_episodes": 2}).encode()
    server.files[f"{prefix}/metadata.json"] = metadata
    server.files[f"{prefix}/main_data.hdf5"] = b"hdf5 bytes stand-in"
    add_card(isolated_home, "test/minari-hopper", [], fmt="minari", minari_id="mujoco/hopper/medium-v0")
    seen = []

    def load_minari_folder(path: Path):
        """Stands in for the 'minari' format: checks it is handed a folder in Minari's own layout."""
        seen.append(path)
        assert json.loads((path / "data" / "metadata.json").read_text())["dataset_id"] == "mujoco/hopper/medium-v0"
        assert (path / "data" / "main_data.hdf5").read_bytes() == b"hdf5 bytes stand-in"
        return make_store()

    monkeypatch.setitem(FORMATS, "minari", FunctionFormat("minari", lambda p: False, load_minari_folder, None))
    path = download("test/minari-hopper", mirror=server.url("/hf"), quiet=True)

    assert seen == [isolated_home / "data" / "test/minari-hopper" / "raw" / "mujoco/hopper/medium-v0"]
    assert load_native(path).card["source"] == {"minari_id": "mujoco/hopper/medium-v0"}
    assert sorted(server.gets(f"{prefix}/metadata.json") + server.gets(f"{prefix}/main_data.hdf5"), key=str) == [None, None]
    assert leftovers(isolated_home, "test/minari-hopper") == ["SHA256SUMS"]


def test_download_of_a_recipe_card_generates(isolated_home, monkeypatch):
    from offbench import generators

    def tiny(params, seed, out, quiet):
        return make_store(seed=seed).save(out)

    monkeypatch.setitem(generators.GENERATORS, "test-tiny", tiny)
    add_card(isolated_home, "test/recipe", [], recipe={"generator": "test-tiny", "seed": 3})
    path = download("test/recipe", quiet=True)
    assert path == native_path(get_card("test/recipe"))
    assert_same_arrays(load_native(path), make_store(seed=3))


def test_processes_preparing_one_dataset_at_once_take_turns(isolated_home, monkeypatch):
    """Three seeds started together each open the same recipe card: one generates, the others wait and read it
    (before the lock they wrote the same staging file and died with an HDF5 traceback)."""
    import threading

    from offbench import generators

    calls, second = [], {}

    def tiny(params, seed, out, quiet):
        calls.append(seed)
        if len(calls) == 1:  # the other process arrives while this one is generating
            second["thread"] = threading.Thread(target=lambda: second.setdefault("path", download("test/recipe", quiet=True)))
            second["thread"].start()
            second["thread"].join(timeout=0.5)
            assert second["thread"].is_alive()  # it waits for the lock instead of generating beside us
        return make_store(seed=seed).save(out)

    monkeypatch.setitem(generators.GENERATORS, "test-tiny", tiny)
    add_card(isolated_home, "test/recipe", [], recipe={"generator": "test-tiny", "seed": 3})
    path = download("test/recipe", quiet=True)
    second["thread"].join()
    assert calls == [3] and second["path"] == path
    assert_same_arrays(load_native(path), make_store(seed=3))


# ------------------------------------------------------------------------------------------ bounds
def test_a_body_longer_than_the_card_says_is_cut_off_as_soon_as_it_passes_the_size(server, isolated_home):
    """200 MB for a 1,000-byte card: today it is written in full before "size mismatch"; now not one byte past
    the card's size reaches the disk, and reading stops right there."""
    url = server.url("/d/huge.h5")
    server.streams["/d/huge.h5"] = (200_000_000, None)  # no Content-Length: only the bytes tell
    add_card(isolated_home, "test/huge", [{"url": url, "size": 1000}])
    started = time.monotonic()
    with pytest.raises(OffbenchError) as info:
        offbench.load("test/huge")
    message = str(info.value)
    assert re.fullmatch(
        rf"{re.escape(url)}: the server sent more than the card's size \(at least [\d,]+ bytes, card says 1,000\); download discarded",
        message,
    ), message
    assert time.monotonic() - started < 5 and server.sent.get("/d/huge.h5", 0) < 32_000_000  # stopped, not read to the end
    assert leftovers(isolated_home, "test/huge") == []


def test_a_content_length_beyond_the_card_size_is_refused_before_the_body(server, isolated_home):
    url = server.url("/d/announced.h5")
    server.streams["/d/announced.h5"] = (200_000_000, 200_000_000)
    add_card(isolated_home, "test/announced", [{"url": url, "size": 1000}])
    with pytest.raises(
        OffbenchError,
        match=rf"^{re.escape(url)}: size mismatch \(the server says 200,000,000 bytes, card says 1,000\); download discarded$",
    ):
        offbench.load("test/announced")
    assert server.sent.get("/d/announced.h5", 0) < 32_000_000 and leftovers(isolated_home, "test/announced") == []


def test_an_endless_body_of_no_declared_size_stops_at_the_limit(server, isolated_home, monkeypatch):
    monkeypatch.setattr(dl, "MAX_UNDECLARED_BYTES", 300_000)
    url = server.url("/d/endless.h5")
    server.streams["/d/endless.h5"] = (200_000_000, None)
    add_card(isolated_home, "test/endless", [{"url": url}])
    with pytest.raises(OffbenchError) as info:
        offbench.load("test/endless")
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"{url}: received at least ")
    assert "more than the 300,000 read without a declared size" in message and "OFFBENCH_MAX_DOWNLOAD=" in message
    assert server.sent.get("/d/endless.h5", 0) < 32_000_000
    part = isolated_home / "data" / "test/endless" / "raw" / "endless.h5.part"
    assert 0 < part.stat().st_size <= 300_000 and str(part) in message  # kept, for a run with a higher limit


def test_a_file_past_the_limit_downloads_once_the_user_raises_it_resuming(tmp_path, server, isolated_home, monkeypatch):
    data, store = payload(tmp_path)
    limit = len(data) // 3
    monkeypatch.setattr(dl, "MAX_UNDECLARED_BYTES", limit)
    server.files["/d/big.h5"] = data
    server.no_length.add("/d/big.h5")  # neither the card nor the server declares a size
    add_card(isolated_home, "test/big", [entry(server.url("/d/big.h5"), None)])
    with pytest.raises(OffbenchError, match=rf"more than the {limit:,} read without a declared size"):
        offbench.load("test/big")
    kept = (isolated_home / "data" / "test/big" / "raw" / "big.h5.part").stat().st_size
    assert 0 < kept <= limit

    monkeypatch.setenv("OFFBENCH_MAX_DOWNLOAD", "1M")
    assert_same_arrays(offbench.load("test/big"), store)
    assert server.gets("/d/big.h5") == [None, f"bytes={kept}-"]  # resumed from what the first run kept

    monkeypatch.setenv("OFFBENCH_MAX_DOWNLOAD", "lots")
    with pytest.raises(OffbenchError, match=r"OFFBENCH_MAX_DOWNLOAD='lots' is not a positive number of bytes"):
        dl.undeclared_limit()
    monkeypatch.setenv("OFFBENCH_MAX_DOWNLOAD", "2T")
    assert dl.undeclared_limit() == 2 << 40


def test_a_content_length_past_the_limit_is_refused_before_the_body(tmp_path, server, isolated_home, monkeypatch):
    data, _ = payload(tmp_path)
    monkeypatch.setattr(dl, "MAX_UNDECLARED_BYTES", 1000)
    serve_url = server.url("/d/long.h5")
    server.files["/d/long.h5"] = data
    add_card(isolated_home, "test/long", [entry(serve_url, None)])
    with pytest.raises(
        OffbenchError, match=rf"^{re.escape(serve_url)}: the server says {len(data):,} bytes, more than the 1,000 read without"
    ):
        offbench.load("test/long")
    assert leftovers(isolated_home, "test/long") == []


def test_a_trickling_server_is_given_up_on(tmp_path, server, isolated_home, monkeypatch):
    """One byte every 20 ms never trips a read timeout; the rate over a window does. Today this runs to the end
    of the file (40 s here; weeks for a real one at one byte every 5 s)."""
    monkeypatch.setattr(dl, "RATE_WINDOW_SECONDS", 0.4)
    monkeypatch.setattr(dl, "MIN_RATE_BYTES", 1000)
    monkeypatch.setattr(dl, "MAX_ATTEMPTS", 2)
    data = bytes(range(256)) * 8
    server.files["/d/slow.h5"] = data
    server.trickle["/d/slow.h5"] = 0.02
    add_card(isolated_home, "test/slow", [entry(server.url("/d/slow.h5"), data)])
    outcome: dict = {}

    def attempt() -> None:
        try:
            offbench.load("test/slow")
        except OffbenchError as exc:
            outcome["error"] = str(exc)

    worker = threading.Thread(target=attempt, daemon=True)
    worker.start()
    worker.join(15)
    assert not worker.is_alive(), "still downloading a trickle"
    assert re.fullmatch(
        rf"{re.escape(server.url('/d/slow.h5'))}: too slow \(\d+ bytes/s over [\d.]+ s, below the minimum of 1,000 bytes/s\) "
        r"\(gave up after 2 attempts\)",
        outcome["error"],
    ), outcome
    first, second = server.gets("/d/slow.h5")
    assert first is None and second.startswith("bytes=")  # the slow attempt's bytes were kept and resumed from
    part = isolated_home / "data" / "test/slow" / "raw" / "slow.h5.part"
    assert 0 < part.stat().st_size < len(data)  # kept: the next run resumes
