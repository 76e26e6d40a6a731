"""Model downloads through the store from a real HTTP server on 127.0.0.1: full, resumed,
restarted, interrupted, corrupt, missing, unreachable, already present."""

from __future__ import annotations

import hashlib
import re
import socket
import threading
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from fusion_ray.errors import DownloadError, ModelIntegrityError
from fusion_ray.models.download import part_path
from fusion_ray.models.hashes import (
    hash_file_path,
    read_hash_record,
    record_path,
    write_hash_record,
)
from fusion_ray.models.registry import get_spec
from fusion_ray.models.store import LocatedModel
from tests.models.store_helpers import NAME, PAYLOAD, crc_of, make_store, place


@dataclass
class ServerState:
    files: dict[str, bytes] = field(default_factory=dict)
    requests: list[dict[str, Any]] = field(default_factory=list)
    honour_range: bool = True
    truncate_at: int | None = None  # send only this many body bytes, then hang up


class _Handler(BaseHTTPRequestHandler):
    server: Any

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        state: ServerState = self.server.state
        entry: dict[str, Any] = {"path": self.path, "range": self.headers.get("Range"), "sent": 0}
        state.requests.append(entry)
        body = state.files.get(self.path)
        if body is None:
            self.send_error(404, "Not Found")
            return
        start, status = 0, 200
        if entry["range"] and state.honour_range:
            match = re.fullmatch(r"bytes=(\d+)-", entry["range"])
            assert match is not None
            start = int(match.group(1))
            if start >= len(body):
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{len(body)}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            status = 206
        rest = body[start:]
        self.send_response(status)
        self.send_header("Content-Length", str(len(rest)))
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
        self.end_headers()
        if state.truncate_at is not None and not self.path.endswith(".hash"):
            rest = rest[: state.truncate_at]
        self.wfile.write(rest)
        entry["sent"] = len(rest)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass


@dataclass
class LocalAssets:
    state: ServerState
    opener: Callable[..., Any]

    def publish(self, name: str, data: bytes, crc: str | None = None) -> None:
        spec = get_spec(name)
        self.state.files[_url_path(spec.url)] = data
        self.state.files[_url_path(spec.hash_url)] = (crc or crc_of(data)).encode()

    def paths(self) -> list[str]:
        return [r["path"] for r in self.state.requests]


def _url_path(url: str) -> str:
    return "/" + url.split("://", 1)[1].split("/", 1)[1]


@pytest.fixture
def assets() -> Iterator[LocalAssets]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.state = ServerState()  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def opener(request: urllib.request.Request, timeout: float) -> Any:
        local_url = base + _url_path(request.full_url)
        return direct.open(urllib.request.Request(local_url, headers=dict(request.header_items())), timeout=timeout)

    try:
        yield LocalAssets(server.state, opener)  # type: ignore[attr-defined]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def test_full_download(tmp_path: Path, assets: LocalAssets) -> None:
    assets.publish(NAME, PAYLOAD)
    store = make_store(tmp_path / "models")
    calls: list[tuple[int, int | None]] = []
    located = store.download(NAME, opener=assets.opener, progress=lambda d, t: calls.append((d, t)))
    path = tmp_path / "models" / "inswapper_128.onnx"
    assert located == LocatedModel(NAME, path, "verified", hashlib.sha256(PAYLOAD).hexdigest())
    assert path.read_bytes() == PAYLOAD
    assert hash_file_path(path).read_text().strip() == crc_of(PAYLOAD)
    record = read_hash_record(path)
    assert record is not None and record.source == "download" and record.sha256 == located.sha256
    assert not part_path(path).exists()
    # The .hash is fetched first, then the model, from the release's URL layout.
    assert assets.paths() == [
        "/facefusion/facefusion-assets/releases/download/models-3.0.0/inswapper_128.hash",
        "/facefusion/facefusion-assets/releases/download/models-3.0.0/inswapper_128.onnx",
    ]
    # Progress is monotone, knows the total, and ends at it.
    done = [d for d, _ in calls]
    assert len(calls) > 3 and done == sorted(done)
    assert {t for _, t in calls} == {len(PAYLOAD)}
    assert calls[-1] == (len(PAYLOAD), len(PAYLOAD))
    assert store.locate(NAME).status == "verified"


def test_resume_from_part_sends_range_and_appends(tmp_path: Path, assets: LocalAssets) -> None:
    assets.publish(NAME, PAYLOAD)
    store = make_store(tmp_path)
    path = store.path_for(NAME)
    have = 40_000
    part_path(path).write_bytes(PAYLOAD[:have])
    calls: list[tuple[int, int | None]] = []
    store.download(NAME, opener=assets.opener, progress=lambda d, t: calls.append((d, t)))
    assert path.read_bytes() == PAYLOAD
    model_request = assets.state.requests[-1]
    assert model_request["range"] == f"bytes={have}-"
    assert model_request["sent"] == len(PAYLOAD) - have
    assert calls[0] == (have, len(PAYLOAD)) and calls[-1] == (len(PAYLOAD), len(PAYLOAD))


