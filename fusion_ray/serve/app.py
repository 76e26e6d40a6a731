"""The FastAPI ingress and ``build_app(args)``: the online API on Ray Serve.

Request path of ``POST /v1/swap`` (stage classes shared with the Ray Data pipeline)::

    ingress: authorise -> admit (in-flight limit) -> read body (capped) -> parse -> check image
             headers -> decode
      |-> Detector.detect        (DetectStage: detect, select, swap crops)      } concurrently
      |-> ServiceState.get_source / Detector.source_face + Swapper.embed        }
    -> Swapper.swap (SwapStage, @serve.batch) -> ingress: PasteStage
    -> [Enhancer.enhance (EnhanceStage, @serve.batch) -> ingress: PasteEnhancedStage]
    -> ingress: encode (PNG/JPEG with stand-in metadata) -> response

Run it with ``fusion-ray serve --config configs/serve.yaml`` or ``serve run configs/serve.yaml``.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import numpy as np
from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from ray import serve
from ray.exceptions import RayActorError, RayTaskError
from ray.serve import Application
from ray.serve.config import BackpressureConfig
from ray.serve.exceptions import BackPressureError, RayServeException
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

from fusion_ray import __version__
from fusion_ray.config import EngineConfig
from fusion_ray.engine import Engine, ModelInfo
from fusion_ray.errors import InputError
from fusion_ray.image import output_metadata
from fusion_ray.imageio import LoadedImage, decode_image, encode_image
from fusion_ray.pipeline.stages import PasteEnhancedStage, PasteStage, object_column
from fusion_ray.serve.deployments import (
    DetectorDeployment,
    EnhancerDeployment,
    ServiceStateDeployment,
    SwapperDeployment,
)
from fusion_ray.serve.limits import (
    ApiError,
    Form,
    ImageHeader,
    InflightLimiter,
    Overloaded,
    Part,
    boundary_of,
    check_content_length,
    check_image,
    parse_multipart,
    read_capped_within,
    wait_for,
)
from fusion_ray.serve.metrics import MetricsRecorder
from fusion_ray.serve.schemas import (
    FACES_DETECTED_HEADER,
    FACES_SWAPPED_HEADER,
    MEDIA_TYPES,
    STAND_IN_HEADER,
    SUFFIXES,
    ErrorBody,
    Health,
    Readiness,
    SourceCreated,
    SourceInfo,
    SwapOptions,
    error_responses,
    sources_request_schema,
    swap_request_schema,
)
from fusion_ray.serve.settings import DeploymentSettings, ServeSettings, parse_settings
from fusion_ray.types import SourceIdentity

log = logging.getLogger(__name__)

METRICS_FLUSH_S = 0.5
READY_TIMEOUT_S = 5.0


DOWNSTREAM_ERRORS = (RayTaskError, RayActorError, RayServeException)
"""Ray's errors from a call to another deployment (answered by :func:`downstream_error`)."""


def downstream_error(exc: BaseException, stage: str, retry_headers: dict[str, str]) -> ApiError:
    """The answer to one of :data:`DOWNSTREAM_ERRORS` from a downstream call.

    A replica that is gone or restarting (RayActorError, ActorUnavailableError, which subclasses it;
    Serve's own errors) is a 503 with Retry-After. A deployment method that raised (RayTaskError) is
    a 500 naming only the stage: the remote traceback is logged here, never sent to the client.
    """
    if isinstance(exc, RayTaskError):
        log.error("the %s stage raised", stage, exc_info=exc)
        return ApiError(500, "stage_failed", f"the {stage} stage failed")
    log.warning("the %s stage is unavailable: %s: %s", stage, type(exc).__name__, exc)
    return ApiError(503, "stage_unavailable", f"the {stage} stage is unavailable; retry later", retry_headers)


def _error_response(exc: ApiError) -> JSONResponse:
    return JSONResponse(ErrorBody(error=exc.code, detail=exc.detail).model_dump(), status_code=exc.status,
                        headers=exc.headers)


async def _first_error_cancels(*aws: Awaitable[Any]) -> list[Any]:
    """Run awaitables concurrently; on the first failure cancel the rest and raise it."""
    tasks = [asyncio.ensure_future(a) for a in aws]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


