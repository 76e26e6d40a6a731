"""The FastAPI routes over :class:`~fusion_ray.serve.ingress.IngressCore`, and ``build_app(args)``.

Routes only map HTTP onto the core (its docstring shows a request's path); the multipart
bodies of ``/v1/swap`` and ``/v1/sources`` are read by the core under its limits, and their
fields are declared in the OpenAPI schema (``schemas.swap_request_schema``).

Run it with ``fusion-ray serve`` (the packaged default config) or ``serve run configs/serve.yaml``.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import Depends, FastAPI, Request, WebSocket
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from ray import serve
from ray.serve import Application
from ray.serve.config import BackpressureConfig, RequestRouterConfig
from starlette.exceptions import HTTPException as StarletteHTTPException

from fusion_ray import __version__
from fusion_ray.live.localhost import live_page
from fusion_ray.live.transport import StarletteTransport
from fusion_ray.serve.deployments import (
    DetectorDeployment,
    EnhancerDeployment,
    ServiceStateDeployment,
    SwapperDeployment,
)
from fusion_ray.serve.downstream import DOWNSTREAM_ERRORS, downstream_error
from fusion_ray.serve.fused import FusedDeployment
from fusion_ray.serve.ingress import IngressCore
from fusion_ray.serve.limits import ApiError, clip
from fusion_ray.serve.schemas import (
    STAND_IN_HEADER,
    ErrorBody,
    Health,
    Readiness,
    SourceCreated,
    SourceInfo,
    error_responses,
    sources_request_schema,
    swap_request_schema,
)
from fusion_ray.serve.settings import (
    DeploymentSettings,
    ServeSettings,
    ShutdownSettings,
    parse_settings,
    resolve_placement,
)
from fusion_ray.serve.timing import Timings
from fusion_ray.serve.webrtc import SESSION_ROUTER

__all__ = ["IngressCore", "IngressDeployment", "build_app", "create_api"]

log = logging.getLogger(__name__)

IDLE_STOP_S = 5.0
"""Stop timeout of the deployments behind the ingress: it has drained, so they are idle."""


def _error_response(exc: ApiError) -> JSONResponse:
    return JSONResponse(ErrorBody(error=exc.code, detail=exc.detail).model_dump(), status_code=exc.status,
                        headers=exc.headers)


def _token(credentials: HTTPAuthorizationCredentials | None) -> str | None:
    return credentials.credentials if credentials is not None else None


def create_api(core: IngressCore) -> FastAPI:
    """The FastAPI app over an :class:`IngressCore` (routes, auth, error bodies, OpenAPI)."""
    api = FastAPI(
        # Swagger UI and ReDoc load their scripts from a CDN: blank pages on an offline host. The
        # schema is served (/openapi.json) for any viewer or client generator to load.
        docs_url=None,
        redoc_url=None,
        title="fusion_ray",
        version=__version__,
        description="Face swapping on Ray Serve. Outputs made with STAND-IN models (see the "
                    f"`{STAND_IN_HEADER}` header and the image metadata) are not real face swaps.",
    )
    bearer = HTTPBearer(auto_error=False, description="Set when the service has an API token.")
    _error_handlers(api, core)
    _v1_routes(api, core, bearer)
    _live_routes(api, core, bearer)
    _ops_routes(api, core, bearer)
    return api


def _live_routes(api: FastAPI, core: IngressCore, bearer: HTTPBearer) -> None:
    def authorise(credentials: HTTPAuthorizationCredentials | None = Depends(bearer)) -> None:  # noqa: B008
        core.authorise(_token(credentials))

    @api.get("/live", tags=["live"], response_class=HTMLResponse, summary="The live-stream page (webcam in, swap out)")
    async def page() -> HTMLResponse:
        return HTMLResponse(live_page())

    @api.websocket("/v1/stream")
    async def stream(websocket: WebSocket) -> None:
        """Live stream (protocol in the README); the token travels in the start message."""
        await websocket.accept()
        await core.live.serve(StarletteTransport(websocket))

    sdp_body = {"requestBody": {"required": True, "content": {"application/sdp": {"schema": {"type": "string"}}}}}
    sdp_answer: dict[int | str, dict[str, Any]] = {201: {"content": {"application/sdp": {}},
                                                         "description": "The SDP answer (WHIP: Location names the session)."}}

    @api.post("/v1/whip", tags=["live"], status_code=201, response_class=Response, openapi_extra=sdp_body,
              summary="WebRTC ingest (WHIP): an SDP offer in, the swapped video back on the same connection",
              responses={**sdp_answer, **error_responses(400, 401, 403, 404, 413, 415, 422, 501, 503)})
    async def whip(request: Request, credentials: HTTPAuthorizationCredentials | None = Depends(bearer)) -> Response:  # noqa: B008
        """The query takes the live start message's fields (``source_id``, ``select``, ``face_index``,
        ``deadline_ms``, ``enhance``, FaceFusion's options; a list as repeated or comma-separated values)."""
        core.authorise(_token(credentials))
        query: dict[str, list[str]] = {}
        for key, value in request.query_params.multi_items():
            query.setdefault(key, []).append(value)
        return await core.webrtc.publish(request, query, _token(credentials), Timings(core.metrics))

    @api.delete("/v1/whip/{session_id}", tags=["live"], response_class=Response, dependencies=[Depends(authorise)],
                summary="End a WebRTC session", responses=error_responses(401, 404, 501))
    async def whip_end(session_id: str) -> Response:
        return await core.webrtc.end(session_id, Timings(core.metrics))

    @api.post("/v1/whep/{session_id}", tags=["live"], status_code=201, response_class=Response,
              dependencies=[Depends(authorise)], openapi_extra=sdp_body,
              summary="WebRTC playback (WHEP): a viewer of a session's swapped video",
              responses={**sdp_answer, **error_responses(400, 401, 404, 413, 415, 422, 501, 503)})
    async def whep(session_id: str, request: Request) -> Response:
        return await core.webrtc.view(request, session_id, Timings(core.metrics))


