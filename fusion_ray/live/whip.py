"""WHIP ingest and WHEP playback of live streams (RFC 9725 and its playback twin), host-independent.

A host (the fused Serve replica, the in-process host) owns one :class:`WebRtcHost` beside its
:class:`~fusion_ray.live.hub.LiveHub` and maps HTTP onto it:

- ``POST /v1/whip?source_id=ID&...`` with an SDP offer: :meth:`WebRtcHost.publish` checks the
  offer (:mod:`fusion_ray.live.offer`), admits the stream through the hub (the token, the
  replica's and the token's stream caps, the source, the options and their caps: the start
  message's rules, with its vocabulary in the query), answers, and runs the stream over the
  session (:mod:`fusion_ray.live.webrtc`) until it ends. ``201`` with the answer and
  ``Location: /v1/whip/<session>``.
- ``DELETE /v1/whip/<session>``: :meth:`WebRtcHost.end`.
- ``POST /v1/whep/<session>`` with a viewer's offer: :meth:`WebRtcHost.view` (``201`` + answer).

Refusals carry an HTTP status (:func:`refusal_status`): a wrong token 401, options over a cap
403, an unknown source or session 404, the stream caps and shut-down 503, a malformed query
400, options the service cannot run 422; offers as :class:`~fusion_ray.live.offer.OfferError`
says. Sessions count in ``fusion_ray_webrtc_sessions_total{event}``: ``opened``, and ``ended``
by reason (``deleted``, ``disconnected`` when ICE or DTLS failed or the peer closed,
``idle_timeout`` when a client vanished without a DELETE, ``source_deleted``, ``shutting_down``).
"""

from __future__ import annotations

import asyncio
import logging
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from aiortc import RTCIceServer

from fusion_ray.live.backend import StreamRefused
from fusion_ray.live.config import WebRtcConfig
from fusion_ray.live.encoders import use_realtime_h264
from fusion_ray.live.hub import Admitted, LiveHub, Opener
from fusion_ray.live.offer import OfferError, check_offer, check_viewer_offer
from fusion_ray.live.protocol import ProtocolError, StartMessage, start_from
from fusion_ray.live.webrtc import WebRtcSession

log = logging.getLogger(__name__)

SESSIONS_METRIC = "fusion_ray_webrtc_sessions_total"

_STATUS = {"unauthorized": 401, "over_cap": 403, "unknown_source": 404, "too_many_streams": 503,
           "shutting_down": 503, "malformed_start": 400}


def refusal_status(code: str) -> int:
    """The HTTP status of a stream refusal's code (422 for options the service cannot run)."""
    return _STATUS.get(code, 422)


def start_from_query(query: Mapping[str, Sequence[str]], token: str | None) -> StartMessage:
    """The live start message from a WHIP URL's query (the same fields, validation and caps; a
    list field takes repeated or comma-separated values) and the bearer token."""
    fields: dict[str, object] = {"token": token}
    for name, values in query.items():
        field = StartMessage.model_fields.get(name)
        if field is None or name in ("type", "token"):
            raise ProtocolError(f"unknown query parameter {name!r}")
        if typing.get_origin(_unoptional(field.annotation)) in (list, tuple):
            fields[name] = [part for value in values for part in value.split(",") if part]
        elif len(values) != 1:
            raise ProtocolError(f"query parameter {name!r} given {len(values)} times")
        else:
            fields[name] = values[0]
    return start_from(fields)


