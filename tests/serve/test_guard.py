"""The header guard's head rewriting (pure); the guard in front of a real Serve app is tested
through ``fusion-ray serve`` in test_serve_cli.py."""

import pytest

from fusion_ray.serve.guard import HeadError, rewrite_head


def _headers(head: bytes) -> list[tuple[bytes, bytes]]:
    lines = head.split(b"\r\n")
    return [tuple(line.split(b": ", 1)) for line in lines[1:] if line]  # type: ignore[misc]


@pytest.mark.parametrize(("head", "line", "connection"), [
    (b"POST /v1/swap HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nConnection: keep-alive\r\n\r\n",
     b"POST /v1/swap HTTP/1.1", b"close"),
    (b"GET /healthz HTTP/1.0\r\nHost: h\r\n\r\n", b"GET /healthz HTTP/1.0", b"close"),
    (b"GET /v1/stream HTTP/1.1\r\nHost: h\r\nConnection: keep-alive, Upgrade\r\nUpgrade: websocket\r\n\r\n",
     b"GET /v1/stream HTTP/1.1", b"keep-alive, Upgrade"),   # a WebSocket keeps its upgrade
])
def test_the_head_asks_for_one_request_per_connection_unless_it_upgrades(head, line, connection):
    out = rewrite_head(head, "10.0.0.7").data
    assert out.split(b"\r\n")[0] == line and out.endswith(b"\r\n\r\n")
    headers = _headers(out)
    assert [v for k, v in headers if k == b"connection"] == [connection]
    assert [v for k, v in headers if k == b"x-forwarded-for"] == [b"10.0.0.7"]


def test_forwarding_headers_from_the_client_are_replaced_and_the_rest_kept():
    head = (b"POST /v1/swap?x=1 HTTP/1.1\r\nHost: h\r\nX-Forwarded-For: 6.6.6.6\r\nForwarded: for=6.6.6.6\r\n"
            b"Authorization: Bearer t\r\nContent-Type: multipart/form-data; boundary=b\r\nContent-Length: 9\r\n\r\n")
    rewritten = rewrite_head(head, "127.0.0.2")
    assert rewritten.path == "/v1/swap"  # no query
    headers = _headers(rewritten.data)
    assert (b"x-forwarded-for", b"127.0.0.2") in headers and (b"forwarded", b"for=6.6.6.6") not in headers
    assert [k for k, _ in headers].count(b"x-forwarded-for") == 1
    assert {(b"host", b"h"), (b"authorization", b"Bearer t"), (b"content-length", b"9"),
            (b"content-type", b"multipart/form-data; boundary=b")} <= set(headers)


@pytest.mark.parametrize("head", [
    b"hello\r\n\r\n",
    b"GET / HTTP/1.1\r\n\r\n",                       # HTTP/1.1 without Host
    b"GET / HTTP/1.1\r\nHost: h\r\nbad header\r\n\r\n",
])
def test_a_head_that_is_not_http_is_refused(head):
    with pytest.raises(HeadError):
        rewrite_head(head, "127.0.0.1")


def test_the_guard_answers_heads_it_refuses_without_reaching_the_upstream():
    """408 for a head not complete in time, 431 for one over the size limit, 400 for one that is
    not HTTP; none of them opens a connection upstream (port 9 here: nothing listens)."""
    import socket
    import time

    from fusion_ray.serve.guard import GuardConfig, HeaderGuard, start_guard
    from tests.procs import free_port

    port = free_port()
    start_guard(HeaderGuard(("127.0.0.1", 9), GuardConfig(header_timeout_s=0.5, max_header_bytes=4096)),
                "127.0.0.1", port)

    def answer(data: bytes) -> tuple[bytes, float]:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            start = time.monotonic()
            sock.sendall(data)
            reply = b""
            while chunk := sock.recv(4096):  # until the guard closes
                reply += chunk
            return reply, time.monotonic() - start

    reply, waited = answer(b"GET / HTTP/1.1\r\nHost: x\r\n")
    assert reply.startswith(b"HTTP/1.1 408") and 0.4 < waited < 5
    assert _json_error(reply) == "request_timeout"
    reply = answer(b"GET / HTTP/1.1\r\nX-Big: " + b"a" * 8000)[0]
    assert reply.startswith(b"HTTP/1.1 431") and _json_error(reply) == "headers_too_large"
    reply = answer(b"hello\r\n\r\n")[0]
    assert reply.startswith(b"HTTP/1.1 400") and _json_error(reply) == "bad_request"


