"""The Serve application over real HTTP on 127.0.0.1: one app for the whole module (its HTTP calls:
helpers.py; the in-process reference engine, photos and identities: conftest.py).

Models: the real SCRFD detector plus generated, labelled STAND-IN models (``models_config``).
Pixel tolerance: exact. PNG output is lossless, and the service runs the same stage code as
the engine on the same decoded frame; the stand-in inswapper has the real export's fixed
batch dimension of 1, so the batched swap call runs the model per face and a face's result
does not depend on which requests shared its batch. (With a batch-dynamic model on a GPU a
batched call may differ from batch 1 in the last bits; the checks here would then need a
tolerance of one grey level.)
"""

from __future__ import annotations

import http.client
import json
import threading
from concurrent.futures import ThreadPoolExecutor

import cv2
import numpy as np
import pytest
import requests

from fusion_ray.config import EnhanceConfig, SelectionConfig
from fusion_ray.core.facefusion_options import FACEFUSION_OPTIONS
from fusion_ray.imageio import decode_image, encode_image, read_jpeg_comments, read_png_text
from fusion_ray.serve.metrics import histogram_max_bucket
from tests.procs import free_port
from tests.serve.helpers import (
    AUTH,
    TOKEN,
    _inflight,
    _raw_request,
    _replies,
    _stalled_upload,
    _uploads,
    _wait_until,
    assert_error,
    decoded,
    metrics,
    png_bytes,
    register,
    swap,
    variant,
)
from tests.test_imageio import sideways_jpeg

pytestmark = pytest.mark.ray

MAX_INFLIGHT = 6
MAX_BODY = 3_000_000
MAX_PIXELS = 4_000_000
MAX_UPLOADS = 30
MAX_UPLOADS_PER_CLIENT = 8  # at least the concurrency the tests send from 127.0.0.1 at once
STAND_INS = "arcface_w600k_r50,inswapper_128"


@pytest.fixture(scope="module")
def service(ray_cluster, models_config):
    """The app, deployed once for the module; Serve is shut down at the end."""
    from ray import serve

    from fusion_ray.serve.app import build_app

    args = {
        "placement": "split",  # the per-model pools (tests/serve/test_placement.py: both placements)
        "engine": {"models": models_config.model_dump(mode="json"), "runtime": {"providers": ["cpu"]}},
        # A long batch window makes batching under concurrent requests certain on a busy host.
        "batching": {"swap": {"max_batch_size": 4, "batch_wait_timeout_s": 0.25},
                     "embed": {"max_batch_size": 4, "batch_wait_timeout_s": 0.01},
                     "enhance": {"max_batch_size": 2, "batch_wait_timeout_s": 0.01},
                     "adaptive_wait": False},  # always wait: batching is then certain (policy: test_batching)
        # The ingress queue holds more than the stalled-upload test's 24 connections: the proxy queues
        # a request until the replica answers its queue-length probe, slow on a loaded host (with 16
        # the 24 arriving at once were refused with "dropped due to backpressure", and so was /metrics).
        "deployments": {"ingress": {"num_cpus": 0.2, "max_ongoing_requests": 48, "max_queued_requests": 64},
                        "detector": {"num_cpus": 0.2, "max_ongoing_requests": 4, "max_queued_requests": 16},
                        "swapper": {"num_cpus": 0.2, "max_queued_requests": 16},
                        "enhancer": {"num_cpus": 0.1, "max_queued_requests": 16},
                        "state": {"num_cpus": 0.05}},
        # receive_timeout_s above the stalled-upload test's 60 s wait: on a loaded host its 24
        # connections may take longer than the default 30 s to all arrive (it failed so once).
        "limits": {"max_body_bytes": MAX_BODY, "max_pixels": MAX_PIXELS, "max_inflight": MAX_INFLIGHT,
                   "receive_timeout_s": 90,
                   "retry_after_s": 2, "max_source_images": 3, "max_uploads": MAX_UPLOADS,
                   "max_uploads_per_client": MAX_UPLOADS_PER_CLIENT},
        "auth": {"token": TOKEN, "token_env": None},
        "sources": {"max_count": 3},
    }
    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    try:
        serve.run(build_app(args), name="fusion_ray_test", route_prefix="/")
        yield f"http://127.0.0.1:{port}"
    finally:
        serve.shutdown()


