"""Request limits: the API error type, the declared body length, upload and in-flight limiting.

Everything here is plain Python (no Ray, no FastAPI) so it can be tested without a server.
Failures raise :class:`ApiError`, which the ingress turns into a JSON error body
``{"error": <code>, "detail": <message>}`` with the error's HTTP status.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager

from fusion_ray.errors import FusionRayError

ECHO_LIMIT = 64
"""Most characters of a client's own text (field names, ids, file names) echoed in an error."""


def clip(text: str, limit: int = ECHO_LIMIT) -> str:
    """``text`` cut to ``limit`` characters (with an ellipsis) before it is echoed to a client."""
    return text if len(text) <= limit else text[:limit] + "\u2026"


class ApiError(FusionRayError):
    """An error answered to the client: HTTP status, a short code and a message."""

    def __init__(self, status: int, code: str, detail: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(detail)
        self.status = status
        self.code = code
        self.detail = detail
        self.headers = dict(headers or {})

    def body(self) -> dict[str, str]:
        return {"error": self.code, "detail": self.detail}


# ---------------------------------------------------------------------- body
def check_content_length(header: str | None, limit: int) -> int | None:
    """The declared body length; 413 when it is over ``limit``, 400 when it is not a number."""
    if header is None:
        return None
    value = header.strip()
    if not value.isdigit():
        raise ApiError(400, "bad_request", f"Content-Length {clip(header)!r} is not a non-negative integer")
    length = int(value)
    if length > limit:
        raise ApiError(413, "body_too_large", f"request body of {length} bytes is over the limit of {limit} bytes")
    return length


# ------------------------------------------------------------------ admission
class Refused(ApiError):
    """A 503 before any work (a limit was reached); ``reason`` labels the rejection metric."""

    def __init__(self, reason: str, detail: str, retry_after_s: int) -> None:
        super().__init__(503, "overloaded", f"{detail}; retry later", {"Retry-After": str(retry_after_s)})
        self.reason = reason


class Overloaded(Refused):
    """The ingress is at its in-flight limit."""

    def __init__(self, limit: int, retry_after_s: int) -> None:
        super().__init__("inflight_limit", f"the service is at its limit of {limit} requests in flight",
                         retry_after_s)


class InflightLimiter:
    """Admit at most ``limit`` requests at once; the next one is refused at once (no queue).

    Used from one event loop (the ingress replica's); no lock needed.
    """

    def __init__(self, limit: int, retry_after_s: int) -> None:
        self.limit = limit
        self.retry_after_s = retry_after_s
        self.inflight = 0
        self.peak = 0

    @contextmanager
    def slot(self) -> Iterator[None]:
        if self.inflight >= self.limit:
            raise Overloaded(self.limit, self.retry_after_s)
        self.inflight += 1
        self.peak = max(self.peak, self.inflight)
        try:
            yield
        finally:
            self.inflight -= 1


class UploadLimiter:
    """Bodies being received at once: at most ``limit`` in all and ``per_client`` per client address.

    A request holds an upload slot while its body arrives and only then asks for an in-flight
    (compute) slot, so slow or stalled uploads cannot lock compute out; the per-client bound
    keeps one address from taking every upload slot. Refusals are 503 with Retry-After. One
    event loop (the ingress replica's): no lock needed.
    """

    def __init__(self, limit: int, per_client: int, retry_after_s: int) -> None:
        self.limit = limit
        self.per_client = per_client
        self.retry_after_s = retry_after_s
        self.active = 0
        self.by_client: dict[str, int] = {}

    @contextmanager
    def slot(self, client: str) -> Iterator[None]:
        if self.active >= self.limit:
            raise Refused("upload_limit", f"the service is receiving its limit of {self.limit} uploads",
                          self.retry_after_s)
        mine = self.by_client.get(client, 0)
        if mine >= self.per_client:
            raise Refused("client_upload_limit",
                          f"your address has its limit of {self.per_client} uploads in progress", self.retry_after_s)
        self.active += 1
        self.by_client[client] = mine + 1
        try:
            yield
        finally:
            self.active -= 1
            left = self.by_client[client] - 1
            if left:
                self.by_client[client] = left
            else:
                del self.by_client[client]


async def wait_for(awaitable, timeout_s: float, stage: str):  # type: ignore[no-untyped-def]
    """Await ``awaitable`` for at most ``timeout_s``; 504 naming the stage when it takes longer."""
    async def _await():  # type: ignore[no-untyped-def]
        return await awaitable

    try:
        return await asyncio.wait_for(_await(), timeout_s)
    except TimeoutError as exc:
        cancel = getattr(awaitable, "cancel", None)
        if callable(cancel):
            cancel()
        raise ApiError(504, "stage_timeout", f"the {stage} stage did not answer within {timeout_s:g} s") from exc