def _json_error(reply: bytes) -> str:
    """The ``error`` code of a whole response with a JSON body."""
    import json

    head, _, body = reply.partition(b"\r\n\r\n")
    assert b"content-type: application/json" in head.lower()
    return str(json.loads(body)["error"])


def test_a_closed_stalled_upload_survives_a_garbage_collection():
    """Stalled uploads whose clients leave (as the guard test's 9 do) while the upstream has not
    answered: each connection's handler is then referenced only by its own awaits (Python 3.11's
    streams hold it weakly), and a garbage collection must not destroy it mid-await (it did:
    "Task was destroyed but it is pending", "coroutine ignored GeneratorExit" in serve's stderr)."""
    import gc
    import logging
    import socket
    import threading
    import time

    from fusion_ray.serve.guard import GuardConfig, HeaderGuard, start_guard
    from tests.procs import free_port

    upstream = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []
    threading.Thread(target=lambda: [accepted.append(upstream.accept()[0]) for _ in range(3)], daemon=True).start()
    destroyed: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: destroyed.append(record.getMessage())  # type: ignore[method-assign]
    logging.getLogger("asyncio").addHandler(handler)
    port = free_port()
    start_guard(HeaderGuard(upstream.getsockname(), GuardConfig(header_timeout_s=5)), "127.0.0.1", port)
    upload = (b"POST /v1/swap HTTP/1.1\r\nHost: x\r\nContent-Type: multipart/form-data; boundary=b\r\n"
              b"Content-Length: 100000\r\n\r\n--b\r\n")
    try:
        for _ in range(3):
            with socket.create_connection(("127.0.0.1", port), timeout=5) as client:
                client.sendall(upload)
        deadline = time.monotonic() + 5
        while len(accepted) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        for conn in accepted:  # the head, the body's start, then the client's end passed on
            conn.settimeout(5)
            while conn.recv(4096):
                pass
        gc.collect()
        time.sleep(0.2)
    finally:
        logging.getLogger("asyncio").removeHandler(handler)
        for conn in accepted:
            conn.close()
        upstream.close()
    assert len(accepted) == 3
    assert not destroyed, destroyed[:1]


class _SlowUpstream:
    """A loopback HTTP server that reads each request's head, then answers 200 after ``delay_s``
    (or never, while ``hold`` is set), counting the requests it got."""

    def __init__(self, delay_s: float) -> None:
        import socket
        import threading

        self.delay_s = delay_s
        self.hold = threading.Event()
        self.paths: list[str] = []
        self.server = socket.create_server(("127.0.0.1", 0))
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        import threading

        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn) -> None:  # type: ignore[no-untyped-def]
        import time

        with conn:
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = conn.recv(4096)
                if not chunk:
                    return
                head += chunk
            self.paths.append(head.split(b" ")[1].decode())
            time.sleep(self.delay_s)
            while self.hold.is_set():
                time.sleep(0.02)
            conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok")


def _get(port: int, path: str) -> bytes:
    import socket

    with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        reply = b""
        while chunk := sock.recv(4096):
            reply += chunk
        return reply


def test_the_guard_refuses_over_its_cap_with_json_and_always_passes_monitoring():
    """With 3 places, 8 requests at once: 3 reach the upstream, 5 get a JSON 503 overloaded with
    Retry-After and never reach it; /metrics, asked meanwhile, still passes."""
    from concurrent.futures import ThreadPoolExecutor

    from fusion_ray.serve.guard import GuardConfig, HeaderGuard, start_guard
    from tests.procs import free_port

    upstream = _SlowUpstream(delay_s=1.0)
    port = free_port()
    guard = HeaderGuard(upstream.server.getsockname(), GuardConfig(max_requests=3, ops_reserve=2, retry_after_s=4))
    start_guard(guard, "127.0.0.1", port)
    with ThreadPoolExecutor(8) as pool:
        replies = list(pool.map(lambda _: _get(port, "/v1/swap"), range(8)))
        assert _get(port, "/metrics").startswith(b"HTTP/1.1 200")  # while the swaps are held upstream
    ok = [r for r in replies if r.startswith(b"HTTP/1.1 200")]
    refused = [r for r in replies if r.startswith(b"HTTP/1.1 503")]
    assert len(ok) == 3 and len(refused) == 5
    assert all(_json_error(r) == "overloaded" and b"retry-after: 4" in r for r in refused)
    assert upstream.paths.count("/v1/swap") == 3 and guard.refused == 5
    upstream.server.close()