BLANK_PNG = png_bytes(np.full((240, 320, 3), 90, np.uint8))


@pytest.fixture(scope="module")
def obama_id(service, photos):
    response = register(service, photos["obama"])
    assert response.status_code == 201, response.text
    return response.json()["source_id"]


# ------------------------------------------------------------------ ops endpoints
def test_health_readiness_and_openapi(service):
    assert requests.get(f"{service}/healthz", timeout=10).json() == {"status": "ok"}
    ready = requests.get(f"{service}/readyz", timeout=30)
    assert ready.status_code == 200, ready.text
    body = ready.json()
    assert body["status"] == "ready" and set(body["deployments"].values()) == {"ready"}
    assert set(body["deployments"]) == {"Detector", "Swapper", "Enhancer", "ServiceState"}
    assert body["stand_in_models"] == ["arcface_w600k_r50", "gfpgan_1.4", "inswapper_128"]
    assert "scrfd_2.5g" in body["models"]
    assert set(body["models"].values()) == {"loaded"} and "/" not in ready.text  # no token: no paths
    detailed = requests.get(f"{service}/readyz", headers=AUTH, timeout=30).json()
    assert detailed["models"]["scrfd_2.5g"].endswith(".onnx") and "/" in detailed["models"]["scrfd_2.5g"]
    spec = requests.get(f"{service}/openapi.json", timeout=10).json()
    swap_spec = spec["paths"]["/v1/swap"]["post"]
    schema = swap_spec["requestBody"]["content"]["multipart/form-data"]["schema"]
    assert schema["required"] == ["target"] and {"source_id", "source", "select", "enhance", "strict"} <= set(schema["properties"])
    assert {"target", "source", "source_id", "select", "face_index", "enhance", "blend", "format", "jpeg_quality",
            "strict", *FACEFUSION_OPTIONS} == set(schema["properties"])
    assert all(schema["properties"][name]["description"] for name in FACEFUSION_OPTIONS)  # FaceFusion's options
    assert "limits.max_pixel_boost" in swap_spec["responses"]["403"]["description"]
    assert schema["properties"]["target"]["format"] == "binary"
    image = spec["paths"]["/v1/sources"]["post"]["requestBody"]["content"]["multipart/form-data"]["schema"]
    assert image["required"] == ["image"] and image["properties"]["image"]["items"]["format"] == "binary"
    assert {"/v1/sources", "/v1/sources/{source_id}", "/healthz", "/readyz", "/metrics"} <= set(spec["paths"])
    assert "HTTPBearer" in spec["components"]["securitySchemes"]
    assert requests.get(f"{service}/docs", timeout=10).status_code == 404  # it loaded Swagger UI from a CDN


# ------------------------------------------------------------- same pixels as the engine
def test_swap_by_source_id_equals_the_engine_png(service, engine, photos, identities, obama_id):
    response = swap(service, photos["biden"], source_id=obama_id, format="png")
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "image/png"
    expected = engine.process_frame(decode_image(photos["biden"]).frame, identities["obama"]).frame
    assert np.array_equal(decoded(response), expected)
    assert not np.array_equal(expected, decode_image(photos["biden"]).frame)  # something was swapped
    assert response.headers["X-Fusion-Ray-Stand-In"] == STAND_INS
    assert response.headers["X-Fusion-Ray-Faces-Swapped"] == "1"
    text = read_png_text(response.content)
    assert text["fusion_ray.stand_in_models"] == STAND_INS and "not a real face swap" in text["Comment"]