def _error_handlers(api: FastAPI, core: IngressCore) -> None:
    @api.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError) -> JSONResponse:
        return _error_response(exc)

    @api.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        return _error_response(ApiError(exc.status_code, code, clip(str(exc.detail), 200)))

    @api.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        problems = "; ".join(f"{'.'.join(str(p) for p in e.get('loc', ()))}: {e.get('msg', '')}" for e in exc.errors())
        return _error_response(ApiError(422, "invalid_request", clip(problems, 500)))

    @api.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        if isinstance(exc, DOWNSTREAM_ERRORS):
            return _error_response(downstream_error(exc, "downstream", core.downstream.retry_headers))
        # the details (maybe a traceback, paths, data) stay in the server log
        log.error("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
        return _error_response(ApiError(500, "internal_error", "internal server error (logged on the server)"))


def _v1_routes(api: FastAPI, core: IngressCore, bearer: HTTPBearer) -> None:
    def authorise(credentials: HTTPAuthorizationCredentials | None = Depends(bearer)) -> None:  # noqa: B008
        core.authorise(_token(credentials))

    image_responses: dict[int | str, dict[str, Any]] = {
        200: {"content": {"image/png": {}, "image/jpeg": {}},
              "description": "The swapped image (the unchanged target when no face is swapped, unless strict)."}}

    @api.post("/v1/swap", tags=["v1"], summary="Swap the source identity into the target image",
              dependencies=[Depends(authorise)], response_class=Response,
              responses={**image_responses, **error_responses(400, 401, 403, 404, 408, 413, 415, 422, 503, 504)},
              openapi_extra={"requestBody": swap_request_schema()})
    async def swap(request: Request) -> Response:
        return await core.admitted("/v1/swap", request, core.swap)

    @api.post("/v1/sources", tags=["v1"], status_code=201, response_model=SourceCreated,
              summary="Register a source identity (embedded once, kept in a bounded store)",
              dependencies=[Depends(authorise)],
              responses=error_responses(400, 401, 408, 413, 415, 422, 503, 504),
              openapi_extra={"requestBody": sources_request_schema()})
    async def create_source(request: Request) -> Response:
        return await core.admitted("/v1/sources", request, core.create_source)

    @api.get("/v1/sources/{source_id}", tags=["v1"], response_model=SourceInfo,
             dependencies=[Depends(authorise)], responses=error_responses(401, 404))
    async def get_source(source_id: str) -> SourceInfo:
        identity = await core.source(Timings(core.metrics), source_id)
        return SourceInfo(source_id=source_id, num_images=identity.num_images)

    @api.delete("/v1/sources/{source_id}", tags=["v1"], status_code=204, response_class=Response,
                dependencies=[Depends(authorise)], responses=error_responses(401, 404))
    async def delete_source(source_id: str) -> Response:
        if not await core.downstream.delete_source(Timings(core.metrics), source_id):
            raise ApiError(404, "unknown_source", f"no source with id {clip(source_id)!r}")
        core.live.revoke_source(source_id)  # this replica's streams now; other replicas' at their next check
        return Response(status_code=204)


def _ops_routes(api: FastAPI, core: IngressCore, bearer: HTTPBearer) -> None:
    @api.get("/healthz", tags=["ops"], response_model=Health, summary="Liveness")
    async def healthz() -> Health:
        return Health()

    @api.get("/readyz", tags=["ops"], response_model=Readiness, summary="Models loaded in every deployment",
             responses={503: {"model": Readiness, "description": "Not ready"}})
    async def readyz(credentials: HTTPAuthorizationCredentials | None = Depends(bearer)) -> JSONResponse:  # noqa: B008
        ready = await core.readiness(_token(credentials))
        return JSONResponse(ready.model_dump(), status_code=200 if ready.status == "ready" else 503)

    @api.get("/metrics", tags=["ops"], response_class=PlainTextResponse, responses=error_responses(401),
             summary="Prometheus metrics (per-stage latency, batch sizes, requests, rejections)")
    async def metrics(request: Request,
                      credentials: HTTPAuthorizationCredentials | None = Depends(bearer)) -> PlainTextResponse:  # noqa: B008
        server = request.scope.get("server")  # the local address the connection arrived on
        core.authorise_metrics(_token(credentials), server[0] if server else None)
        return PlainTextResponse(await core.metrics_text(), media_type="text/plain; version=0.0.4; charset=utf-8")


@serve.deployment(name="Ingress")
@serve.ingress()
class IngressDeployment(IngressCore):
    """The HTTP ingress: decode, validate, authorise, encode; model work goes to the deployments."""

    def __serve_build_asgi_app__(self) -> FastAPI:
        return create_api(self)


def _options(dep: DeploymentSettings, max_ongoing: int, shutdown: ShutdownSettings, *,
             drain: bool = False, **extra: Any) -> dict[str, Any]:
    """A deployment's Serve options; ``drain``: it may take ``shutdown.drain_timeout_s`` to finish
    its requests when stopping (the ingress), the others stop as soon as they are idle."""
    return {
        "num_replicas": dep.num_replicas,
        "ray_actor_options": {"num_cpus": dep.num_cpus, "num_gpus": dep.num_gpus},
        "max_ongoing_requests": max_ongoing,
        "max_queued_requests": dep.max_queued_requests,
        "graceful_shutdown_wait_loop_s": shutdown.wait_loop_s,
        "graceful_shutdown_timeout_s": shutdown.drain_timeout_s if drain else IDLE_STOP_S,
        **extra,
    }


def node_gpus() -> list[float]:
    """GPUs of each alive node of the Ray cluster this process is in (none when it is in none)."""
    import ray

    if not ray.is_initialized():
        return []
    return [float(node.get("Resources", {}).get("GPU", 0.0)) for node in ray.nodes() if node.get("Alive")]


def build_app(args: dict[str, Any]) -> Application:
    """The Serve application from its ``args`` (validated into :class:`ServeSettings`), its chain
    placed fused or split (``placement``; ``auto`` resolved here, from the cluster's nodes)."""
    settings = parse_settings(args)
    placement = resolve_placement(settings.placement, node_gpus() if settings.placement == "auto" else [])
    settings = settings.model_copy(update={"placement": placement})
    deps = settings.deployments
    stop = settings.shutdown
    backpressure = BackpressureConfig(status_code=503, retry_after_s=float(settings.limits.retry_after_s))
    state = ServiceStateDeployment.options(  # type: ignore[attr-defined]
        **_options(deps.state, deps.state.max_ongoing_requests or 256, stop)).bind(settings)
    if placement == "fused":
        fused = FusedDeployment.options(  # type: ignore[attr-defined]
            **_options(deps.fused, settings.fused_max_ongoing(), stop, backpressure_config=backpressure,
                       request_router_config=RequestRouterConfig(request_router_class=SESSION_ROUTER)),  # type: ignore[arg-type]
        ).bind(settings, state)
        chain: tuple[Any, Any, Any] = (fused, fused, fused if deps.enhancer_enabled else None)
    else:
        chain = _split(settings, backpressure)
    return IngressDeployment.options(  # type: ignore[attr-defined,no-any-return]
        **_options(deps.ingress, settings.ingress_max_ongoing(), stop, drain=True, backpressure_config=backpressure),
    ).bind(settings, *chain, state)


def _split(settings: ServeSettings, backpressure: BackpressureConfig) -> tuple[Any, Any, Any]:
    """The per-model pools: detector, swapper, enhancer (or None)."""
    deps, stop = settings.deployments, settings.shutdown
    detector = DetectorDeployment.options(  # type: ignore[attr-defined]
        **_options(deps.detector, deps.detector.max_ongoing_requests or 4, stop, backpressure_config=backpressure),
    ).bind(settings)
    swapper = SwapperDeployment.options(  # type: ignore[attr-defined]
        **_options(deps.swapper, settings.swapper_max_ongoing(), stop, backpressure_config=backpressure),
    ).bind(settings)
    enhancer = None
    if deps.enhancer_enabled:
        enhancer = EnhancerDeployment.options(  # type: ignore[attr-defined]
            **_options(deps.enhancer, settings.enhancer_max_ongoing(), stop, backpressure_config=backpressure),
        ).bind(settings)
    return detector, swapper, enhancer


def __getattr__(name: str) -> Any:
    """``default_app``: the application with default settings, for ``serve build fusion_ray.serve.app:default_app``."""
    if name == "default_app":
        return build_app({})
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
