"""The live-stream wire protocol (``GET /v1/stream``, WebSocket), exactly as the README states it.

1. The client's first message is text JSON, :class:`StartMessage`. Every field but
   ``source_id`` is optional; the token travels here (a browser cannot set WebSocket headers).
2. The server answers ``{"type": "ready", "stream_id", "deadline_ms", "stand_in_models", ...}``
   or refuses with ``{"type": "error", "code", "message"}`` and closes: bad or missing token
   1008, unknown source 1008, options over the server's caps (``over_cap``) 1008, malformed start
   or options the server cannot run 1003, too many streams on this replica 1013.
3. A frame (client -> server) is a binary message: :data:`HEADER` (uint32 sequence number,
   float64 client timestamp in ms, big-endian, 12 bytes), then a JPEG, PNG or WebP image.
4. A result (server -> client) is a binary message: the same 12-byte header echoed, then the
   processed frame as JPEG. Sequence numbers only ever increase.
5. A frame that is not returned gets ``{"type": "dropped", "seq", "reason"}`` with a reason of
   :data:`DROP_REASONS`; every second ``{"type": "stats", ...}`` (:func:`stats_event`).

A client may send ``{"type": "stop"}`` to end the stream (close 1000). The server ends a stream
that sends no frame for the idle timeout or runs past the session limit with an ``error`` event
(``idle_timeout``, ``session_limit``), then close 1000; a stream whose source was deleted with
``source_deleted`` and close 1008; every stream, when the server shuts down, with
``shutting_down`` and close 1001 (going away). A client text message is at most
:data:`MAX_TEXT_CHARS` long and nested at most :data:`MAX_JSON_DEPTH` deep.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping
from typing import Any, Literal

import pydantic_core
from pydantic import ConfigDict, Field, ValidationError, field_validator

from fusion_ray.core.facefusion_options import FaceFusionOptions, refuse_boolean
from fusion_ray.errors import InputError
from fusion_ray.types import StreamSelectMode

HEADER = struct.Struct(">Id")
HEADER_SIZE = HEADER.size  # 12
MAX_SEQ = 2**32 - 1

CLOSE_NORMAL = 1000
CLOSE_GOING_AWAY = 1001  # the server is shutting down
CLOSE_UNSUPPORTED = 1003  # malformed start message
CLOSE_POLICY = 1008  # bad or missing token, unknown source
CLOSE_TRY_AGAIN_LATER = 1013  # too many streams on this replica

DropReason = Literal["stale", "deadline", "overload", "bad_frame", "too_large"]
DROP_REASONS: tuple[DropReason, ...] = ("stale", "deadline", "overload", "bad_frame", "too_large")
"""Why a frame was not returned: ``stale`` replaced by a newer frame, or its sequence number not
above the last one received (dropped on arrival, not counted against the server), or older than
one already sent; ``deadline`` not finished within ``deadline_ms`` of its arrival, ``overload`` above the
incoming frame rate or the server could not take or finish it, ``bad_frame`` not a readable
image (or a message shorter than the header: ``seq`` -1), ``too_large`` over the byte or
pixel limit."""

UNKNOWN_SEQ = -1

MAX_TEXT_CHARS = 16 * 1024
"""Longest client text message read (the start message, ``stop``); a longer one is malformed."""
MAX_JSON_DEPTH = 200
"""Nesting of client JSON that parses: pydantic-core's parser stops at this depth with an error
(Python's json recursed until RecursionError on 100,000 nested arrays)."""


class ProtocolError(InputError):
    """A client message that breaks the protocol (answered by a close or a ``dropped`` event)."""


class StartMessage(FaceFusionOptions):
    """The client's first message, with FaceFusion's per-request options
    (:class:`~fusion_ray.core.facefusion_options.FaceFusionOptions`: ``face_mask_types``,
    ``face_swapper_pixel_boost``, ...; the server refuses options over its caps)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: Literal["start"] = "start"
    token: str | None = Field(default=None, max_length=4096, description="The API token, if the server has one.")
    source_id: str = Field(min_length=1, max_length=256, description="A source registered via POST /v1/sources.")
    select: StreamSelectMode | None = Field(
        default=None, description="Which faces to swap (none given: the server's configured selection).")
    face_index: int | None = Field(default=None, ge=0, le=1024,
                                   description="Face in reading order, for select=index (none given: the server's).")
    enhance: bool = Field(default=False, description="Enhance swapped faces (the ladder may turn it off).")
    quality: int = Field(default=85, ge=1, le=100, description="JPEG quality of results.")
    deadline_ms: int | None = Field(default=None, ge=1, le=60_000,
                                    description="Per-frame deadline; None: the server's default.")

    @field_validator("face_index", "quality", "deadline_ms", mode="before")
    @classmethod
    def _not_boolean_here(cls, value: Any) -> Any:
        return refuse_boolean(value)

    @property
    def wants_enhancer(self) -> bool:
        """``enhance``, or FaceFusion's enhancer options (naming the model or a blend ask for it)."""
        return self.enhance or self.asks_enhancer


def parse_start(text: str | bytes) -> StartMessage:
    """The start message; :class:`ProtocolError` (close 1003) when it is not one."""
    if isinstance(text, bytes):
        raise ProtocolError("the first message must be the JSON start message (text), not binary")
    data = client_json(text, "start message")
    if not isinstance(data, dict):
        raise ProtocolError("the start message must be a JSON object")
    return start_from(data)


def start_from(data: Mapping[str, Any]) -> StartMessage:
    """A start message from its fields (the WebSocket's JSON, a WHIP URL's query)."""
    try:
        return StartMessage.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in err['loc']) or '<root>'}: {err['msg']}"
                             for err in exc.errors())
        raise ProtocolError(f"malformed start message: {problems}") from exc


