"""Helpers of the serve tests: a forged image header, an ingress core without Ray, and the HTTP
client calls of the service tests (tests/serve/test_service.py): requests, raw and stalled uploads,
/metrics."""

from __future__ import annotations

import http.client
import socket
import struct
import time
import zlib

import cv2
import numpy as np
import requests

from fusion_ray.runners.inline import Engine
from fusion_ray.serve.ingress import IngressCore
from fusion_ray.serve.metrics import parse_exposition
from fusion_ray.serve.settings import parse_settings

TOKEN = "test-token-42"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def forged_png(width: int, height: int) -> bytes:
    """A PNG signature, an IHDR claiming width x height, an empty IDAT and IEND (a bomb's header:
    a real bomb has its chunk stream too, and Pillow reads on to the first IDAT)."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + _png_chunk(b"IHDR", ihdr) + _png_chunk(b"IDAT", b"")
            + _png_chunk(b"IEND", b""))


def ingress_core_with(args: dict) -> IngressCore:
    """An ingress core over these settings, with no deployment handles (OpenCV's thread count kept:
    the core sizes OpenCV's pool for its replica, not for this process)."""
    threads = cv2.getNumThreads()
    core = IngressCore(parse_settings(args), None, None, None, None)
    cv2.setNumThreads(threads)
    return core


def ingress_core(**limits: object) -> IngressCore:
    """An ingress core with these limits and no token."""
    return ingress_core_with({"limits": limits, "auth": {"token_env": None}})


def variant(engine: Engine, **updates) -> Engine:
    """The loaded engine's models under a different config (selection, enhancement)."""
    cfg = engine.cfg.model_copy(update=updates)
    return Engine(cfg, engine.models)


def png_bytes(image: np.ndarray) -> bytes:
    ok, data = cv2.imencode(".png", image)
    assert ok
    return data.tobytes()


def register(base: str, *images: bytes) -> requests.Response:
    files = [("image", (f"s{i}.jpg", data, "image/jpeg")) for i, data in enumerate(images)]
    return requests.post(f"{base}/v1/sources", files=files, headers=AUTH, timeout=60)


def swap(base: str, target: bytes, headers=AUTH, sources: tuple[bytes, ...] = (), **fields) -> requests.Response:
    files = [("target", ("target.img", target, "application/octet-stream"))]
    files += [("source", (f"s{i}.jpg", data, "image/jpeg")) for i, data in enumerate(sources)]
    return requests.post(f"{base}/v1/swap", files=files, data={k: str(v) for k, v in fields.items()},
                         headers=headers, timeout=60)


def decoded(response: requests.Response) -> np.ndarray:
    image = cv2.imdecode(np.frombuffer(response.content, np.uint8), cv2.IMREAD_UNCHANGED)
    assert image is not None, response.content[:200]
    return image


def assert_error(response: requests.Response, status: int, code: str) -> dict:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error", "detail"} and body["error"] == code, body
    return body


def metrics(base: str) -> dict:
    response = requests.get(f"{base}/metrics", timeout=30)
    assert response.status_code == 200, (response.headers, response.text)
    assert response.headers["content-type"].startswith("text/plain")
    return parse_exposition(response.text)


def _raw_request(base: str, headers: dict[str, str], chunks=None) -> tuple[int, dict, bytes]:
    host, port = base.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    conn.putrequest("POST", "/v1/swap")
    for key, value in {**AUTH, **headers}.items():
        conn.putheader(key, value)
    conn.endheaders()
    try:
        for chunk in chunks or []:
            conn.send(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        if chunks is not None:
            conn.send(b"0\r\n\r\n")
    except OSError:
        pass  # the server may stop reading once it has refused the body
    response = conn.getresponse()
    result = response.status, dict(response.getheaders()), response.read()
    conn.close()
    return result


def _inflight(base: str) -> float:
    return sum(v for _, v in metrics(base)["fusion_ray_inflight_requests"])


def _wait_until(predicate, timeout_s: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.2)
    return False


def _uploads(base: str) -> float:
    return sum(v for _, v in metrics(base)["fusion_ray_uploads_in_progress"])


def _stalled_upload(base: str, source_address: str) -> socket.socket:
    """A connection that sends the headers and about 150 bytes of a 100 kB body, then stalls."""
    host, port = base.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=30, source_address=(source_address, 0))
    head = (f"POST /v1/swap HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {TOKEN}\r\n"
            "Content-Type: multipart/form-data; boundary=xyz\r\nContent-Length: 100000\r\n\r\n")
    part = b'--xyz\r\nContent-Disposition: form-data; name="target"; filename="t.png"\r\n\r\n'
    sock.sendall(head.encode() + part + b"x" * (150 - len(part)))
    return sock


def _replies(socks: list[socket.socket]) -> list[bytes]:
    """What the server already answered on stalled connections (for failure messages)."""
    out = []
    for sock in socks:
        sock.setblocking(False)
        try:
            out.append(sock.recv(300))
        except BlockingIOError:
            pass
        finally:
            sock.setblocking(True)
    return out