def test_server_ignoring_range_restarts_from_zero(tmp_path: Path, assets: LocalAssets) -> None:
    assets.publish(NAME, PAYLOAD)
    assets.state.honour_range = False
    store = make_store(tmp_path)
    path = store.path_for(NAME)
    part_path(path).write_bytes(b"x" * 5000)  # not even a prefix of the file: must be discarded
    store.download(NAME, opener=assets.opener)
    assert path.read_bytes() == PAYLOAD
    assert assets.state.requests[-1]["sent"] == len(PAYLOAD)


def test_complete_part_answered_416_is_finished(tmp_path: Path, assets: LocalAssets) -> None:
    assets.publish(NAME, PAYLOAD)
    store = make_store(tmp_path)
    path = store.path_for(NAME)
    part_path(path).write_bytes(PAYLOAD)
    assert store.download(NAME, opener=assets.opener).status == "verified"
    assert path.read_bytes() == PAYLOAD and not part_path(path).exists()


def test_interrupted_download_keeps_part_and_resumes(tmp_path: Path, assets: LocalAssets) -> None:
    assets.publish(NAME, PAYLOAD)
    assets.state.truncate_at = 30_000
    store = make_store(tmp_path)
    path = store.path_for(NAME)
    with pytest.raises(DownloadError, match="resume"):
        store.download(NAME, opener=assets.opener)
    assert not path.exists()
    assert part_path(path).stat().st_size == 30_000
    assets.state.truncate_at = None
    store.download(NAME, opener=assets.opener)
    assert path.read_bytes() == PAYLOAD
    assert assets.state.requests[-1]["range"] == "bytes=30000-"


def test_crc_mismatch_leaves_no_file(tmp_path: Path, assets: LocalAssets) -> None:
    assets.publish(NAME, PAYLOAD, crc="deadbeef")
    store = make_store(tmp_path)
    path = store.path_for(NAME)
    with pytest.raises(ModelIntegrityError) as info:
        store.download(NAME, opener=assets.opener)
    assert "deadbeef" in str(info.value) and crc_of(PAYLOAD) in str(info.value)
    assert not path.exists() and not part_path(path).exists() and not record_path(path).exists()


def test_404_on_model_is_download_error(tmp_path: Path, assets: LocalAssets) -> None:
    assets.publish(NAME, PAYLOAD)
    del assets.state.files[_url_path(get_spec(NAME).url)]
    store = make_store(tmp_path)
    with pytest.raises(DownloadError) as info:
        store.download(NAME, opener=assets.opener)
    assert get_spec(NAME).url in str(info.value) and "404" in str(info.value)
    assert not store.path_for(NAME).exists()


def test_404_on_hash_stops_before_the_model(tmp_path: Path, assets: LocalAssets) -> None:
    store = make_store(tmp_path)
    with pytest.raises(DownloadError, match=re.escape(get_spec(NAME).hash_url)):
        store.download(NAME, opener=assets.opener)
    assert assets.paths() == [_url_path(get_spec(NAME).hash_url)]


def test_unreachable_server_is_download_error(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again before use: nothing listens there
    direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def opener(request: urllib.request.Request, timeout: float) -> Any:
        return direct.open(f"http://127.0.0.1:{port}/x.hash", timeout=timeout)

    with pytest.raises(DownloadError, match=re.escape(get_spec(NAME).hash_url)):
        make_store(tmp_path).download(NAME, opener=opener)


def test_present_and_verified_is_not_downloaded_again_unless_forced(
    tmp_path: Path, assets: LocalAssets
) -> None:
    assets.publish(NAME, PAYLOAD)
    store = make_store(tmp_path)
    store.download(NAME, opener=assets.opener)
    before = len(assets.state.requests)
    assert store.download(NAME, opener=assets.opener).status == "verified"
    assert len(assets.state.requests) == before
    store.download(NAME, opener=assets.opener, force=True)
    assert len(assets.state.requests) == before + 2


def test_present_unverified_file_matching_crc_is_kept(tmp_path: Path, assets: LocalAssets) -> None:
    assets.publish(NAME, PAYLOAD)
    store = make_store(tmp_path)
    path = place(store)
    located = store.download(NAME, opener=assets.opener)
    assert located.status == "crc32-verified" and located.path == path
    assert hash_file_path(path).read_text().strip() == crc_of(PAYLOAD)
    assert assets.paths() == [_url_path(get_spec(NAME).hash_url)]  # no model transfer
    assert store.locate(NAME).status == "verified"


def test_present_corrupt_file_is_replaced(tmp_path: Path, assets: LocalAssets) -> None:
    assets.publish(NAME, PAYLOAD)
    store = make_store(tmp_path)
    path = place(store)
    write_hash_record(path, "download")
    path.write_bytes(b"corrupted")
    assert store.download(NAME, opener=assets.opener).status == "verified"
    assert path.read_bytes() == PAYLOAD