def client_json(text: str, what: str) -> Any:
    """A client text message parsed, within :data:`MAX_TEXT_CHARS` and the parser's nesting
    bound (:data:`MAX_JSON_DEPTH`); :class:`ProtocolError` when it is longer, deeper or not JSON."""
    if len(text) > MAX_TEXT_CHARS:
        raise ProtocolError(f"the {what} is {len(text)} characters; at most {MAX_TEXT_CHARS}")
    try:
        return pydantic_core.from_json(text)
    except ValueError as exc:  # not JSON, or nested deeper than MAX_JSON_DEPTH
        raise ProtocolError(f"the {what} is not JSON: {str(exc)[:200]}") from exc


def pack_header(seq: int, client_ts_ms: float) -> bytes:
    """The 12-byte frame header."""
    if not 0 <= seq <= MAX_SEQ:
        raise ValueError(f"sequence number {seq} is outside uint32")
    return HEADER.pack(seq, float(client_ts_ms))


def unpack_frame(message: bytes) -> tuple[int, float, bytes]:
    """(seq, client timestamp ms, image bytes) of a frame or result message."""
    if len(message) < HEADER_SIZE:
        raise ProtocolError(f"a frame message needs the {HEADER_SIZE}-byte header, got {len(message)} bytes")
    seq, ts = HEADER.unpack_from(message)
    return int(seq), float(ts), bytes(message[HEADER_SIZE:])


def pack_frame(seq: int, client_ts_ms: float, image: bytes) -> bytes:
    """A frame (client) or result (server) message."""
    return pack_header(seq, client_ts_ms) + image


def _event(kind: str, **fields: Any) -> str:
    return json.dumps({"type": kind, **fields}, separators=(",", ":"))


def ready_event(stream_id: str, deadline_ms: int, stand_in_models: list[str], **extra: Any) -> str:
    return _event("ready", stream_id=stream_id, deadline_ms=deadline_ms, stand_in_models=stand_in_models, **extra)


def error_event(code: str, message: str) -> str:
    return _event("error", code=code, message=message)


def dropped_event(seq: int, reason: DropReason) -> str:
    return _event("dropped", seq=seq, reason=reason)


def stats_event(frames_in: int, frames_out: int, dropped: Mapping[str, int], p50_ms: float | None,
                p99_ms: float | None, level: int, level_name: str, **extra: Any) -> str:
    """``{"type": "stats", "frames_in", "frames_out", "dropped": {reason: n}, "latency_ms": {"p50",
    "p99"}, "level", "level_name", ...}``; counts are totals since the stream started, latency is
    server-side (arrival to hand-off to the socket) over recent frames, null before the first."""
    return _event("stats", frames_in=frames_in, frames_out=frames_out,
                  dropped={reason: int(dropped.get(reason, 0)) for reason in DROP_REASONS},
                  latency_ms={"p50": p50_ms, "p99": p99_ms}, level=level, level_name=level_name, **extra)


def parse_event(text: str) -> dict[str, Any]:
    """A server text event (for clients)."""
    data = json.loads(text)
    if not isinstance(data, dict) or "type" not in data:
        raise ProtocolError(f"not a server event: {text[:80]!r}")
    return data


ENDINGS: dict[str, tuple[int, str]] = {
    "idle_timeout": (CLOSE_NORMAL, "no frame within the idle timeout"),
    "session_limit": (CLOSE_NORMAL, "the stream reached the session length limit"),
    "source_deleted": (CLOSE_POLICY, "the stream's source was deleted"),
    "shutting_down": (CLOSE_GOING_AWAY, "the server is shutting down"),
}
"""Why the server ends a stream: (close code, message of the ``error`` event sent before it)."""


def is_stop(text: str) -> bool:
    """Whether a client text message is ``{"type": "stop"}`` (other text is ignored)."""
    try:
        data = client_json(text, "message")
    except ProtocolError:
        return False
    return isinstance(data, dict) and data.get("type") == "stop"
