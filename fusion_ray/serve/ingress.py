"""The ingress' work for each endpoint, independent of how Serve and FastAPI wrap it.

Request path of ``POST /v1/swap``::

    authorise -> upload slot (limits.max_uploads, per client too) -> receive and parse the body
    (capped, within the receive deadline) -> in-flight slot (limits.max_inflight) -> check image
    headers -> decode -> the chain as placed (:mod:`fusion_ray.serve.placement`), with the source
    (ServiceState.get_source, or source_face + embed) looked up meanwhile:
      split: Detector.detect -> Swapper.swap -> paste -> [Enhancer.enhance -> paste enhanced]
      fused: Fused.process (the whole chain in one replica, batched across requests and streams)
    -> encode -> response

Remote calls go through :class:`~fusion_ray.serve.downstream.Downstream`, the ingress' own chain
work through :class:`~fusion_ray.serve.downstream.LocalStages`; every stage is timed once
(:class:`~fusion_ray.serve.timing.Timings`) for both the Server-Timing header and /metrics.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

from fastapi.responses import JSONResponse, Response

from fusion_ray.core.chain import Selection
from fusion_ray.core.facefusion_options import configured
from fusion_ray.core.frames import FrameDone
from fusion_ray.core.provenance import Provenance
from fusion_ray.imageio import FORMAT_CHANGES_KEY, LoadedImage, encode_image, format_changes
from fusion_ray.live.hub import LiveHub
from fusion_ray.serve.auth import BearerAuth, metrics_public
from fusion_ray.serve.downstream import Downstream, LocalStages
from fusion_ray.serve.forms import Form, Part, read_form
from fusion_ray.serve.images import ImageHeader, decode
from fusion_ray.serve.limits import (
    ApiError,
    InflightLimiter,
    Refused,
    UploadLimiter,
    check_content_length,
    clip,
)
from fusion_ray.serve.live import ServeStreamBackend, StreamRoute
from fusion_ray.serve.metrics import FlushingSink, MetricsBuffer
from fusion_ray.serve.ops import ingress_gauges, readiness
from fusion_ray.serve.placement import (
    FrameRequest,
    FusedChain,
    ServeChain,
    SplitChain,
    first_error_cancels,
)
from fusion_ray.serve.quality import request_quality
from fusion_ray.serve.schemas import (
    FACES_DETECTED_HEADER,
    FACES_SWAPPED_HEADER,
    FORMAT_CHANGES_HEADER,
    MEDIA_TYPES,
    STAND_IN_HEADER,
    SUFFIXES,
    Readiness,
    SourceCreated,
    SwapRequest,
    image_name,
    sources_form,
)
from fusion_ray.serve.settings import ServeSettings
from fusion_ray.serve.timing import Timings
from fusion_ray.serve.whip_ingress import WhipIngress
from fusion_ray.types import SourceIdentity

log = logging.getLogger(__name__)

METRICS_FLUSH_S = 0.5


class Upload(Protocol):
    """What the ingress reads from a request (a Starlette ``Request`` has all of it)."""

    @property
    def headers(self) -> Any: ...

    @property
    def client(self) -> Any: ...

    def stream(self) -> Any: ...


Work = Callable[[Form, Timings], Awaitable[Response]]


class IngressCore:
    """One ingress replica's state (limiters, metrics, model info) and endpoints (handles duck-typed)."""

    def __init__(self, settings: ServeSettings, detector: Any, swapper: Any, enhancer: Any | None,
                 state: Any) -> None:
        self.settings = settings
        self.limits = settings.limits
        self.auth = BearerAuth(settings.auth.resolve_token())
        if not self.auth.enabled:
            log.warning("no API token configured (auth.token or $%s): the /v1 endpoints are open",
                        settings.auth.token_env)
        self.metrics = MetricsBuffer(lambda snap: self.downstream.merge_metrics(snap), METRICS_FLUSH_S)
        self.limiter = InflightLimiter(self.limits.max_inflight, self.limits.retry_after_s)
        self.uploads = UploadLimiter(self.limits.max_uploads, self.limits.max_uploads_per_client,
                                     self.limits.retry_after_s)
        self.downstream = Downstream((detector, swapper, enhancer, state), timeout_s=self.limits.stage_timeout_s,
                                     retry_headers={"Retry-After": str(self.limits.retry_after_s)},
                                     metrics=self.metrics)
        self.local = LocalStages(settings)
        self.chain: ServeChain = (FusedChain(self.downstream) if settings.placement == "fused"
                                  else SplitChain(self.downstream, self.local))
        route = StreamRoute(self.chain, settings, self.metrics, self.auth.valid, self.source, self.provenance,
                            self.downstream.source_status, enhancer is not None)
        streams = ServeStreamBackend(route)
        self.live = LiveHub(settings.live, streams, metrics=FlushingSink(self.metrics))
        self.webrtc = WhipIngress(settings.placement, detector, streams, self.downstream.call, STAND_IN_HEADER)
        self.replica = uuid.uuid4().hex[:8]
        self._provenance: dict[tuple[bool, frozenset[str]], Provenance] = {}

    async def call(self, stage: str, make: Callable[[], Any]) -> Any:
        """One downstream call outside a request's timings (see :meth:`Downstream.call`)."""
        return await self.downstream.call(Timings(self.metrics), stage, make)

    # ------------------------------------------------------------ access
    def authorise(self, token: str | None) -> None:
        try:
            self.auth.check(token)
        except ApiError:
            self.metrics.inc("fusion_ray_rejected_total", reason="unauthorized")
            raise

    def authorise_metrics(self, token: str | None, local_host: str | None) -> None:
        """/metrics: public per ``auth.metrics_public`` (null: on a loopback listen address), else the token."""
        if not metrics_public(self.settings.auth.metrics_public, local_host):
            self.authorise(token)

    # ------------------------------------------------------------ admission
    async def admitted(self, endpoint: str, request: Upload, work: Work) -> Response:
        """Receive the body within an upload slot, then run ``work`` within an in-flight slot,
        counting the request by endpoint and status."""
        start = time.perf_counter()
        status = 500
        timings = Timings(self.metrics)
        try:
            form = await self.read_form(request, timings)
            with self.limiter.slot():
                response = await work(form, timings)
            status = response.status_code
            return response
        except ApiError as exc:
            status = exc.status
            if isinstance(exc, Refused):
                self.metrics.inc("fusion_ray_rejected_total", reason=exc.reason)
            raise
        finally:
            self.metrics.inc("fusion_ray_requests_total", endpoint=endpoint, status=str(status))
            self.metrics.observe("fusion_ray_request_seconds", time.perf_counter() - start, endpoint=endpoint)
            self.metrics.maybe_flush()

    async def read_form(self, request: Upload, timings: Timings | None = None) -> Form:
        """The parsed body (413 over the cap, 408 past the deadline), read within an upload slot."""
        from starlette.requests import ClientDisconnect

        check_content_length(request.headers.get("content-length"), self.limits.max_body_bytes)
        client = request.client.host if request.client is not None else "unknown"
        timings = timings or Timings(self.metrics)
        with self.uploads.slot(client), timings.timed("receive"):
            try:
                return await read_form(request.stream(), request.headers.get("content-type"),
                                       max_bytes=self.limits.max_body_bytes, timeout_s=self.limits.receive_timeout_s,
                                       max_parts=self.limits.max_source_images + 16)
            except ClientDisconnect as exc:
                raise ApiError(400, "client_disconnected", "the client closed the connection mid-body") from exc

    # ------------------------------------------------------------ models
    async def provenance(self, t: Timings, enhance: bool, extra: frozenset[str] = frozenset()) -> Provenance:
        """What made this replica's outputs (with or without the enhancer, with the landmarker and
        mask models ``extra``), from every deployment's model info, fetched once (replicas load their
        models before serving). It writes the stand-in header, the image metadata and the stand-in
        lists of the responses."""
        key = (enhance, extra)
        if key not in self._provenance:
            models = await self.downstream.model_info(t)
            self._provenance[key] = self.local.provenance(models, enhance, extra)
        return self._provenance[key]

    async def thread(self, t: Timings, stage: str, func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        with t.timed(stage):
            return await asyncio.to_thread(func, *args, **kwargs)

    async def decode(self, t: Timings, part: Part, header: ImageHeader, name: str) -> LoadedImage:
        return await self.thread(t, "decode", decode, part.data, header, name, self.limits.max_pixels)  # type: ignore[no-any-return]

    # ------------------------------------------------------------ sources
    async def identity_from_images(self, t: Timings, parts: Sequence[Part],
                                   headers: Sequence[ImageHeader]) -> SourceIdentity:
        if not parts:
            raise ApiError(422, "missing_field", "no source image given")
        if len(parts) > self.limits.max_source_images:
            raise ApiError(422, "too_many_sources",
                           f"{len(parts)} source images; at most {self.limits.max_source_images}")
        # One source image at a time: at most one decoded source frame per request is alive, which
        # keeps the memory bound of limits.max_inflight (sources are rare next to swaps).
        faces = []
        for i, (part, header) in enumerate(zip(parts, headers, strict=True)):
            name = image_name("source image", part, i)
            loaded = await self.decode(t, part, header, name)
            face = await self.downstream.source_face(t, loaded.frame)
            if face is None:
                raise ApiError(422, "no_face_in_source", f"no face found in {name}")
            faces.append(face)
        return await self.downstream.embed(t, faces)

    async def create_source(self, form: Form, t: Timings) -> JSONResponse:
        parts, headers = sources_form(form, self.limits.max_pixels)
        identity = await self.identity_from_images(t, parts, headers)
        source_id = await self.downstream.put_source(t, identity)
        made_by = await self.provenance(t, enhance=False)
        body = SourceCreated(source_id=source_id, num_images=identity.num_images,
                             stand_in_models=list(made_by.stand_in_models))
        header = made_by.header_value()
        extra = {STAND_IN_HEADER: header} if header else {}
        return JSONResponse(body.model_dump(), status_code=201, headers=extra)

    async def source(self, t: Timings, source_id: str) -> SourceIdentity:
        identity = await self.downstream.get_source(t, source_id)
        if identity is None:
            raise ApiError(404, "unknown_source", f"no source with id {clip(source_id)!r} "
                           "(unknown, deleted, or dropped from the bounded store); register it again")
        return identity

    # ------------------------------------------------------------ swap
    async def swap(self, form: Form, t: Timings) -> Response:
        req = SwapRequest.from_form(form, self.limits.max_pixels)
        opts = req.options
        quality = request_quality(opts.facefusion, self.settings, enhancer=self.downstream.enhancer is not None,
                                  enhance=opts.enhance, blend=opts.blend)
        selection = Selection.asked(opts.select, opts.face_index,
                                    configured(self.settings.engine, opts.facefusion).selection)
        mode, index = selection.mode, selection.index

        async def get_identity() -> tuple[str, SourceIdentity]:
            with t.timed("source"):
                if opts.source_id:
                    return opts.source_id, await self.source(t, opts.source_id)
                return "inline_" + uuid.uuid4().hex, await self.identity_from_images(t, req.sources,
                                                                                     req.source_headers)

        async def swapped() -> tuple[LoadedImage, FrameDone]:
            loaded = await self.decode(t, req.target, req.target_header, "target image")
            request = FrameRequest(loaded.frame, selection, quality.enhance_blend,
                                   options=quality.options)
            return loaded, await self.chain.frame(t, request, identity)

        identity = asyncio.ensure_future(get_identity())  # looked up (or embedded) while the target decodes
        (loaded, done), _ = await first_error_cancels(swapped(), identity)
        headers = {FACES_DETECTED_HEADER: str(done.faces_detected), FACES_SWAPPED_HEADER: str(done.faces_swapped)}
        if done.faces_swapped == 0:
            return await self._unchanged(t, req, loaded, done.faces_detected, headers, mode, index)
        made_by = await self.provenance(t, quality.enhance_blend is not None, quality.models)
        if made_by.header_value():
            headers[STAND_IN_HEADER] = made_by.header_value()  # type: ignore[assignment]
        metadata = {**made_by.metadata(), **_changes(loaded, opts.format, headers)}
        data = await self.thread(t, "encode", encode_image, done.frame, SUFFIXES[opts.format], alpha=loaded.alpha,
                                 metadata=metadata, jpeg_quality=opts.jpeg_quality)
        headers["Server-Timing"] = t.server_timing()
        return Response(data, media_type=MEDIA_TYPES[opts.format], headers=headers)

    async def _unchanged(self, t: Timings, req: SwapRequest, loaded: LoadedImage, faces_detected: int,
                         headers: dict[str, str], mode: str, index: int) -> Response:
        if faces_detected == 0:
            reason = "no face found in the target image"
        else:
            reason = (f"{faces_detected} face(s) in the target image, none selected "
                      f"(select={mode}, face_index={index})")
        opts = req.options
        if opts.strict:
            raise ApiError(422, "no_face_in_target", reason)
        headers["X-Fusion-Ray-Note"] = reason + "; the image is returned unchanged"
        if req.target_header.format == opts.format:
            return Response(req.target.data, media_type=MEDIA_TYPES[opts.format], headers=headers)
        data = await self.thread(t, "encode", encode_image, loaded.frame, SUFFIXES[opts.format],
                                 alpha=loaded.alpha, jpeg_quality=opts.jpeg_quality,
                                 metadata=_changes(loaded, opts.format, headers))
        return Response(data, media_type=MEDIA_TYPES[opts.format], headers=headers)

    # ------------------------------------------------------------ ops
    async def readiness(self, token: str | None) -> Readiness:
        return await readiness(self.chain.probes(), detailed=self.auth.enabled and self.auth.valid(token))

    async def metrics_text(self) -> str:
        await self.metrics.flush()
        live = [(name, text, dict(labels), value) for name, text, labels, value in self.live.gauges()]
        made_by = await self.provenance(Timings(self.metrics), True)
        precision = [("fusion_ray_model_precision", "Models loaded, by the precision they run at (always 1).",
                      {"model": model, "precision": value}, 1.0) for model, value in made_by.precisions]
        gauges = [*ingress_gauges(self.replica, self.limiter, self.uploads), *live, *precision]
        return await self.downstream.render_metrics(Timings(self.metrics), gauges)


def _changes(loaded: LoadedImage, fmt: str, headers: dict[str, str]) -> dict[str, str]:
    """What writing ``loaded`` as ``fmt`` changes (an EXIF orientation applied, alpha dropped,
    16 to 8 bits), as the image command records it: output metadata, and a response header."""
    changes = "; ".join(format_changes(loaded, SUFFIXES[fmt]))
    if changes:
        headers[FORMAT_CHANGES_HEADER] = changes
    return {FORMAT_CHANGES_KEY: changes} if changes else {}