def test_inline_source_and_jpeg_output_equal_the_engine(service, engine, photos, identities):
    response = swap(service, photos["biden"], sources=(photos["obama"],), format="jpeg", jpeg_quality=90)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "image/jpeg"
    expected = engine.process_frame(decode_image(photos["biden"]).frame, identities["obama"]).frame
    reference = cv2.imdecode(np.frombuffer(encode_image(expected, ".jpg", jpeg_quality=90), np.uint8),
                             cv2.IMREAD_UNCHANGED)
    assert np.array_equal(decoded(response), reference)  # same frame, same encoder: same pixels
    assert any("STAND-IN" in c for c in read_jpeg_comments(response.content))


def test_selection_and_enhancement_equal_the_engine(service, engine, photos, identities, obama_id):
    target = decode_image(photos["obama_and_biden"]).frame
    response = swap(service, photos["obama_and_biden"], source_id=obama_id, select="index", face_index=1,
                    enhance="true", blend=0.5)
    assert response.status_code == 200, response.text
    assert response.headers["X-Fusion-Ray-Faces-Detected"] == "3"
    assert response.headers["X-Fusion-Ray-Faces-Swapped"] == "1"
    assert response.headers["X-Fusion-Ray-Stand-In"] == "arcface_w600k_r50,gfpgan_1.4,inswapper_128"
    expected = variant(engine, selection=SelectionConfig(mode="index", index=1),
                       enhance=EnhanceConfig(enabled=True, blend=0.5)).process_frame(target, identities["obama"]).frame
    assert np.array_equal(decoded(response), expected)
    everyone = variant(engine, enhance=EnhanceConfig(enabled=False)).process_frame(target, identities["obama"]).frame
    assert not np.array_equal(expected, everyone)