def test_a_stopping_guard_refuses_new_requests_and_answers_those_left_waiting():
    """drain(): a new request gets a JSON 503 shutting_down; refuse_waiting(): a request the
    upstream has not begun to answer gets the same 503, and the guard has none in flight after."""
    import threading
    import time

    from fusion_ray.serve.guard import GuardConfig, HeaderGuard, start_guard
    from tests.procs import free_port

    upstream = _SlowUpstream(delay_s=0.0)
    upstream.hold.set()
    port = free_port()
    guard = HeaderGuard(upstream.server.getsockname(), GuardConfig())
    start_guard(guard, "127.0.0.1", port)
    waiting: list[bytes] = []
    thread = threading.Thread(target=lambda: waiting.append(_get(port, "/v1/swap")))
    thread.start()
    deadline = time.monotonic() + 10
    while guard.in_flight() < 1 and time.monotonic() < deadline:
        time.sleep(0.02)
    guard.drain()
    new = _get(port, "/v1/swap")
    assert new.startswith(b"HTTP/1.1 503") and _json_error(new) == "shutting_down"
    assert not guard.wait_idle(0.2)  # the held request is still in flight
    guard.refuse_waiting()
    thread.join(10)
    assert waiting and waiting[0].startswith(b"HTTP/1.1 503") and _json_error(waiting[0]) == "shutting_down"
    assert guard.in_flight() == 0
    upstream.hold.clear()
    upstream.server.close()


def test_an_unreachable_upstream_is_a_json_503_and_a_reader_that_stops_frees_its_place():
    """Serve's proxy gone (port 9: nothing listens): a JSON 503 ``unavailable``, not a silent close.
    A client that never reads a large answer is disconnected after write_timeout_s, and its place
    is free again."""
    import socket
    import threading
    import time

    from fusion_ray.serve.guard import GuardConfig, HeaderGuard, start_guard
    from tests.procs import free_port

    port = free_port()
    start_guard(HeaderGuard(("127.0.0.1", 9), GuardConfig()), "127.0.0.1", port)
    reply = _get(port, "/v1/swap")
    assert reply.startswith(b"HTTP/1.1 503") and _json_error(reply) == "unavailable"

    big = socket.create_server(("127.0.0.1", 0))

    def flood() -> None:
        conn, _ = big.accept()
        with conn:
            conn.recv(4096)
            conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: 67108864\r\n\r\n")
            with contextlib.suppress(OSError):
                while True:
                    conn.sendall(b"x" * (1 << 20))

    import contextlib

    threading.Thread(target=flood, daemon=True).start()
    port = free_port()
    guard = HeaderGuard(big.getsockname(), GuardConfig(write_timeout_s=0.5))
    start_guard(guard, "127.0.0.1", port)
    client = socket.socket()
    client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    client.connect(("127.0.0.1", port))
    client.sendall(b"GET /v1/big HTTP/1.1\r\nHost: x\r\n\r\n")  # and never reads
    deadline = time.monotonic() + 10
    while guard.in_flight() < 1 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert guard.in_flight() == 1
    assert guard.wait_idle(10.0), "the stalled reader still holds its place"
    client.close()
    big.close()


def test_the_stop_closes_a_request_whose_answer_has_begun():
    """refuse_waiting(): a long answer already under way (a stream) is closed, not left open past
    the stop; the client keeps what it got."""
    import socket
    import threading
    import time

    from fusion_ray.serve.guard import GuardConfig, HeaderGuard, start_guard
    from tests.procs import free_port

    upstream = socket.create_server(("127.0.0.1", 0))
    release = threading.Event()

    def stream() -> None:
        conn, _ = upstream.accept()
        with conn:
            conn.recv(4096)
            conn.sendall(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n")
            release.wait(20)

    threading.Thread(target=stream, daemon=True).start()
    port = free_port()
    guard = HeaderGuard(upstream.getsockname(), GuardConfig())
    start_guard(guard, "127.0.0.1", port)
    with socket.create_connection(("127.0.0.1", port), timeout=20) as client:
        client.sendall(b"GET /v1/stream HTTP/1.1\r\nHost: x\r\n\r\n")
        got = b""
        while b"hello" not in got:
            got += client.recv(4096)
        guard.drain()
        started = time.monotonic()
        guard.refuse_waiting()
        while chunk := client.recv(4096):
            got += chunk
        assert time.monotonic() - started < 5 and guard.in_flight() == 0
    assert got.startswith(b"HTTP/1.1 200") and b"503" not in got
    release.set()
    upstream.close()
