"""The FastAPI app without Ray (called in-process): the generic answer to an unexpected error,
the metrics route's token, the OpenAPI form fields, no page that loads from another host."""

from __future__ import annotations

import asyncio
import json

import pytest

from fusion_ray.serve.limits import ApiError
from fusion_ray.serve.schemas import SwapOptions
from tests.serve.helpers import ingress_core, ingress_core_with


def test_unexpected_errors_get_a_generic_answer():
    import json

    from ray.exceptions import ActorUnavailableError
    from starlette.requests import Request

    from fusion_ray.serve.app import create_api

    core = ingress_core(retry_after_s=3)
    handler = create_api(core).exception_handlers[Exception]
    request = Request({"type": "http", "method": "POST", "path": "/v1/swap", "headers": []})
    response = asyncio.run(handler(request, RuntimeError("/srv/models/secret.onnx: bad")))
    assert response.status_code == 500
    body = json.loads(response.body)
    assert body["error"] == "internal_error" and "secret" not in body["detail"] and "RuntimeError" not in body["detail"]
    response = asyncio.run(handler(request, ActorUnavailableError("restarting", None)))
    assert response.status_code == 503 and response.headers["Retry-After"] == "3"


def test_the_metrics_route_needs_the_token_off_loopback():
    from starlette.requests import Request

    from fusion_ray.serve.app import create_api

    core = ingress_core_with({"auth": {"token": "t0k", "token_env": None}})
    route = next(r for r in create_api(core).routes if getattr(r, "path", "") == "/metrics")
    request = Request({"type": "http", "method": "GET", "path": "/metrics", "headers": [],
                       "server": ("10.0.0.5", 8000)})
    with pytest.raises(ApiError) as err:
        asyncio.run(route.endpoint(request, None))  # type: ignore[attr-defined]
    assert err.value.status == 401
    core.authorise_metrics("t0k", "10.0.0.5")  # the token opens it
    core.authorise_metrics(None, "127.0.0.1")  # loopback: public
    public = ingress_core_with({"auth": {"token": "t0k", "token_env": None, "metrics_public": True}})
    public.authorise_metrics(None, "10.0.0.5")


def test_openapi_declares_the_multipart_fields():
    from fusion_ray.serve.app import create_api

    spec = create_api(ingress_core()).openapi()

    def form(path: str) -> dict:
        body = spec["paths"][path]["post"]["requestBody"]
        assert body["required"] is True
        return body["content"]["multipart/form-data"]["schema"]

    swap = form("/v1/swap")
    assert swap["required"] == ["target"]
    assert set(swap["properties"]) == {"target", "source", *SwapOptions.model_fields}
    assert {"source_id", "select", "face_index", "enhance", "blend", "format", "jpeg_quality",
            "strict"} <= set(swap["properties"])
    assert swap["properties"]["target"]["format"] == "binary"
    assert swap["properties"]["source"]["items"]["contentMediaType"] == "application/octet-stream"
    assert swap["properties"]["select"]["anyOf"][0]["enum"] == ["all", "largest", "index"]
    sources = form("/v1/sources")
    assert sources["required"] == ["image"] and sources["properties"]["image"]["type"] == "array"
    assert sources["properties"]["image"]["items"]["format"] == "binary"


def _asgi_get(app, path: str) -> tuple[int, bytes]:
    """GET ``path`` from an ASGI app in-process (no network): (status, body)."""
    sent: list[dict] = []

    async def receive() -> dict:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict) -> None:
        sent.append(message)

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET", "scheme": "http",
             "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "", "headers": [],
             "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 80)}
    asyncio.run(app(scope, receive, send))
    status = next(m["status"] for m in sent if m["type"] == "http.response.start")
    return status, b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")


def test_no_page_loads_anything_from_another_host():
    """/docs and /redoc loaded Swagger UI and ReDoc from a CDN (blank offline): they are off; the
    schema is served, and the pages that are served reference no other host."""
    import re

    from fusion_ray.serve.app import create_api

    api = create_api(ingress_core())
    assert _asgi_get(api, "/docs")[0] == 404 and _asgi_get(api, "/redoc")[0] == 404
    status, body = _asgi_get(api, "/openapi.json")
    assert status == 200 and "/v1/swap" in json.loads(body)["paths"]
    status, page = _asgi_get(api, "/live")
    assert status == 200 and b"getUserMedia" in page
    assert not re.findall(rb"(?:src|href)\s*=\s*[\"']?(?:https?:)?//", page)  # no script or style from elsewhere