def _unoptional(annotation: object) -> object:
    """``X`` of ``X | None``."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return args[0] if len(args) == 1 else annotation
    return annotation


def refusal_of(exc: Exception) -> tuple[int, str, str] | None:
    """(status, code, detail) of what a WHIP/WHEP request may be refused with; None for anything else."""
    if isinstance(exc, OfferError):
        return exc.status, exc.code, exc.detail
    if isinstance(exc, StreamRefused):
        return refusal_status(exc.code), exc.code, exc.message
    if isinstance(exc, ProtocolError):
        return 400, "malformed_start", str(exc)
    return None


@dataclass(frozen=True)
class Published:
    """A WHIP session as answered: its id (the ``Location``), the SDP answer, and what the
    WebSocket's ``ready`` event says (the stream's deadline, the stand-in models)."""

    session_id: str
    answer: str
    deadline_ms: int
    stand_in_models: tuple[str, ...]


class WebRtcHost:
    """The WebRTC sessions of one process (one replica): publish, view, end."""

    def __init__(self, hub: LiveHub, cfg: WebRtcConfig) -> None:
        use_realtime_h264()
        self.hub = hub
        self.cfg = cfg
        self.ice_servers = [RTCIceServer(s.urls, s.username, s.credential) for s in cfg.ice_servers]
        self.sessions: dict[str, WebRtcSession] = {}
        self._runs: set[asyncio.Task[None]] = set()

    async def publish(self, offer: str, start: StartMessage, opener: Opener | None = None, *,
                      id_prefix: str = "") -> Published:
        """Check, admit and answer a WHIP offer; the stream then runs until it ends (in the
        background). The session's id is ``id_prefix`` and the stream's id."""
        info = check_offer(offer)
        admitted = await self.hub.admit(start, opener)  # StreamRefused
        session = WebRtcSession(id_prefix + admitted.stream_id, self.ice_servers, audio_delay=lambda: self._median_s(admitted))
        try:
            answer = await session.answer(info)
        except Exception as exc:  # aiortc refuses an offer it cannot negotiate
            self.hub.release(admitted)
            await session.close("refused")
            raise OfferError(422, "bad_offer", f"the offer cannot be negotiated: {exc}") from exc
        self.sessions[session.id] = session
        self._count("opened")
        run = asyncio.create_task(self._run(session, admitted))
        self._runs.add(run)
        run.add_done_callback(self._runs.discard)
        processor = admitted.processor
        deadline = start.deadline_ms if start.deadline_ms is not None else self.hub.cfg.deadline_ms
        return Published(session.id, answer, deadline, tuple(processor.stand_in_models if processor else ()))

    async def _run(self, session: WebRtcSession, admitted: Admitted) -> None:
        try:
            summary = await self.hub.run(admitted, session.transport)
            reason = session.reason or summary.reason
        except Exception:  # never lose the session's resources to a failing stream
            log.exception("WebRTC session %s failed", session.id)
            reason = "failed"
        finally:
            await session.close(session.reason or "ended")
            self.sessions.pop(session.id, None)
        self._count("ended", reason=reason)
        log.info("WebRTC session %s ended (%s)", session.id, reason)

    async def view(self, session_id: str, offer: str) -> str:
        """A WHEP viewer of a session: the SDP answer (OfferError 404 / 503 / 4xx)."""
        info = check_viewer_offer(offer)
        session = self.sessions.get(session_id)
        if session is None or session.closed:
            raise OfferError(404, "unknown_session", f"no live WebRTC session {session_id[:64]!r} here")
        if len(session.viewers) >= self.cfg.max_viewers:
            raise OfferError(503, "too_many_viewers", f"the session has its limit of {self.cfg.max_viewers} viewers")
        return await session.add_viewer(info)

    async def end(self, session_id: str) -> bool:
        """DELETE: end a session (its stream ends, its connections close); False when unknown."""
        session = self.sessions.get(session_id)
        if session is None:
            return False
        session.reason = "deleted"
        session.transport.end()
        return True

    async def shut_down(self, timeout_s: float = 5.0) -> None:
        """End every session (``shutting_down``) and wait, bounded, until they are closed."""
        self.hub.shut_down()
        if self._runs:
            await asyncio.wait(set(self._runs), timeout=timeout_s)

    def _median_s(self, admitted: Admitted) -> float:
        stream = self.hub.streams.get(admitted.stream_id)
        p50 = stream.counters.p50_p99()[0] if stream is not None else None
        return (p50 or 0.0) / 1000.0

    def _count(self, event: str, reason: str = "") -> None:
        if self.hub.metrics is not None:
            labels = {"event": event, "reason": reason} if reason else {"event": event}
            self.hub.metrics.inc(SESSIONS_METRIC, 1.0, **labels)


__all__ = ["OfferError", "Published", "StreamRefused", "WebRtcHost", "refusal_of", "refusal_status", "start_from_query"]
