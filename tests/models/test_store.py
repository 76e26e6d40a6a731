"""The model store: directory resolution, integrity levels, and downloads from a local server."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import random
import re
import socket
import threading
import urllib.request
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from fusion_ray.errors import DownloadError, ModelError, ModelIntegrityError, ModelMissingError
from fusion_ray.models.registry import get_spec
from fusion_ray.models.store import (
    LocatedModel,
    ModelStore,
    crc32_file,
    hash_file_path,
    part_path,
    read_hash_record,
    record_path,
    resolve_models_dir,
    sha256_file,
    write_hash_record,
)

STORE_LOGGER = "fusion_ray.models.store"
NAME = "inswapper_128"
CHUNK = 16 * 1024
PAYLOAD = random.Random(1234).randbytes(100_000)  # about 7 chunks


def crc_of(data: bytes) -> str:
    return format(zlib.crc32(data) & 0xFFFFFFFF, "08x")


def make_store(root: Path, **kwargs: Any) -> ModelStore:
    return ModelStore(root, chunk_size=CHUNK, timeout_s=5.0, **kwargs)


def place(store: ModelStore, data: bytes = PAYLOAD, name: str = NAME) -> Path:
    path = store.path_for(name)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


# --------------------------------------------------------------------------- resolution


def test_resolve_order_explicit_then_env_then_cache(tmp_path: Path) -> None:
    env = {"FUSION_RAY_MODELS": str(tmp_path / "env"), "XDG_CACHE_HOME": str(tmp_path / "xdg")}
    assert resolve_models_dir(tmp_path / "cli", env) == tmp_path / "cli"
    assert resolve_models_dir(None, env) == tmp_path / "env"
    del env["FUSION_RAY_MODELS"]
    assert resolve_models_dir(None, env) == tmp_path / "xdg" / "fusion_ray" / "models"
    assert resolve_models_dir(None, {}) == Path.home() / ".cache" / "fusion_ray" / "models"
    # Empty values count as unset; a relative XDG_CACHE_HOME is invalid per the XDG spec.
    assert resolve_models_dir(None, {"FUSION_RAY_MODELS": "", "XDG_CACHE_HOME": "rel"}) == (
        Path.home() / ".cache" / "fusion_ray" / "models"
    )


def test_path_for_and_overrides(tmp_path: Path) -> None:
    override = tmp_path / "elsewhere" / "det.onnx"
    store = ModelStore(tmp_path / "models", {"scrfd_2.5g": override})
    assert store.path_for("inswapper_128") == tmp_path / "models" / "inswapper_128.onnx"
    assert store.path_for("scrfd_2.5g") == override
    assert hash_file_path(store.path_for("gfpgan_1.4")).name == "gfpgan_1.4.hash"
    with pytest.raises(ModelError, match="known models"):
        ModelStore(tmp_path, {"scrfd_10g": override})
    with pytest.raises(ModelError, match="known models"):
        store.path_for("nope")


# --------------------------------------------------------------------------- hashing


def test_streamed_hashes_match_whole_file_hashes(tmp_path: Path) -> None:
    path = tmp_path / "blob"
    path.write_bytes(PAYLOAD)
    assert sha256_file(path, chunk_size=1000) == hashlib.sha256(PAYLOAD).hexdigest()
    assert crc32_file(path, chunk_size=1000) == crc_of(PAYLOAD)
    assert re.fullmatch(r"[0-9a-f]{8}", crc32_file(path))


def test_write_hash_record_is_complete_and_leaves_no_temp_files(tmp_path: Path) -> None:
    path = tmp_path / "model.onnx"
    path.write_bytes(PAYLOAD)
    digest = write_hash_record(path, "generated")
    raw = json.loads(record_path(path).read_text())
    stat = path.stat()
    assert raw == {
        "sha256": hashlib.sha256(PAYLOAD).hexdigest(),
        "size": stat.st_size,
        "mtime_ns": stat.st_mtime_ns,
        "source": "generated",
    }
    assert digest == raw["sha256"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.onnx", "model.onnx.sha256"]
    with pytest.raises(ValueError):
        write_hash_record(path, "guessed")  # type: ignore[arg-type]


# --------------------------------------------------------------------------- locate / verify


def test_missing_model_message_names_path_and_fix(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    with pytest.raises(ModelMissingError) as info:
        store.locate(NAME)
    message = str(info.value)
    assert str(tmp_path / "inswapper_128.onnx") in message
    assert f"fusion-ray models download {NAME}" in message
    assert "recorded on download" in message
    # With the published .hash already there, the message quotes the expected CRC32.
    hash_file_path(store.path_for(NAME)).write_text("0badc0de")
    with pytest.raises(ModelMissingError, match="0badc0de"):
        store.locate(NAME)


def test_hand_placed_file_is_unverified_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = make_store(tmp_path)
    path = place(store)
    with caplog.at_level(logging.WARNING, logger=STORE_LOGGER):
        located = store.locate(NAME)
    assert located == LocatedModel(NAME, path, "unverified")
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    text = warnings[0].getMessage()
    assert "could not be checked offline" in text
    assert get_spec(NAME).hash_url in text
    assert not record_path(path).exists()  # nothing vouches for it, so nothing is recorded


def test_hash_file_beside_gives_crc32_verified_and_writes_record(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    path = place(store)
    hash_file_path(path).write_text(crc_of(PAYLOAD) + "\n")
    located = store.locate(NAME)
    assert located.status == "crc32-verified"
    assert located.sha256 == hashlib.sha256(PAYLOAD).hexdigest()
    record = read_hash_record(path)
    assert record is not None and record.source == "crc32-verified"
    assert record.sha256 == located.sha256
    assert store.locate(NAME).status == "verified"  # the record now takes the fast path


def test_hash_file_mismatch_raises(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    path = place(store)
    hash_file_path(path).write_text("00000000")
    with pytest.raises(ModelIntegrityError) as info:
        store.locate(NAME)
    assert "00000000" in str(info.value) and crc_of(PAYLOAD) in str(info.value)
    assert not record_path(path).exists()


def test_tampered_file_after_record_raises(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    path = place(store)
    expected = write_hash_record(path, "download")
    assert store.locate(NAME).status == "verified"
    path.write_bytes(PAYLOAD[:-10] + b"tampered!!" + b"more")  # content, size and mtime change
    with pytest.raises(ModelIntegrityError) as info:
        store.locate(NAME)
    message = str(info.value)
    assert expected in message
    assert sha256_file(path) in message
    assert f"fusion-ray models download {NAME}" in message


def test_fast_path_trusts_size_and_mtime_but_verify_rehashes(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    path = place(store)
    write_hash_record(path, "download")
    stat = path.stat()
    path.write_bytes(bytes(len(PAYLOAD)))  # same size, different content
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # and the old mtime
    assert store.locate(NAME).status == "verified"  # documented limit of the fast path
    with pytest.raises(ModelIntegrityError):
        store.verify(NAME)


def test_touched_file_with_same_content_stays_verified(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    path = place(store)
    write_hash_record(path, "download")
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 5_000_000_000))
    assert store.locate(NAME).status == "verified"
    record = read_hash_record(path)
    assert record is not None
    assert record.mtime_ns == path.stat().st_mtime_ns and record.source == "download"


def test_verify_checks_crc_too_and_reports_sha(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    path = place(store)
    write_hash_record(path, "download")
    hash_file_path(path).write_text(crc_of(PAYLOAD))
    assert store.verify(NAME) == LocatedModel(
        NAME, path, "verified", hashlib.sha256(PAYLOAD).hexdigest()
    )
    hash_file_path(path).write_text("12345678")
    with pytest.raises(ModelIntegrityError, match="12345678"):
        store.verify(NAME)


def test_status_rows(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    place(store, name="inswapper_128")
    place(store, name="gfpgan_1.4")
    write_hash_record(store.path_for("gfpgan_1.4"), "download")
    place(store, name="arcface_w600k_r50")
    write_hash_record(store.path_for("arcface_w600k_r50"), "download")
    store.path_for("arcface_w600k_r50").write_bytes(b"corrupt")
    rows = {row["name"]: row for row in store.status_rows()}
    assert set(rows) == {"scrfd_2.5g", "arcface_w600k_r50", "inswapper_128", "inswapper_128_fp16", "gfpgan_1.4"}
    assert rows["scrfd_2.5g"]["present"] is False and rows["scrfd_2.5g"]["status"] == "missing"
    assert rows["scrfd_2.5g"]["size"] is None
    assert rows["inswapper_128"]["status"] == "unverified"
    assert rows["inswapper_128"]["size"] == len(PAYLOAD)
    assert rows["gfpgan_1.4"]["status"] == "verified" and rows["gfpgan_1.4"]["kind"] == "enhancer"
    assert rows["arcface_w600k_r50"]["status"] == "corrupt"
    assert "non-commercial" in rows["inswapper_128"]["licence"]
    for row in rows.values():
        assert {"name", "kind", "file", "present", "status", "size", "licence"} <= set(row)


def test_real_detector_override_when_available(scrfd_path: Path, tmp_path: Path) -> None:
    store = ModelStore(tmp_path, {"scrfd_2.5g": scrfd_path})
    located = store.verify("scrfd_2.5g")
    assert located.path == scrfd_path
    assert located.sha256 == "041f73f47371333d1d17a6fee6c8ab4e6aecabefe398ff32cca4e2d5eaee0af9"


# --------------------------------------------------------------------------- download


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
