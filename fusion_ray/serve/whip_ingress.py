"""The ingress' side of WebRTC: WHIP and WHEP signalling, handed to the fused replica that runs
the chain (:mod:`fusion_ray.serve.webrtc` holds the sessions; media never comes through here).

``POST /v1/whip?source_id=ID&...`` (``application/sdp``, ``Authorization: Bearer``): the token
(401), the body (415 not SDP, 413 over 128 KiB), the query as a live start message (400), the
source (404), the options against the caps (403 over a cap, 422 not runnable here), then the
replica: the offer (400/415/422), the stream caps (503). ``201`` with the answer and
``Location: /v1/whip/<session>``. ``DELETE /v1/whip/<session>`` ends it (``200``; 404 when
unknown), ``POST /v1/whep/<session>`` adds a viewer (``201`` with its answer).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from fastapi.responses import Response

from fusion_ray.live.offer import MAX_OFFER_BYTES
from fusion_ray.live.protocol import ProtocolError
from fusion_ray.live.whip import StreamRefused, refusal_status, start_from_query
from fusion_ray.serve.limits import ApiError, check_content_length
from fusion_ray.serve.live import ServeStreamBackend
from fusion_ray.serve.timing import Timings
from fusion_ray.serve.webrtc import session_replica

SDP = "application/sdp"
DEADLINE_HEADER = "X-Fusion-Ray-Deadline-Ms"


class SdpBody(Protocol):
    """What the WHIP routes read of a request (a Starlette ``Request`` has it)."""

    @property
    def headers(self) -> Any: ...

    def stream(self) -> Any: ...


class WhipIngress:
    """WHIP/WHEP signalling over the ingress' downstream handles (``fused`` is the fused deployment)."""

    def __init__(self, placement: str, fused: Any, streams: ServeStreamBackend, call: Any,
                 stand_in_header: str) -> None:
        self.placement = placement
        self.fused = fused
        self.streams = streams
        self.call = call
        self.stand_in_header = stand_in_header

    def _check_fused(self) -> None:
        if self.placement != "fused":
            raise ApiError(501, "webrtc_needs_fused", "WebRTC sessions run in the replica that runs the whole "
                           "chain (placement: fused); this split service serves live streams at /v1/stream")

    async def publish(self, request: SdpBody, query: Mapping[str, Sequence[str]], token: str | None,
                      t: Timings) -> Response:
        self._check_fused()
        offer = await read_sdp(request)
        try:
            start = start_from_query(query, token)
        except ProtocolError as exc:
            raise ApiError(400, "malformed_start", str(exc)) from exc
        try:
            prepared = await self.streams.prepare(start)
        except StreamRefused as exc:
            raise ApiError(refusal_status(exc.code), exc.code, exc.message) from exc
        result = await self.call(t, "webrtc", lambda: self.fused.webrtc_publish.remote(offer, prepared))
        _raise_refused(result)
        headers = {"Location": f"/v1/whip/{result['session_id']}", DEADLINE_HEADER: str(result["deadline_ms"])}
        if result["stand_in_models"]:
            headers[self.stand_in_header] = ",".join(result["stand_in_models"])
        return Response(result["answer"], 201, media_type=SDP, headers=headers)

    async def end(self, session_id: str, t: Timings) -> Response:
        self._check_fused()
        _check_session(session_id)
        if not await self.call(t, "webrtc", lambda: self.fused.webrtc_end.remote(session_id)):
            raise ApiError(404, "unknown_session", "no live WebRTC session with that id")
        return Response(status_code=200)

    async def view(self, request: SdpBody, session_id: str, t: Timings) -> Response:
        self._check_fused()
        _check_session(session_id)
        offer = await read_sdp(request)
        result = await self.call(t, "webrtc", lambda: self.fused.webrtc_view.remote(session_id, offer))
        _raise_refused(result)
        return Response(result["answer"], 201, media_type=SDP)


async def read_sdp(request: SdpBody) -> str:
    """The body as an SDP offer: ``application/sdp`` (415) within :data:`MAX_OFFER_BYTES` (413)."""
    if request.headers.get("content-type", "").split(";")[0].strip().lower() != SDP:
        raise ApiError(415, "unsupported_media_type", f"the offer must be sent as {SDP}")
    check_content_length(request.headers.get("content-length"), MAX_OFFER_BYTES)
    body = bytearray()
    async for chunk in request.stream():  # never more than the cap in memory, whatever the client says
        body += chunk
        if len(body) > MAX_OFFER_BYTES:
            raise ApiError(413, "offer_too_large", f"the offer is over {MAX_OFFER_BYTES} bytes")
    return body.decode("utf-8", "replace")


def _check_session(session_id: str) -> None:
    if session_replica(session_id) is None:
        raise ApiError(404, "unknown_session", "no live WebRTC session with that id")


def _raise_refused(result: dict[str, Any]) -> None:
    refused = result.get("refused")
    if refused:
        status, code, detail = refused
        raise ApiError(int(status), str(code), str(detail))
