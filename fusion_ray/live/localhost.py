"""An in-process live host (Starlette + uvicorn, no Ray) for tests, benchmarks and demos.

It serves what the Serve ingress serves for live streams, over :class:`EngineBackend`:
``GET /live`` (the page), ``POST /v1/sources`` (multipart field ``image``, bearer token),
``DELETE /v1/sources/{id}`` (its open streams end: ``source_deleted``, close 1008), ``GET /v1/stream`` (the WebSocket, hosted by :class:`LiveHub`),
WebRTC (``POST /v1/whip``, ``DELETE /v1/whip/{session}``, ``POST /v1/whep/{session}``,
:mod:`fusion_ray.live.whip`) and ``GET /healthz``.
:class:`LocalServer` runs it on 127.0.0.1 in a background thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from importlib import resources
from types import TracebackType

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket

from fusion_ray.errors import FusionRayError, InputError, NoFaceError
from fusion_ray.imageio import decode_image
from fusion_ray.live.hub import LiveHub
from fusion_ray.live.local import EngineBackend
from fusion_ray.live.offer import MAX_OFFER_BYTES, OfferError
from fusion_ray.live.protocol import ProtocolError
from fusion_ray.live.transport import StarletteTransport
from fusion_ray.live.whip import Published, StreamRefused, WebRtcHost, refusal_of, start_from_query
from fusion_ray.types import STREAM_SELECT_MODES

SDP = "application/sdp"


def live_page() -> str:
    """The self-contained ``GET /live`` page (its selection modes: the start message's)."""
    page = resources.files("fusion_ray.live").joinpath("static/live.html").read_text(encoding="utf-8")
    return page.replace("<!--select-modes-->", "".join(f"<option>{mode}</option>" for mode in STREAM_SELECT_MODES))


def create_local_app(hub: LiveHub, backend: EngineBackend) -> Starlette:
    """The Starlette app of the in-process host."""

    async def page(request: Request) -> HTMLResponse:
        return HTMLResponse(live_page())

    async def healthz(request: Request) -> JSONResponse:
        return JSONResponse({"status": "ok", "streams": hub.active_streams})

    def unauthorized(request: Request) -> JSONResponse | None:
        if backend.authorize(bearer_token(request)):
            return None
        return JSONResponse({"error": "unauthorized", "detail": "missing or wrong bearer token"}, 401)

    async def delete_source(request: Request) -> Response:
        refused = unauthorized(request)
        if refused is not None:
            return refused
        source_id = str(request.path_params["source_id"])
        if not backend.delete_source(source_id):
            return JSONResponse({"error": "unknown_source", "detail": "no such source"}, 404)
        hub.revoke_source(source_id)
        return Response(status_code=204)

    async def create_source(request: Request) -> JSONResponse:
        refused = unauthorized(request)
        if refused is not None:
            return refused
        form = await request.form(max_files=1, max_fields=8)
        upload = form.get("image")
        if upload is None or isinstance(upload, str):
            return JSONResponse({"error": "missing_image", "detail": "multipart file field 'image' is required"}, 422)
        data = await upload.read()
        try:
            loaded = await asyncio.to_thread(decode_image, data, "image", hub.cfg.max_frame_pixels * 4)
            source_id = await asyncio.to_thread(backend.add_source, loaded.frame)
        except NoFaceError as exc:
            return JSONResponse({"error": "no_face", "detail": str(exc)}, 422)
        except InputError as exc:
            return JSONResponse({"error": "invalid_image", "detail": str(exc)}, 422)
        return JSONResponse({"source_id": source_id}, 201)

    async def stream(websocket: WebSocket) -> None:
        await websocket.accept()
        await hub.serve(StarletteTransport(websocket))

    async def whip(request: Request) -> Response:
        refused = unauthorized(request) or await _sdp_refusal(request)
        if refused is not None:
            return refused
        try:
            start = start_from_query(_query(request), bearer_token(request))
            published = await rtc.publish((await request.body()).decode("utf-8", "replace"), start)
        except (ProtocolError, OfferError, StreamRefused) as exc:
            return _refused(exc)
        return whip_created(published)

    async def whip_delete(request: Request) -> Response:
        refused = unauthorized(request)
        if refused is not None:
            return refused
        if not await rtc.end(str(request.path_params["session_id"])):
            return JSONResponse({"error": "unknown_session", "detail": "no such WebRTC session"}, 404)
        return Response(status_code=200)

    async def whep(request: Request) -> Response:
        refused = unauthorized(request) or await _sdp_refusal(request)
        if refused is not None:
            return refused
        try:
            answer = await rtc.view(str(request.path_params["session_id"]),
                                    (await request.body()).decode("utf-8", "replace"))
        except OfferError as exc:
            return _refused(exc)
        return Response(answer, 201, media_type=SDP)

    rtc = WebRtcHost(hub, hub.cfg.webrtc)
    app = Starlette(routes=[
        Route("/live", page), Route("/healthz", healthz),
        Route("/v1/sources", create_source, methods=["POST"]),
        Route("/v1/sources/{source_id}", delete_source, methods=["DELETE"]), WebSocketRoute("/v1/stream", stream),
        Route("/v1/whip", whip, methods=["POST"]), Route("/v1/whip/{session_id}", whip_delete, methods=["DELETE"]),
        Route("/v1/whep/{session_id}", whep, methods=["POST"])])
    app.state.webrtc = rtc
    return app


def bearer_token(request: Request) -> str | None:
    header = request.headers.get("authorization", "")
    return header[7:] if header.lower().startswith("bearer ") else None


def _query(request: Request) -> dict[str, list[str]]:
    query: dict[str, list[str]] = {}
    for key, value in request.query_params.multi_items():
        query.setdefault(key, []).append(value)
    return query


async def _sdp_refusal(request: Request) -> JSONResponse | None:
    """A WHIP/WHEP body must be ``application/sdp`` and at most ``MAX_OFFER_BYTES``."""
    if request.headers.get("content-type", "").split(";")[0].strip().lower() != SDP:
        return JSONResponse({"error": "unsupported_media_type", "detail": f"the offer must be sent as {SDP}"}, 415)
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > MAX_OFFER_BYTES:
        return JSONResponse({"error": "offer_too_large", "detail": f"the offer is over {MAX_OFFER_BYTES} bytes"}, 413)
    return None


def _refused(exc: Exception) -> JSONResponse:
    status, code, detail = refusal_of(exc) or (500, "internal", str(exc))
    return JSONResponse({"error": code, "detail": detail}, status)


def whip_created(published: Published) -> Response:
    """``201 Created``: the SDP answer, the session's ``Location`` and what the stream's ready event says."""
    headers = {"Location": f"/v1/whip/{published.session_id}", "X-Fusion-Ray-Deadline-Ms": str(published.deadline_ms)}
    if published.stand_in_models:
        headers["X-Fusion-Ray-Stand-In"] = ",".join(published.stand_in_models)
    return Response(published.answer, 201, media_type=SDP, headers=headers)


class LocalServer:
    """The in-process host on 127.0.0.1 (``port`` 0: a free one) in a background thread."""

    def __init__(self, hub: LiveHub, backend: EngineBackend, *, host: str = "127.0.0.1", port: int = 0) -> None:
        self.hub = hub
        self.app = create_local_app(hub, backend)
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind((host, port))
        self.host, self.port = self._sock.getsockname()[:2]
        config = uvicorn.Config(self.app, log_level="warning", ws_max_size=hub.cfg.max_message_bytes,
                                ws_ping_interval=None, lifespan="off")
        self.server = uvicorn.Server(config)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread = threading.Thread(target=self._run, name="fusion-ray-live-host", daemon=True)

    @property
    def http_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def ws_url(self) -> str:
        return f"ws://{self.host}:{self.port}/v1/stream"

    def _run(self) -> None:
        asyncio.run(self._serve())

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        await self.server.serve(sockets=[self._sock])

    def start(self, timeout_s: float = 10.0) -> LocalServer:
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self.server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise FusionRayError("the in-process live host did not start")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        """End every stream and WebRTC session (``shutting_down``), then stop the server."""
        if self._loop is not None and self._thread.is_alive():
            ending = asyncio.run_coroutine_threadsafe(self.app.state.webrtc.shut_down(), self._loop)
            with contextlib.suppress(Exception):
                ending.result(timeout=10)
        self.server.should_exit = True
        self._thread.join(timeout=10)
        self._sock.close()

    def __enter__(self) -> LocalServer:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()


