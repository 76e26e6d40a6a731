"""An object store that stalls: an HTTP proxy in front of the tests' S3 server that forwards
every request, except those it is told to stall: it reads them, never answers, and closes
the connection when released (a store that stops answering in the middle of a job).

Requests are signed for the proxy's address (the ``Host`` header), and forwarded with that
header as it is, so the S3 server's signature check passes.
"""

from __future__ import annotations

import http.client
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

Rule = Callable[[str, str], bool]
"""(method, path with query) -> whether to stall the request."""

_HOP_HEADERS = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade"}


class StallProxy:
    """``endpoint_url`` forwards to ``upstream``; requests matching ``stall`` hang until ``release()``."""

    def __init__(self, upstream: str) -> None:
        self.upstream = urlsplit(upstream).netloc
        self.rule: Rule = lambda method, path: False
        self.released = threading.Event()
        self.stalled: list[str] = []
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def _any(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                if proxy.rule(self.command, self.path):
                    proxy.stalled.append(f"{self.command} {self.path}")
                    proxy.released.wait(120)
                    self.close_connection = True
                    return
                conn = http.client.HTTPConnection(proxy.upstream, timeout=60)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_HEADERS}
                conn.request(self.command, self.path, body=body, headers=headers)
                reply = conn.getresponse()
                data = reply.read()
                self.send_response(reply.status, reply.reason)
                for key, value in reply.getheaders():
                    # a HEAD answer's length is the object's, not of the (empty) body
                    if key.lower() not in _HOP_HEADERS and (key.lower() != "content-length" or self.command == "HEAD"):
                        self.send_header(key, value)
                if self.command != "HEAD":
                    self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                conn.close()

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _any

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def release(self) -> None:
        self.released.set()

    def close(self) -> None:
        self.release()
        self.server.shutdown()
        self.server.server_close()


@contextmanager
def stall_proxy(upstream: str, rule: Rule) -> Iterator[StallProxy]:
    proxy = StallProxy(upstream)
    proxy.rule = rule
    try:
        yield proxy
    finally:
        proxy.close()


def upload_parts(method: str, path: str) -> bool:
    """The parts of multipart uploads (the store stalls once an upload has begun)."""
    return method == "PUT" and "partNumber=" in path and "uploadId=" in path