class IngressCore:
    """The ingress' work, independent of how Serve wraps it (handles are duck-typed)."""

    def __init__(self, settings: ServeSettings, detector: Any, swapper: Any, enhancer: Any | None,
                 state: Any) -> None:
        self.settings = settings
        self.limits = settings.limits
        self.detector = detector
        self.swapper = swapper
        self.enhancer = enhancer
        self.state = state
        self.token = settings.auth.resolve_token()
        if self.token is None:
            log.warning("no API token configured (auth.token or $%s): the /v1 endpoints are open",
                        settings.auth.token_env)
        self.limiter = InflightLimiter(self.limits.max_inflight, self.limits.retry_after_s)
        self.metrics = MetricsRecorder()
        self.replica = uuid.uuid4().hex[:8]
        cfg = settings.engine.in_ray_actor(settings.deployments.ingress.num_gpus > 0)
        budget = settings.deployments.ingress.threads_budget()  # also sizes OpenCV's thread pool
        plain_cfg = cfg.model_copy(update={"enhance": cfg.enhance.model_copy(update={"enabled": False})})
        enhance_cfg: EngineConfig = cfg.model_copy(update={"enhance": cfg.enhance.model_copy(update={"enabled": True})})
        self.paste_plain = PasteStage(plain_cfg, cpu_budget=budget)
        self.paste_for_enhance = PasteStage(enhance_cfg, cpu_budget=budget)
        self.paste_enhanced = PasteEnhancedStage(enhance_cfg, cpu_budget=budget)
        self._models: dict[str, ModelInfo] | None = None
        self._metadata: dict[bool, dict[str, str]] = {}
        self._last_flush = time.monotonic()
        self._flushing: asyncio.Task[None] | None = None

    # ------------------------------------------------------------ helpers
    def retry_headers(self) -> dict[str, str]:
        return {"Retry-After": str(self.limits.retry_after_s)}

    async def call(self, stage: str, make: Callable[[], Any]) -> Any:
        """Call a downstream deployment, timing it; backpressure or a lost replica -> 503, timeout -> 504,
        a method that raised -> 500 (see :func:`downstream_error`)."""
        start = time.perf_counter()
        try:
            return await wait_for(make(), self.limits.stage_timeout_s, stage)
        except BackPressureError as exc:
            self.metrics.inc("fusion_ray_rejected_total", reason=f"{stage}_queue_full")
            raise ApiError(503, "overloaded", f"the {stage} stage is at its queue limit ({exc}); retry later",
                           self.retry_headers()) from exc
        except DOWNSTREAM_ERRORS as exc:
            raise downstream_error(exc, stage, self.retry_headers()) from exc
        finally:
            self.metrics.stage(stage, time.perf_counter() - start)

    async def timed_thread(self, stage: str, func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return await asyncio.to_thread(func, *args, **kwargs)
        finally:
            self.metrics.stage(stage, time.perf_counter() - start)

    def check_token(self, credentials: HTTPAuthorizationCredentials | None) -> None:
        if self.token is None:
            return
        given = credentials.credentials if credentials is not None else ""
        if not given or not hmac.compare_digest(given.encode(), self.token.encode()):
            self.metrics.inc("fusion_ray_rejected_total", reason="unauthorized")
            raise ApiError(401, "unauthorized", "missing or wrong bearer token (Authorization: Bearer <token>)",
                           {"WWW-Authenticate": "Bearer"})

    async def read_form(self, request: Request) -> Form:
        limit = self.limits.max_body_bytes
        check_content_length(request.headers.get("content-length"), limit)
        content_type = request.headers.get("content-type")
        boundary_of(content_type)  # 415 before reading a body we cannot use
        start = time.perf_counter()
        try:
            body = await read_capped_within(request.stream(), limit, self.limits.receive_timeout_s)
        except ClientDisconnect as exc:
            raise ApiError(400, "client_disconnected", "the client closed the connection mid-body") from exc
        self.metrics.stage("receive", time.perf_counter() - start)
        return parse_multipart(body, content_type, max_parts=self.limits.max_source_images + 16)

    async def decode(self, part: Part, header: ImageHeader, name: str) -> LoadedImage:
        try:
            return await self.timed_thread("decode", decode_image, part.data, name, self.limits.max_pixels)  # type: ignore[no-any-return]
        except InputError as exc:
            raise ApiError(422, "invalid_image", f"{name} ({header.format}) could not be decoded: {exc}") from exc

    def record_batch(self, deployment: str, result: dict[str, Any]) -> None:
        record = result.get("batch")
        if record:
            self.metrics.batch(deployment, int(record["requests"]), int(record["faces"]), float(record["compute_s"]))

    async def models(self) -> dict[str, ModelInfo]:
        """Model info of every deployment (fetched once; replicas load their models before serving)."""
        if self._models is None:
            calls = [self.call("info", lambda: self.detector.model_info.remote()),
                     self.call("info", lambda: self.swapper.model_info.remote())]
            enhancer = self.enhancer
            if enhancer is not None:
                calls.append(self.call("info", lambda: enhancer.model_info.remote()))
            merged: dict[str, ModelInfo] = {}
            for info in await asyncio.gather(*calls):
                merged.update(info)
            self._models = merged
        return self._models

    async def stand_ins(self, enhance: bool) -> list[str]:
        models = await self.models()
        cfg = self.settings.engine.models
        used = [cfg.detector, cfg.embedder, cfg.swapper] + ([cfg.enhancer] if enhance else [])
        return sorted(name for name in used if name in models and models[name].stand_in)

    async def metadata(self, enhance: bool) -> dict[str, str]:
        """PNG/JPEG metadata of outputs (fusion_ray.image.output_metadata over the models used)."""
        if enhance not in self._metadata:
            models = await self.models()
            cfg = self.settings.engine
            names = {cfg.models.detector, cfg.models.embedder, cfg.models.swapper}
            if enhance:
                names.add(cfg.models.enhancer)
            info = {n: m for n, m in models.items() if n in names}
            self._metadata[enhance] = output_metadata(Engine(cfg, model_info=info))
        return self._metadata[enhance]

    async def flush_metrics(self) -> None:
        snap = self.metrics.take()
        if not snap.empty():
            try:
                await self.state.merge_metrics.remote(snap)
            except Exception:  # metrics must never fail a request
                log.exception("could not merge metrics into the state deployment")
        self._last_flush = time.monotonic()

    def maybe_flush(self) -> None:
        if time.monotonic() - self._last_flush < METRICS_FLUSH_S:
            return
        if self._flushing is None or self._flushing.done():
            self._last_flush = time.monotonic()
            self._flushing = asyncio.ensure_future(self.flush_metrics())

    async def admitted(self, endpoint: str, work: Callable[[], Awaitable[Response]]) -> Response:
        """Run one request within the in-flight limit, counting it by endpoint and status."""
        start = time.perf_counter()
        status = 500
        try:
            with self.limiter.slot():
                response = await work()
            status = response.status_code
            return response
        except ApiError as exc:
            status = exc.status
            if isinstance(exc, Overloaded):
                self.metrics.inc("fusion_ray_rejected_total", reason="inflight_limit")
            raise
        finally:
            self.metrics.inc("fusion_ray_requests_total", endpoint=endpoint, status=str(status))
            self.metrics.observe("fusion_ray_request_seconds", time.perf_counter() - start, endpoint=endpoint)
            self.maybe_flush()

    # ----------------------------------------------------------- identities
    async def identity_from_images(self, parts: Sequence[Part], headers: Sequence[ImageHeader]) -> SourceIdentity:
        if not parts:
            raise ApiError(422, "missing_field", "no source image given")
        if len(parts) > self.limits.max_source_images:
            raise ApiError(422, "too_many_sources",
                           f"{len(parts)} source images; at most {self.limits.max_source_images}")

        async def one(i: int, part: Part, header: ImageHeader) -> np.ndarray:
            name = f"source image {part.filename or f'#{i + 1}'}"
            loaded = await self.decode(part, header, name)
            crop = await self.call("source_detect", lambda: self.detector.source_face.remote(loaded.frame))
            if crop is None:
                raise ApiError(422, "no_face_in_source", f"no face found in {name}")
            return crop  # type: ignore[no-any-return]

        # One source image at a time: at most one decoded source frame per request is alive, which
        # keeps the memory bound of limits.max_inflight (sources are rare next to swaps).
        crops = [await one(i, p, h) for i, (p, h) in enumerate(zip(parts, headers, strict=True))]
        result = await self.call("embed", lambda: self.swapper.embed.remote(np.stack(crops)))
        self.record_batch("embedder", result)
        return result["identity"]  # type: ignore[no-any-return]

    def check_sources(self, parts: Sequence[Part]) -> list[ImageHeader]:
        return [check_image(p.data, f"source image {p.filename or f'#{i + 1}'}", self.limits.max_pixels)
                for i, p in enumerate(parts)]

    # ------------------------------------------------------------- endpoints
    async def create_source(self, request: Request) -> JSONResponse:
        form = await self.read_form(request)
        parts = form.files("image")
        unknown = sorted({p.name for p in form.parts} - {"image"})
        if unknown:
            raise ApiError(422, "invalid_field", f"unknown field(s) {unknown}; send the images as 'image'")
        headers = self.check_sources(parts)
        identity = await self.identity_from_images(parts, headers)
        source_id = await self.call("store", lambda: self.state.put_source.remote(identity))
        stand_ins = await self.stand_ins(enhance=False)
        body = SourceCreated(source_id=source_id, num_images=identity.num_images, stand_in_models=stand_ins)
        extra = {STAND_IN_HEADER: ",".join(stand_ins)} if stand_ins else {}
        return JSONResponse(body.model_dump(), status_code=201, headers=extra)

    async def swap(self, request: Request) -> Response:
        timings: dict[str, float] = {}
        form = await self.read_form(request)
        known = {"target", "source", *SwapOptions.model_fields}
        unknown = sorted({p.name for p in form.parts} - known)
        if unknown:
            raise ApiError(422, "invalid_field", f"unknown field(s) {unknown}")
        options = SwapOptions.from_fields(form.text_fields())
        target = form.file("target")
        if target is None:
            raise ApiError(422, "missing_field", "the 'target' image is required")
        sources = form.files("source")
        if options.source_id and sources:
            raise ApiError(422, "invalid_field", "give either source_id or source image(s), not both")
        if not options.source_id and not sources:
            raise ApiError(422, "missing_field", "a source is required: source_id or source image(s)")
        if options.enhance and self.enhancer is None:
            raise ApiError(422, "enhance_unavailable", "this service runs without the enhancer")
        target_header = check_image(target.data, "target image", self.limits.max_pixels)
        source_headers = self.check_sources(sources)
        mode = options.select or self.settings.engine.selection.mode
        index = options.face_index if options.face_index is not None else self.settings.engine.selection.index

        async def detect_target() -> tuple[LoadedImage, dict[str, Any]]:
            loaded = await self.decode(target, target_header, "target image")
            start = time.perf_counter()
            found = await self.call("detect", lambda: self.detector.detect.remote(loaded.frame, mode, index))
            timings["detect"] = time.perf_counter() - start
            return loaded, found

        async def get_identity() -> tuple[str, SourceIdentity]:
            start = time.perf_counter()
            try:
                if options.source_id:
                    source_id = options.source_id
                    identity = await self.call("source_lookup", lambda: self.state.get_source.remote(source_id))
                    if identity is None:
                        raise ApiError(404, "unknown_source", f"no source with id {source_id!r} "
                                       "(unknown, deleted, or dropped from the bounded store); register it again")
                    return source_id, identity
                identity = await self.identity_from_images(sources, source_headers)
                return "inline_" + uuid.uuid4().hex, identity
            finally:
                timings["source"] = time.perf_counter() - start

        (loaded, found), (source_key, identity) = await _first_error_cancels(detect_target(), get_identity())
        self.metrics.stage("detect_compute", float(found["compute_s"]))  # the detect stage minus the hop
        if found["error"]:
            raise ApiError(500, "stage_failed", f"detection failed: {found['error']}")
        stand_ins = await self.stand_ins(options.enhance)
        headers = {FACES_DETECTED_HEADER: str(found["faces_detected"]),
                   FACES_SWAPPED_HEADER: str(found["faces_selected"])}
        if stand_ins:
            headers[STAND_IN_HEADER] = ",".join(stand_ins)
        if found["faces_selected"] == 0:
            return await self._unchanged(options, target, target_header, loaded, found, headers, mode, index)

        start = time.perf_counter()
        swapped = await self.call("swap", lambda: self.swapper.swap.remote(found["crops"], identity, source_key))
        timings["swap"] = time.perf_counter() - start
        self.record_batch("swapper", swapped)
        if swapped["error"]:
            raise ApiError(500, "stage_failed", f"swap failed: {swapped['error']}")
        paste = self.paste_for_enhance if options.enhance else self.paste_plain
        batch = {"frame": object_column([loaded.frame]), "crops": object_column([swapped["crops"]]),
                 "affines": object_column([found["affines"]]), "landmarks": object_column([found["landmarks"]])}
        start = time.perf_counter()
        out = await self.timed_thread("paste", paste, batch)
        timings["paste"] = time.perf_counter() - start
        if out["error"][0]:
            raise ApiError(500, "stage_failed", f"paste failed: {out['error'][0]}")
        if options.enhance:
            blend = options.blend if options.blend is not None else self.settings.engine.enhance.blend
            start = time.perf_counter()
            enhanced = await self.call("enhance",
                                       lambda: self.enhancer.enhance.remote(out["enhance_crops"][0], blend))  # type: ignore[union-attr]
            timings["enhance"] = time.perf_counter() - start
            self.record_batch("enhancer", enhanced)
            if enhanced["error"]:
                raise ApiError(500, "stage_failed", f"enhancement failed: {enhanced['error']}")
            out["enhance_crops"] = object_column([enhanced["crops"]])
            start = time.perf_counter()
            out = await self.timed_thread("paste_enhanced", self.paste_enhanced, out)
            timings["paste_enhanced"] = time.perf_counter() - start
            if out["error"][0]:
                raise ApiError(500, "stage_failed", f"paste failed: {out['error'][0]}")
        metadata = await self.metadata(options.enhance)
        start = time.perf_counter()
        data = await self.timed_thread("encode", encode_image, np.asarray(out["frame"][0]), SUFFIXES[options.format],
                                       alpha=loaded.alpha, metadata=metadata, jpeg_quality=options.jpeg_quality)
        timings["encode"] = time.perf_counter() - start
        headers["Server-Timing"] = ", ".join(f"{k};dur={v * 1000:.1f}" for k, v in timings.items())
        return Response(data, media_type=MEDIA_TYPES[options.format], headers=headers)

    async def _unchanged(self, options: SwapOptions, target: Part, header: ImageHeader, loaded: LoadedImage,
                         found: dict[str, Any], headers: dict[str, str], mode: str, index: int) -> Response:
        if found["faces_detected"] == 0:
            reason = "no face found in the target image"
        else:
            reason = (f"{found['faces_detected']} face(s) in the target image, none selected "
                      f"(select={mode}, face_index={index})")
        if options.strict:
            raise ApiError(422, "no_face_in_target", reason)
        headers.pop(STAND_IN_HEADER, None)  # no model output in it
        headers["X-Fusion-Ray-Note"] = reason + "; the image is returned unchanged"
        if header.format == options.format:
            return Response(target.data, media_type=MEDIA_TYPES[options.format], headers=headers)
        data = await self.timed_thread("encode", encode_image, loaded.frame, SUFFIXES[options.format],
                                       alpha=loaded.alpha, jpeg_quality=options.jpeg_quality)
        return Response(data, media_type=MEDIA_TYPES[options.format], headers=headers)

    async def readiness(self) -> Readiness:
        checks: dict[str, Callable[[], Any]] = {
            "Detector": lambda: self.detector.model_info.remote(),
            "Swapper": lambda: self.swapper.model_info.remote(),
            "ServiceState": lambda: self.state.ping.remote(),
        }
        if self.enhancer is not None:
            checks["Enhancer"] = lambda: self.enhancer.model_info.remote()  # type: ignore[union-attr]

        async def probe(make: Callable[[], Any]) -> tuple[str, dict[str, ModelInfo]]:
            try:
                return "ready", await asyncio.wait_for(_awaited(make()), READY_TIMEOUT_S)
            except asyncio.TimeoutError:
                return f"no answer within {READY_TIMEOUT_S:g} s", {}
            except Exception as exc:  # the type only: /readyz needs no token
                log.warning("readiness probe failed: %s: %s", type(exc).__name__, exc)
                return f"failed ({type(exc).__name__})", {}

        results = await asyncio.gather(*(probe(make) for make in checks.values()))
        states = {name: state for name, (state, _) in zip(checks, results, strict=True)}
        models: dict[str, ModelInfo] = {}
        for _, info in results:
            models.update(info)
        ready = all(state == "ready" for state in states.values())
        return Readiness(status="ready" if ready else "not_ready", deployments=states,
                         models={name: info.path for name, info in sorted(models.items())},
                         stand_in_models=sorted(n for n, i in models.items() if i.stand_in))

    async def metrics_text(self) -> str:
        await self.flush_metrics()
        gauges = [
            ("fusion_ray_inflight_requests", "Requests the ingress replica is working on.",
             {"replica": self.replica}, float(self.limiter.inflight)),
            ("fusion_ray_inflight_peak", "Most requests the ingress replica worked on at once.",
             {"replica": self.replica}, float(self.limiter.peak)),
            ("fusion_ray_inflight_limit", "The ingress replica's in-flight limit.",
             {"replica": self.replica}, float(self.limiter.limit)),
        ]
        return await self.call("metrics", lambda: self.state.render_metrics.remote(gauges))  # type: ignore[no-any-return]


async def _awaited(awaitable: Any) -> Any:
    return await awaitable


def create_api(core: IngressCore) -> FastAPI:
    """The FastAPI app over an :class:`IngressCore` (routes, auth, error bodies, OpenAPI)."""
    api = FastAPI(
        title="fusion_ray",
        version=__version__,
        description="Face swapping on Ray Serve. Outputs made with STAND-IN models (see the "
                    f"`{STAND_IN_HEADER}` header and the image metadata) are not real face swaps.",
    )
    bearer = HTTPBearer(auto_error=False, description="Set when the service has an API token.")

    def authorise(credentials: HTTPAuthorizationCredentials | None = Depends(bearer)) -> None:  # noqa: B008
        core.check_token(credentials)

    @api.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError) -> JSONResponse:
        return _error_response(exc)

    @api.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        return _error_response(ApiError(exc.status_code, code, str(exc.detail)))

    @api.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        return _error_response(ApiError(422, "invalid_request", str(exc.errors())))

    @api.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        if isinstance(exc, DOWNSTREAM_ERRORS):
            return _error_response(downstream_error(exc, "downstream", core.retry_headers()))
        # the details (maybe a traceback, paths, data) stay in the server log
        log.error("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
        return _error_response(ApiError(500, "internal_error", "internal server error (logged on the server)"))

    image_responses: dict[int | str, dict[str, Any]] = {
        200: {"content": {"image/png": {}, "image/jpeg": {}},
              "description": "The swapped image (the unchanged target when no face is swapped, unless strict)."}}

    @api.post("/v1/swap", tags=["v1"], summary="Swap the source identity into the target image",
              dependencies=[Depends(authorise)], response_class=Response,
              responses={**image_responses, **error_responses(400, 401, 404, 408, 413, 415, 422, 503, 504)},
              openapi_extra={"requestBody": swap_request_schema()})
    async def swap(request: Request) -> Response:
        return await core.admitted("/v1/swap", lambda: core.swap(request))

    @api.post("/v1/sources", tags=["v1"], status_code=201, response_model=SourceCreated,
              summary="Register a source identity (embedded once, kept in a bounded store)",
              dependencies=[Depends(authorise)],
              responses=error_responses(400, 401, 408, 413, 415, 422, 503, 504),
              openapi_extra={"requestBody": sources_request_schema()})
    async def create_source(request: Request) -> Response:
        return await core.admitted("/v1/sources", lambda: core.create_source(request))

    @api.get("/v1/sources/{source_id}", tags=["v1"], response_model=SourceInfo,
             dependencies=[Depends(authorise)], responses=error_responses(401, 404))
    async def get_source(source_id: str) -> SourceInfo:
        identity = await core.call("source_lookup", lambda: core.state.get_source.remote(source_id))
        if identity is None:
            raise ApiError(404, "unknown_source", f"no source with id {source_id!r}")
        return SourceInfo(source_id=source_id, num_images=identity.num_images)

    @api.delete("/v1/sources/{source_id}", tags=["v1"], status_code=204, response_class=Response,
                dependencies=[Depends(authorise)], responses=error_responses(401, 404))
    async def delete_source(source_id: str) -> Response:
        if not await core.call("store", lambda: core.state.delete_source.remote(source_id)):
            raise ApiError(404, "unknown_source", f"no source with id {source_id!r}")
        return Response(status_code=204)

    @api.get("/healthz", tags=["ops"], response_model=Health, summary="Liveness")
    async def healthz() -> Health:
        return Health()

    @api.get("/readyz", tags=["ops"], response_model=Readiness, summary="Models loaded in every deployment",
             responses={503: {"model": Readiness, "description": "Not ready"}})
    async def readyz() -> JSONResponse:
        ready = await core.readiness()
        return JSONResponse(ready.model_dump(), status_code=200 if ready.status == "ready" else 503)

    @api.get("/metrics", tags=["ops"], response_class=PlainTextResponse,
             summary="Prometheus metrics (per-stage latency, batch sizes, requests, rejections)")
    async def metrics() -> PlainTextResponse:
        return PlainTextResponse(await core.metrics_text(), media_type="text/plain; version=0.0.4; charset=utf-8")

    return api


@serve.deployment(name="Ingress")
@serve.ingress()
class IngressDeployment(IngressCore):
    """The HTTP ingress: decode, validate, authorise, encode; model work goes to the deployments."""

    def __serve_build_asgi_app__(self) -> FastAPI:
        return create_api(self)


def _options(dep: DeploymentSettings, max_ongoing: int, **extra: Any) -> dict[str, Any]:
    return {
        "num_replicas": dep.num_replicas,
        "ray_actor_options": {"num_cpus": dep.num_cpus, "num_gpus": dep.num_gpus},
        "max_ongoing_requests": max_ongoing,
        "max_queued_requests": dep.max_queued_requests,
        **extra,
    }


def build_app(args: dict[str, Any]) -> Application:
    """The Serve application from its ``args`` (validated into :class:`ServeSettings`)."""
    settings = parse_settings(args)
    deps = settings.deployments
    backpressure = BackpressureConfig(status_code=503, retry_after_s=float(settings.limits.retry_after_s))
    detector = DetectorDeployment.options(  # type: ignore[attr-defined]
        **_options(deps.detector, deps.detector.max_ongoing_requests or 4, backpressure_config=backpressure),
    ).bind(settings)
    swapper = SwapperDeployment.options(  # type: ignore[attr-defined]
        **_options(deps.swapper, settings.swapper_max_ongoing(), backpressure_config=backpressure),
    ).bind(settings)
    enhancer = None
    if deps.enhancer_enabled:
        enhancer = EnhancerDeployment.options(  # type: ignore[attr-defined]
            **_options(deps.enhancer, settings.enhancer_max_ongoing(), backpressure_config=backpressure),
        ).bind(settings)
    state = ServiceStateDeployment.options(  # type: ignore[attr-defined]
        **_options(deps.state, deps.state.max_ongoing_requests or 256)).bind(settings)
    return IngressDeployment.options(  # type: ignore[attr-defined,no-any-return]
        **_options(deps.ingress, settings.ingress_max_ongoing(), backpressure_config=backpressure),
    ).bind(settings, detector, swapper, enhancer, state)


def __getattr__(name: str) -> Any:
    """``default_app``: the application with default settings, for ``serve build fusion_ray.serve.app:default_app``."""
    if name == "default_app":
        return build_app({})
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