def test_concurrent_requests_are_batched_and_each_gets_its_own_identity(service, engine, photos, identities,
                                                                         obama_id):
    biden_id = register(service, photos["biden"]).json()["source_id"]
    jobs = [("biden", obama_id, "obama"), ("obama", biden_id, "biden")] * (MAX_INFLIGHT // 2)
    expected = {(t, s): engine.process_frame(decode_image(photos[t]).frame, identities[s]).frame
                for t, _, s in jobs[:2]}
    before = metrics(service)
    with ThreadPoolExecutor(len(jobs)) as pool:
        responses = list(pool.map(lambda job: swap(service, photos[job[0]], source_id=job[1]), jobs))
    for (target, _, source), response in zip(jobs, responses, strict=True):
        assert response.status_code == 200, response.text
        assert np.array_equal(decoded(response), expected[(target, source)]), (target, source)
    after = metrics(service)
    assert histogram_max_bucket(after, "fusion_ray_batch_size", deployment="swapper") > 1, \
        "the swapper never saw a batch of more than one request"
    count = lambda m: sum(v for lab, v in m.get("fusion_ray_batch_size_count", [])  # noqa: E731
                          if lab.get("deployment") == "swapper")
    assert count(after) - count(before) < len(jobs)  # fewer batch calls than requests
    stages = {lab["stage"] for lab, _ in after["fusion_ray_stage_seconds_count"]}
    assert {"decode", "detect", "swap", "paste", "encode"} <= stages


# -------------------------------------------------------------------------- errors
def test_auth_is_required_on_v1_only(service, photos):
    assert_error(swap(service, photos["biden"], headers={}, source_id="x"), 401, "unauthorized")
    wrong = swap(service, photos["biden"], headers={"Authorization": "Bearer nope"}, source_id="x")
    assert_error(wrong, 401, "unauthorized")
    assert wrong.headers["WWW-Authenticate"] == "Bearer"
    assert requests.post(f"{service}/v1/sources", files=[("image", ("a", b"x"))], timeout=10).status_code == 401
    assert requests.get(f"{service}/v1/sources/x", timeout=10).status_code == 401
    assert requests.get(f"{service}/healthz", timeout=10).status_code == 200


def test_body_cap_by_content_length_and_by_streamed_bytes(service):
    import json

    ctype = {"Content-Type": "multipart/form-data; boundary=xyz"}
    status, _, body = _raw_request(service, {**ctype, "Content-Length": str(MAX_BODY + 1)})
    assert status == 413 and json.loads(body)["error"] == "body_too_large"
    chunks = [b"x" * 65536] * (MAX_BODY // 65536 + 2)  # chunked: no Content-Length to trust
    status, _, body = _raw_request(service, {**ctype, "Transfer-Encoding": "chunked"}, chunks)
    assert status == 413 and json.loads(body)["error"] == "body_too_large"


def test_pixel_cap_and_non_images(service, photos, obama_id):
    from tests.serve.helpers import forged_png

    body = assert_error(swap(service, forged_png(50_000, 50_000), source_id=obama_id), 413, "image_too_large")
    assert "50000x50000" in body["detail"]
    big = png_bytes(np.zeros((2001, 2000, 3), np.uint8))  # 4.002 MP: over the 4 MP test cap, small file
    assert_error(swap(service, big, source_id=obama_id), 413, "image_too_large")
    assert_error(swap(service, b"just some text", source_id=obama_id), 415, "unsupported_media_type")
    truncated = png_bytes(np.full((64, 64, 3), 7, np.uint8))[:60]
    assert_error(swap(service, truncated, source_id=obama_id), 422, "invalid_image")
    not_multipart = requests.post(f"{service}/v1/swap", json={"target": "x"}, headers=AUTH, timeout=10)
    assert_error(not_multipart, 415, "unsupported_media_type")


def test_no_face_in_the_source_is_422(service, photos):
    body = assert_error(register(service, BLANK_PNG), 422, "no_face_in_source")
    assert "no face" in body["detail"]
    body = assert_error(register(service, photos["obama"], BLANK_PNG), 422, "no_face_in_source")
    assert "s1.jpg" in body["detail"]  # names the image without a face
    assert_error(swap(service, photos["biden"], sources=(BLANK_PNG,)), 422, "no_face_in_source")


def test_no_face_in_the_target_returns_it_unchanged_or_422_when_strict(service, obama_id):
    response = swap(service, BLANK_PNG, source_id=obama_id)
    assert response.status_code == 200
    assert response.content == BLANK_PNG
    assert response.headers["X-Fusion-Ray-Faces-Swapped"] == "0"
    assert "X-Fusion-Ray-Stand-In" not in response.headers
    body = assert_error(swap(service, BLANK_PNG, source_id=obama_id, strict="true"), 422, "no_face_in_target")
    assert "no face" in body["detail"]
    # curl -F 'target=<blank.png': the image part has no filename (it is not a text field)
    no_filename = requests.post(f"{service}/v1/swap", files=[("target", (None, BLANK_PNG))],
                                data={"source_id": obama_id}, headers=AUTH, timeout=60)
    assert no_filename.status_code == 200, no_filename.text
    assert no_filename.content == BLANK_PNG


def test_bad_fields_and_unknown_sources(service, photos, obama_id):
    assert_error(swap(service, photos["biden"], source_id=obama_id, select="bogus"), 422, "invalid_option")
    assert_error(swap(service, photos["biden"]), 422, "missing_field")
    assert_error(swap(service, photos["biden"], source_id=obama_id, sources=(photos["obama"],)), 422, "invalid_field")
    assert_error(swap(service, photos["biden"], source_id="src_unknown"), 404, "unknown_source")
    no_target = requests.post(f"{service}/v1/swap", files=[("source", ("s.jpg", photos["obama"]))],
                              data={"source_id": obama_id}, headers=AUTH, timeout=10)
    assert_error(no_target, 422, "missing_field")


def test_source_store_is_bounded_and_sources_can_be_deleted(service, photos):
    ids = [register(service, photos["obama"]).json()["source_id"] for _ in range(4)]  # capacity 3
    assert requests.get(f"{service}/v1/sources/{ids[0]}", headers=AUTH, timeout=10).status_code == 404
    info = requests.get(f"{service}/v1/sources/{ids[-1]}", headers=AUTH, timeout=10)
    assert info.json() == {"source_id": ids[-1], "num_images": 1}
    assert requests.delete(f"{service}/v1/sources/{ids[-1]}", headers=AUTH, timeout=10).status_code == 204
    assert requests.delete(f"{service}/v1/sources/{ids[-1]}", headers=AUTH, timeout=10).status_code == 404
    stored = [v for _, v in metrics(service)["fusion_ray_sources_stored"]]
    assert stored and stored[0] <= 3


# ------------------------------------------------------------------------ overload


def test_stalled_uploads_do_not_take_compute_slots(service, photos):
    """24 stalled uploads (from 24 loopback addresses: the per-client bound does not apply) hold
    upload slots only; a normal swap still gets 200. Before the fix, 6 of them took every in-flight slot."""
    obama_id = register(service, photos["obama"]).json()["source_id"]  # the store is tiny: a fresh id
    stalled = []
    try:
        for i in range(24):
            stalled.append(_stalled_upload(service, f"127.0.1.{i + 1}"))
        # Every stalled upload holds an upload slot, none a compute slot. (The check allows up to 4
        # refusals, far more stalled bodies than the MAX_INFLIGHT compute slots either way.)
        assert _wait_until(lambda: _uploads(service) >= 20, timeout_s=60), (_uploads(service), _replies(stalled))
        assert _inflight(service) == 0
        response = swap(service, photos["biden"], source_id=obama_id)
        assert response.status_code == 200, response.text
    finally:
        for sock in stalled:
            sock.close()
    assert _wait_until(lambda: _uploads(service) == 0), "upload slots were not released after the clients left"


def test_uploads_beyond_the_per_client_limit_get_503_then_the_service_recovers(service, photos):
    """Deterministic: one address holds its MAX_UPLOADS_PER_CLIENT upload slots by stalling; its next
    upload is a 503 with Retry-After, other addresses are served, and the slots free when it leaves."""
    # The stalled uploads of the test before are released once the ingress reads their closed
    # sockets: on a loaded host that may take a while, and with them still held the service-wide
    # upload limit (not this address's) refused the extra upload.
    assert _wait_until(lambda: _uploads(service) == 0, timeout_s=120), "an earlier test's uploads are still held"
    obama_id = register(service, photos["obama"]).json()["source_id"]
    greedy = "127.0.0.2"
    stalled = []
    try:
        for _ in range(MAX_UPLOADS_PER_CLIENT):
            stalled.append(_stalled_upload(service, greedy))
        assert _wait_until(lambda: _uploads(service) == MAX_UPLOADS_PER_CLIENT), "stalled uploads took no slots"
        one_more = _stalled_upload(service, greedy)
        stalled.append(one_more)
        reply = http.client.HTTPResponse(one_more)  # answered at once, before its body is read
        reply.begin()
        assert reply.status == 503 and reply.getheader("Retry-After") == "2"
        body = json.loads(reply.read())
        assert body["error"] == "overloaded" and "your address has its limit" in body["detail"], body
        assert swap(service, photos["biden"], source_id=obama_id).status_code == 200  # another address
    finally:
        for sock in stalled:
            sock.close()
    assert _wait_until(lambda: _uploads(service) == 0), "slots were not released after the clients left"
    assert _inflight(service) == 0
    assert swap(service, photos["biden"], source_id=obama_id).status_code == 200
    def counted() -> bool:
        rejected = metrics(service).get("fusion_ray_rejected_total", [])
        return any(lab.get("reason") == "client_upload_limit" and v >= 1 for lab, v in rejected)

    assert _wait_until(counted, timeout_s=10), metrics(service).get("fusion_ray_rejected_total")


def test_echoed_names_and_ids_are_clipped(service, photos, obama_id):
    long_name = "n" * 3000
    response = requests.post(f"{service}/v1/swap", files=[("target", ("t.jpg", photos["biden"]))],
                             data={"source_id": obama_id, long_name: "1"}, headers=AUTH, timeout=60)
    body = assert_error(response, 422, "invalid_field")
    assert len(response.content) < 300 and "\u2026" in body["detail"]
    huge = requests.post(f"{service}/v1/swap", files=[("target", ("t.jpg", photos["biden"]))],
                         data={"source_id": obama_id, "n" * 1_000_000: "1"}, headers=AUTH, timeout=60)
    assert huge.status_code in (400, 422) and len(huge.content) < 300
    missing = requests.get(f"{service}/v1/sources/{'i' * 3000}", headers=AUTH, timeout=10)
    assert_error(missing, 404, "unknown_source")
    assert len(missing.content) < 300


def test_a_burst_gets_some_503s_the_rest_succeed_and_the_service_recovers(service, photos):
    obama_id = register(service, photos["obama"]).json()["source_id"]
    burst = 4 * MAX_INFLIGHT
    barrier = threading.Barrier(burst)

    def one(_: int) -> requests.Response:
        barrier.wait()
        return swap(service, photos["biden"], source_id=obama_id)

    with ThreadPoolExecutor(burst) as pool:
        responses = list(pool.map(one, range(burst)))
    statuses = [r.status_code for r in responses]
    assert set(statuses) <= {200, 503}, statuses
    assert statuses.count(503) >= 1 and statuses.count(200) >= 1, statuses
    assert all(r.headers.get("Retry-After") == "2" for r in responses if r.status_code == 503)
    assert all("limit" in r.text for r in responses if r.status_code == 503), [r.text for r in responses]
    peak = [v for _, v in metrics(service)["fusion_ray_inflight_peak"]]
    assert peak == [MAX_INFLIGHT]  # bounded: never more than the limit at once
    assert _wait_until(lambda: _inflight(service) == 0)
    assert swap(service, photos["biden"], source_id=obama_id).status_code == 200


def test_the_load_client_against_the_service(service, images_dir):
    """The load tool's client and /metrics reading, on a few requests (no timing asserted)."""
    import asyncio

    from fusion_ray.serve.load import LoadPlan, _drive

    port = int(service.rsplit(":", 1)[1])
    plan = LoadPlan(target=images_dir / "biden.jpg", source=images_dir / "obama.jpg", requests=4,
                    concurrency=[2], batch_sizes=[4], time_limit_s=60, port=port, warmup=1)
    plan.check()
    lines: list[str] = []
    rows = asyncio.run(_drive(plan, 4, TOKEN, lines.append))
    assert len(rows) == 1 and rows[0].sent == 4 and rows[0].ok + rows[0].rejected == 4 and rows[0].failed == 0
    assert rows[0].ok >= 1 and rows[0].p50_ms > 0 and rows[0].max_swap_batch >= 1
    assert {"detect", "swap", "encode"} <= set(rows[0].stage_ms)
    assert lines and "concurrency 2" in lines[0]


def test_a_sideways_photo_is_swapped_upright_and_the_turn_is_recorded(service, engine, images_dir):
    """JPEGs stored sideways with EXIF orientation 6: the target and the inline source are read
    upright, the output is upright, and the turn is in its metadata and a header."""
    target = sideways_jpeg(decode_image((images_dir / "biden.jpg").read_bytes()).frame)
    source = sideways_jpeg(decode_image((images_dir / "obama.jpg").read_bytes()).frame)
    response = swap(service, target, sources=(source,), format="png")
    assert response.status_code == 200, response.text
    identity = engine.prepare_source([decode_image(source).frame])
    expected = engine.process_frame(decode_image(target).frame, identity).frame
    assert np.array_equal(decoded(response), expected)  # upright, as the in-process engine sees it
    change = "EXIF orientation 6 applied: written upright, with no orientation tag"
    assert response.headers["X-Fusion-Ray-Format-Changes"] == change
    assert read_png_text(response.content)["fusion_ray.format_changes"] == change
