"""Serve building blocks without Ray: limits, multipart, image headers, metrics, settings, config."""

from __future__ import annotations

import asyncio
import json
import struct
import zlib
from pathlib import Path

import cv2
import numpy as np
import pytest
import yaml
from urllib3 import encode_multipart_formdata

from fusion_ray.errors import ConfigError
from fusion_ray.imageheader import read_image_header
from fusion_ray.serve.forms import parse_multipart, read_form
from fusion_ray.serve.images import check_image
from fusion_ray.serve.limits import (
    ApiError,
    InflightLimiter,
    Overloaded,
    Refused,
    UploadLimiter,
    check_content_length,
    clip,
)
from fusion_ray.serve.metrics import (
    MetricsRecorder,
    MetricsStore,
    histogram_max_bucket,
    parse_exposition,
)
from fusion_ray.serve.schemas import SwapOptions
from fusion_ray.serve.settings import (
    ServeSettings,
    find_application,
    parse_settings,
    read_serve_config,
)

REPO = Path(__file__).resolve().parents[2]


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def forged_png(width: int, height: int) -> bytes:
    """A PNG signature, an IHDR claiming width x height, an empty IDAT and IEND (a bomb's header:
    a real bomb has its chunk stream too, and Pillow reads on to the first IDAT)."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + _png_chunk(b"IHDR", ihdr) + _png_chunk(b"IDAT", b"")
            + _png_chunk(b"IEND", b""))


# ------------------------------------------------------------------ image headers
@pytest.mark.parametrize("ext,fmt", [(".png", "png"), (".jpg", "jpeg"), (".webp", "webp"), (".bmp", "bmp")])
@pytest.mark.parametrize("width,height", [(37, 23), (640, 1)])
def test_header_size_matches_the_decoder(ext, fmt, width, height):
    image = np.random.default_rng(0).integers(0, 255, (height, width, 3), dtype=np.uint8)
    ok, data = cv2.imencode(ext, image)
    assert ok
    header = read_image_header(data.tobytes())
    assert (header.format, header.width, header.height) == (fmt, width, height)


def test_webp_lossless_header():
    image = np.zeros((19, 45, 3), np.uint8)
    ok, data = cv2.imencode(".webp", image, [cv2.IMWRITE_WEBP_QUALITY, 101])  # >100: lossless (VP8L)
    assert ok and data.tobytes()[12:16] == b"VP8L"
    header = read_image_header(data.tobytes())
    assert (header.format, header.width, header.height) == ("webp", 45, 19)


def test_jpeg_header_of_a_real_photo(images_dir):
    header = read_image_header((images_dir / "biden.jpg").read_bytes())
    assert (header.format, header.width, header.height) == ("jpeg", 970, 2204)


def test_pixel_cap_rejects_a_bomb_header_without_decoding():
    with pytest.raises(ApiError) as err:
        check_image(forged_png(100_000, 100_000), "target", max_pixels=24_000_000)
    assert err.value.status == 413 and "100000x100000" in err.value.detail


def core_bmp(width: int, height: int, pixels: bool = True) -> bytes:
    """A 24-bit BMP with the 12-byte OS/2 BITMAPCOREHEADER (16-bit width and height)."""
    body = b"\x00" * (((width * 3 + 3) & ~3) * height) if pixels else b""
    offset = 14 + 12
    return (b"BM" + struct.pack("<IHHI", offset + len(body), 0, 0, offset)
            + struct.pack("<IHHHH", 12, width, height, 1, 24) + body)


def test_os2_bmp_sizes_are_unsigned_like_the_decoder():
    data = core_bmp(0xFFFF, 1)
    decoded = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_UNCHANGED)
    assert decoded is not None and decoded.shape[:2] == (1, 0xFFFF)
    header = read_image_header(data)
    assert (header.format, header.width, header.height) == ("bmp", 0xFFFF, 1)
    with pytest.raises(ApiError) as err:
        check_image(core_bmp(0xFFFF, 0xFFFF, pixels=False), "target", max_pixels=24_000_000)
    assert err.value.status == 413 and "65535x65535" in err.value.detail


@pytest.mark.parametrize("data,status", [
    (b"hello, I am text", 415),
    (b"%PDF-1.7 ...", 415),
    (b"\x89PNG\r\n\x1a\n\x00\x00", 422),              # PNG without IHDR
    (b"\xff\xd8\xff\xe0\x00\x10JFIF\x00" + b"\x00" * 8, 422),  # JPEG without SOF
    (b"", 422),
])
def test_bad_images_get_415_or_422(data, status):
    with pytest.raises(ApiError) as err:
        check_image(data, "target", max_pixels=10**9)
    assert err.value.status == status
    assert set(err.value.body()) == {"error", "detail"}


# ----------------------------------------------------------------------- body
def test_content_length_checks():
    assert check_content_length(None, 10) is None
    assert check_content_length("10", 10) == 10
    with pytest.raises(ApiError) as err:
        check_content_length("11", 10)
    assert err.value.status == 413
    with pytest.raises(ApiError) as err:
        check_content_length("-1", 10)
    assert err.value.status == 400


def _chunks(body: bytes, size: int):
    async def gen():
        for i in range(0, len(body), size):
            yield body[i:i + size]
    return gen()


def test_streamed_bytes_are_counted():
    body, ctype = encode_multipart_formdata([("target", ("t.png", b"x" * 300, "image/png"))])
    form = asyncio.run(read_form(_chunks(body, 100), ctype, max_bytes=len(body), timeout_s=30, max_parts=4))
    assert form.file("target").data == b"x" * 300
    with pytest.raises(ApiError) as err:
        asyncio.run(read_form(_chunks(body, 100), ctype, max_bytes=len(body) - 1, timeout_s=30, max_parts=4))
    assert err.value.status == 413
    garbage = [b"x" * 100] * 5  # not multipart at all, and over the cap: 413 first (as a chunked upload gets)
    with pytest.raises(ApiError) as err:
        asyncio.run(read_form(_chunks(b"".join(garbage), 100), ctype, max_bytes=400, timeout_s=30, max_parts=4))
    assert err.value.status == 413
    with pytest.raises(ApiError) as err:  # within the cap: the parse error
        asyncio.run(read_form(_chunks(b"".join(garbage), 100), ctype, max_bytes=1000, timeout_s=30, max_parts=4))
    assert err.value.status == 400


def test_a_stalled_body_is_408_instead_of_holding_its_slot():
    body, ctype = encode_multipart_formdata([("strict", "true")])

    async def stalled():
        yield body[:10]
        await asyncio.Event().wait()  # the client sends nothing more but keeps the connection
        yield b"never"

    with pytest.raises(ApiError) as err:
        asyncio.run(read_form(stalled(), ctype, max_bytes=400, timeout_s=0.05, max_parts=4))
    assert err.value.status == 408 and err.value.code == "receive_timeout"
    form = asyncio.run(read_form(_chunks(body, 7), ctype, max_bytes=400, timeout_s=30, max_parts=4))
    assert form.text_fields() == {"strict": "true"}
    with pytest.raises(ApiError) as err:  # the size cap still applies
        asyncio.run(read_form(_chunks(body, 7), ctype, max_bytes=5, timeout_s=30, max_parts=4))
    assert err.value.status == 413


# ------------------------------------------------------------------ multipart
def test_multipart_round_trip_with_binary_data():
    tricky = b"\r\n--not-the-boundary\r\n\r\n" + bytes(range(256)) * 50 + b"\r\n"
    body, ctype = encode_multipart_formdata([
        ("target", ("t.png", tricky, "image/png")),
        ("source", ("a.jpg", b"AAA", "image/jpeg")),
        ("source", ("b.jpg", b"", "image/jpeg")),
        ("source_id", "src_1"),
        ("strict", "true"),
    ])
    form = parse_multipart(body, ctype)
    assert form.file("target").data == tricky
    assert form.file("target").filename == "t.png"
    assert [p.data for p in form.files("source")] == [b"AAA", b""]
    assert form.text_fields() == {"source_id": "src_1", "strict": "true"}
    with pytest.raises(ApiError, match="given 2 times"):
        form.file("source")


def test_images_without_a_filename_are_not_text_fields():
    png = forged_png(4, 3)  # b"\x89PNG...": not UTF-8
    body, ctype = encode_multipart_formdata([  # a value without a filename, like curl -F 'target=<t.png'
        ("target", png), ("source", b"\xff\xd8\xff\xe0"), ("image", b"\x89"), ("strict", "true")])
    form = parse_multipart(body, ctype)
    assert form.file("target").filename is None and form.file("target").data == png
    assert form.text_fields() == {"strict": "true"}
    body, ctype = encode_multipart_formdata([("target", png), ("source_id", b"\xff")])
    with pytest.raises(ApiError, match="'source_id' is not UTF-8") as err:
        parse_multipart(body, ctype).text_fields()
    assert err.value.status == 422


@pytest.mark.parametrize("ctype,status", [(None, 415), ("application/json", 415),
                                          ("multipart/form-data", 400)])
def test_multipart_content_type(ctype, status):
    with pytest.raises(ApiError) as err:
        parse_multipart(b"{}", ctype)
    assert err.value.status == status


def test_truncated_multipart_is_400():
    body, ctype = encode_multipart_formdata([("target", ("t.png", b"x" * 100, "image/png"))])
    with pytest.raises(ApiError) as err:
        parse_multipart(body[:-30], ctype)
    assert err.value.status == 400


def test_too_many_parts():
    body, ctype = encode_multipart_formdata([("f", str(i)) for i in range(10)])
    with pytest.raises(ApiError) as err:
        parse_multipart(body, ctype, max_parts=5)
    assert err.value.status == 422


# ----------------------------------------------------------------- options
def test_swap_options_from_form_text():
    opts = SwapOptions.from_fields({"enhance": "true", "blend": "0.5", "select": "index", "face_index": "2",
                                    "format": "jpeg", "strict": "1", "source_id": ""})
    assert (opts.enhance, opts.blend, opts.select, opts.face_index, opts.format, opts.strict) == (
        True, 0.5, "index", 2, "jpeg", True)
    assert opts.source_id is None
    for bad in ({"select": "reference"}, {"blend": "2"}, {"format": "gif"}, {"face_index": "-1"}):
        with pytest.raises(ApiError) as err:
            SwapOptions.from_fields(bad)
        assert err.value.status == 422 and err.value.code == "invalid_option"


# ------------------------------------------------------------------ limiter
def test_inflight_limiter_refuses_and_releases():
    limiter = InflightLimiter(2, retry_after_s=3)
    with limiter.slot(), limiter.slot():
        assert limiter.inflight == 2
        with pytest.raises(Overloaded) as err, limiter.slot():
            pass
        assert err.value.status == 503 and err.value.headers == {"Retry-After": "3"}
    assert limiter.inflight == 0
    with pytest.raises(RuntimeError), limiter.slot():
        raise RuntimeError("boom")
    assert limiter.inflight == 0 and limiter.peak == 2


# ------------------------------------------------------------------ sources
def test_metrics_merge_and_exposition():
    store = MetricsStore()
    for sizes in ([1, 3], [8]):
        rec = MetricsRecorder()
        for n in sizes:
            rec.batch("swapper", n, n * 2, 0.004)
        rec.stage("detect", 0.03)
        rec.inc("fusion_ray_requests_total", endpoint="/v1/swap", status="200")
        store.merge(rec.take())
        assert rec.take().empty()
    text = store.render([("fusion_ray_inflight_requests", "help", {"replica": "r1"}, 2.0)])
    samples = parse_exposition(text)
    assert histogram_max_bucket(samples, "fusion_ray_batch_size", deployment="swapper") == 8
    assert histogram_max_bucket(samples, "fusion_ray_batch_faces", deployment="swapper") == 16
    count = [v for lab, v in samples["fusion_ray_stage_seconds_count"] if lab["stage"] == "detect"]
    assert count == [2.0]
    assert samples["fusion_ray_requests_total"] == [({"endpoint": "/v1/swap", "status": "200"}, 2.0)]
    assert samples["fusion_ray_inflight_requests"] == [({"replica": "r1"}, 2.0)]
    assert "# TYPE fusion_ray_batch_size histogram" in text
    assert 'fusion_ray_batch_size_bucket{deployment="swapper",le="+Inf"} 3' in text


def test_a_fused_batch_records_each_steps_busy_time():
    from fusion_ray.serve.chain import Downstream

    rec = MetricsRecorder()
    downstream = Downstream((None, None, None, None), timeout_s=1.0, retry_headers={}, metrics=rec)
    for _ in range(2):
        downstream.record_batch("fused", {"batch": {"requests": 2, "faces": 3, "compute_s": 0.05},
                                          "steps": {"detect": 0.02, "swap": 0.01, "paste": 0.004}})
    store = MetricsStore()
    store.merge(rec.take())
    text = store.render()
    samples = parse_exposition(text)
    busy = {lab["step"]: v for lab, v in samples["fusion_ray_step_seconds_sum"]}
    assert busy == pytest.approx({"detect": 0.04, "swap": 0.02, "paste": 0.008})
    assert {lab["step"]: v for lab, v in samples["fusion_ray_step_seconds_count"]} == {"detect": 2, "swap": 2,
                                                                                       "paste": 2}
    assert "# TYPE fusion_ray_step_seconds histogram" in text


# ----------------------------------------------------------------- settings
def test_default_settings_are_valid_and_batches_can_fill():
    settings = ServeSettings()
    assert settings.swapper_max_ongoing() >= settings.batching.swap.max_batch_size
    assert settings.enhancer_max_ongoing() >= settings.batching.enhance.max_batch_size
    assert settings.ingress_max_ongoing() > settings.limits.max_inflight
    off = settings.with_batch_size(1)
    assert off.batching.swap.max_batch_size == 1 and off.batching.enhance.max_batch_size == 1
    assert off.batching.swap.batch_wait_timeout_s == settings.batching.swap.batch_wait_timeout_s


def test_a_partial_deployment_mapping_keeps_that_deployments_defaults():
    defaults = ServeSettings().deployments
    deps = parse_settings({"deployments": {"state": {"num_cpus": 0.1}, "ingress": {"num_replicas": 2},
                                           "detector": {"max_ongoing_requests": None}}}).deployments
    assert deps.state == defaults.state.model_copy(update={"num_cpus": 0.1})
    assert deps.state.max_queued_requests == -1 and deps.state.max_ongoing_requests == 256
    assert deps.ingress == defaults.ingress.model_copy(update={"num_replicas": 2})
    assert deps.detector.max_ongoing_requests is None and deps.detector.num_cpus == defaults.detector.num_cpus
    assert deps.swapper == defaults.swapper


@pytest.mark.parametrize("args,match", [
    ({"deployments": {"ingress": {"max_ongoing_requests": 4}}, "limits": {"max_inflight": 4}}, "must exceed"),
    ({"deployments": {"swapper": {"max_ongoing_requests": 2}}}, "batches could never fill"),
    ({"engine": {"selection": {"mode": "reference", "reference_path": "/x.jpg"}}}, "reference"),
    ({"deployments": {"state": {"num_replicas": 2}}}, "exactly one replica"),
    ({"limits": {"max_body_byte": 1}}, "max_body_byte"),
])
def test_bad_settings_are_config_errors(args, match):
    with pytest.raises(ConfigError, match=match):
        parse_settings(args)


def test_token_from_config_or_environment():
    from fusion_ray.serve.settings import AuthSettings

    assert AuthSettings(token="t").resolve_token({"FUSION_RAY_API_TOKEN": "e"}) == "t"
    assert AuthSettings().resolve_token({"FUSION_RAY_API_TOKEN": "e"}) == "e"
    assert AuthSettings().resolve_token({}) is None
    assert AuthSettings(token_env=None).resolve_token({"FUSION_RAY_API_TOKEN": "e"}) is None


def test_serve_yaml_is_a_valid_serve_config_and_builds():
    from ray.serve import Application
    from ray.serve.schema import ServeDeploySchema

    from fusion_ray.serve.app import build_app

    path = REPO / "configs" / "serve.yaml"
    config = read_serve_config(path)
    ServeDeploySchema.model_validate(config)  # what `serve run` / RayService accept
    app = find_application(config)
    settings = parse_settings(app["args"])
    assert settings.limits.max_body_bytes == 20_000_000
    assert settings.batching.swap.batch_wait_timeout_s == pytest.approx(0.015)
    assert settings.deployments == ServeSettings().deployments  # the file spells out the defaults
    assert isinstance(build_app(app["args"]), Application)
    with pytest.raises(ConfigError):
        find_application({"applications": [{"import_path": "other:app"}]})


def test_cli_overlays_model_paths(tmp_path):
    from fusion_ray.cli import build_parser
    from fusion_ray.cli.serve import app_args_from_cli

    config = yaml.safe_load((REPO / "configs" / "serve.yaml").read_text())
    path = tmp_path / "serve.yaml"
    path.write_text(yaml.safe_dump(config))
    args = build_parser().parse_args(["serve", "--config", str(path), "--models-dir", "/m",
                                      "--model", "scrfd_2.5g=/x/scrfd.onnx", "--port", "9001"])
    data, app, _ = app_args_from_cli(args)
    assert data["engine"]["models"]["models_dir"] == "/m"
    assert data["engine"]["models"]["paths"] == {"scrfd_2.5g": "/x/scrfd.onnx"}
    assert app["name"] == "fusion_ray" and args.port == 9001
    load_args = build_parser().parse_args(["serve-load", "--config", str(path), "--target", "t.jpg",
                                           "--source", "s.jpg"])
    assert load_args.concurrency == "1,8,32" and load_args.batch_sizes == "8,1"


def test_load_plan_is_loopback_only(tmp_path):
    from fusion_ray.serve.load import LoadPlan, _max_batch_between, is_loopback

    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("10.0.0.1") and not is_loopback("example.com")
    image = tmp_path / "x.jpg"
    image.write_bytes(b"x")
    with pytest.raises(ConfigError, match="loopback"):
        LoadPlan(target=image, source=image, host="192.168.1.2").check()
    inf = float("inf")
    assert _max_batch_between({1.0: 2, 2.0: 2, inf: 2}, {1.0: 3, 2.0: 5, 4.0: 5, inf: 5}) == 2.0
    assert _max_batch_between({}, {}) == 0.0


# --------------------------------------------------------- ingress error mapping
def test_backpressure_and_timeouts_map_to_503_and_504():
    from ray.serve.exceptions import BackPressureError

    from fusion_ray.serve.app import IngressCore

    threads = cv2.getNumThreads()
    core = IngressCore(parse_settings({"limits": {"retry_after_s": 7, "stage_timeout_s": 0.05},
                                       "auth": {"token_env": None}}), None, None, None, None)
    cv2.setNumThreads(threads)  # the ingress sizes OpenCV's pool for its replica; not for this process

    async def full():
        raise BackPressureError(num_queued_requests=4, max_queued_requests=4)

    async def slow():
        await asyncio.sleep(5)

    with pytest.raises(ApiError) as err:
        asyncio.run(core.call("swap", full))
    assert err.value.status == 503 and err.value.headers == {"Retry-After": "7"}
    with pytest.raises(ApiError) as err:
        asyncio.run(core.call("swap", slow))
    assert err.value.status == 504 and "swap" in err.value.detail
    samples = parse_exposition(_render(core))
    assert ({"reason": "swap_queue_full"}, 1.0) in samples["fusion_ray_rejected_total"]


def _core(**limits):
    from fusion_ray.serve.app import IngressCore

    threads = cv2.getNumThreads()
    core = IngressCore(parse_settings({"limits": limits, "auth": {"token_env": None}}), None, None, None, None)
    cv2.setNumThreads(threads)
    return core


def _raising(exc: BaseException):
    async def fail():
        raise exc
    return fail


def test_lost_replicas_are_503_and_failed_stages_500_without_the_remote_traceback():
    from ray.exceptions import ActorDiedError, ActorUnavailableError, RayActorError, RayTaskError

    core = _core(retry_after_s=7)
    for lost in (RayActorError(), ActorUnavailableError("the actor is restarting", None), ActorDiedError()):
        with pytest.raises(ApiError) as err:
            asyncio.run(core.call("detect", _raising(lost)))
        assert err.value.status == 503 and err.value.headers == {"Retry-After": "7"}, lost
    failed = RayTaskError("detect", "Traceback: /srv/secret.py line 3", ValueError("boom")).as_instanceof_cause()
    with pytest.raises(ApiError) as err:
        asyncio.run(core.call("detect", _raising(failed)))
    assert err.value.status == 500 and err.value.body() == {"error": "stage_failed",
                                                            "detail": "the detect stage failed"}


def test_the_ingress_reads_bodies_within_receive_timeout():
    class StalledRequest:
        headers = {"content-type": "multipart/form-data; boundary=b"}
        client = None

        async def stream(self):
            yield b"--b\r\n"
            await asyncio.Event().wait()
            yield b""

    core = _core(receive_timeout_s=0.05)
    with pytest.raises(ApiError) as err:
        asyncio.run(core.read_form(StalledRequest()))
    assert err.value.status == 408


def test_unexpected_errors_get_a_generic_answer():
    import json

    from ray.exceptions import ActorUnavailableError
    from starlette.requests import Request

    from fusion_ray.serve.app import create_api

    core = _core(retry_after_s=3)
    handler = create_api(core).exception_handlers[Exception]
    request = Request({"type": "http", "method": "POST", "path": "/v1/swap", "headers": []})
    response = asyncio.run(handler(request, RuntimeError("/srv/models/secret.onnx: bad")))
    assert response.status_code == 500
    body = json.loads(response.body)
    assert body["error"] == "internal_error" and "secret" not in body["detail"] and "RuntimeError" not in body["detail"]
    response = asyncio.run(handler(request, ActorUnavailableError("restarting", None)))
    assert response.status_code == 503 and response.headers["Retry-After"] == "3"


def _render(core) -> str:
    store = MetricsStore()
    store.merge(core.metrics.take())
    return store.render()


# ------------------------------------------------------------ adaptive batch wait
def test_adaptive_wait_skips_the_window_only_when_arrivals_are_sparse():
    from fusion_ray.serve.batching import AdaptiveWait

    wait = AdaptiveWait(0.015)
    assert wait.arrival(0.0) == 0.015  # no history: assume load
    now = 0.0
    for _ in range(5):  # one client, a request every 100 ms: nobody to wait for
        now += 0.1
        last = wait.arrival(now)
    assert last == 0.0
    for _ in range(10):  # a burst, 2 ms apart: wait for the batch to fill
        now += 0.002
        last = wait.arrival(now)
    assert last == 0.015
    off = AdaptiveWait(0.015, enabled=False)
    assert [off.arrival(t) for t in (0.0, 1.0, 2.0)] == [0.015] * 3


# ------------------------------------------------------------------ uploads
def test_upload_limiter_bounds_all_uploads_and_each_client():
    uploads = UploadLimiter(3, per_client=2, retry_after_s=4)
    with uploads.slot("10.0.0.1"), uploads.slot("10.0.0.1"):
        with pytest.raises(Refused) as err, uploads.slot("10.0.0.1"):
            pass
        assert err.value.status == 503 and err.value.headers == {"Retry-After": "4"}
        assert err.value.reason == "client_upload_limit" and "address" in err.value.detail
        with uploads.slot("10.0.0.2"):
            with pytest.raises(Refused) as err, uploads.slot("10.0.0.3"):
                pass
            assert err.value.reason == "upload_limit" and "limit of 3 uploads" in err.value.detail
    assert uploads.active == 0 and uploads.by_client == {}
    with pytest.raises(RuntimeError), uploads.slot("10.0.0.1"):
        raise RuntimeError("boom")
    assert uploads.active == 0
    assert isinstance(Overloaded(1, 1), Refused) and Overloaded(1, 1).reason == "inflight_limit"


def test_upload_settings_fit_the_ingress_concurrency():
    with pytest.raises(ConfigError, match="max_uploads_per_client"):
        parse_settings({"limits": {"max_uploads": 2, "max_uploads_per_client": 3}})
    with pytest.raises(ConfigError, match="max_inflight \\+ limits.max_uploads"):
        parse_settings({"deployments": {"ingress": {"max_ongoing_requests": 40}},
                        "limits": {"max_inflight": 16, "max_uploads": 24}})
    settings = parse_settings({"deployments": {"ingress": {"max_ongoing_requests": None}}})
    assert settings.ingress_max_ongoing() > settings.limits.max_inflight + settings.limits.max_uploads


# ------------------------------------------------------------ echoed input
def test_long_client_text_is_clipped_before_it_is_echoed():
    from fusion_ray.serve.schemas import SwapRequest

    assert clip("abc") == "abc" and clip("x" * 65) == "x" * 64 + "\u2026"
    body, ctype = encode_multipart_formdata([("n" * 1_000_000, "1")])  # over python-multipart's header cap
    with pytest.raises(ApiError) as err:
        parse_multipart(body, ctype)
    assert err.value.code == "malformed_multipart" and len(err.value.detail) < 200
    name = "n" * 3000  # within the 4 KB part-header cap
    body, ctype = encode_multipart_formdata([("target", ("t.png", forged_png(4, 3), "image/png")), (name, "1")])
    with pytest.raises(ApiError) as err:
        SwapRequest.from_form(parse_multipart(body, ctype), max_pixels=100)
    assert err.value.code == "invalid_field" and len(err.value.detail) < 200
    body, ctype = encode_multipart_formdata([(name, "1"), (name, "2")])
    with pytest.raises(ApiError) as err:
        parse_multipart(body, ctype).file(name)
    assert len(err.value.detail) < 200
    body, ctype = encode_multipart_formdata([("source", ("f" * 3000 + ".jpg", b"text", "image/jpeg")),
                                             ("target", ("t.png", forged_png(4, 3), "image/png"))])
    with pytest.raises(ApiError) as err:
        SwapRequest.from_form(parse_multipart(body, ctype), max_pixels=100)
    assert err.value.status == 415 and len(err.value.detail) < 200


# ------------------------------------------------------------ access to ops endpoints
def test_metrics_are_public_only_on_loopback_unless_configured():
    from fusion_ray.serve.auth import BearerAuth, metrics_public

    for host in ("127.0.0.1", "::1", "localhost", "127.0.0.2", "[::1]"):
        assert metrics_public(None, host), host
    for host in ("0.0.0.0", "10.1.2.3", "example.com", "", None):
        assert not metrics_public(None, host), host
    assert metrics_public(True, "10.1.2.3") and not metrics_public(False, "127.0.0.1")
    auth = BearerAuth("s3cret")
    assert auth.valid("s3cret") and not auth.valid("s3cre") and not auth.valid(None) and not auth.valid("")
    with pytest.raises(ApiError) as err:
        auth.check("nope")
    assert err.value.status == 401 and err.value.headers == {"WWW-Authenticate": "Bearer"}
    assert BearerAuth(None).valid(None)


def test_the_metrics_route_needs_the_token_off_loopback():
    from starlette.requests import Request

    from fusion_ray.serve.app import create_api

    core = _core_with({"auth": {"token": "t0k", "token_env": None}})
    route = next(r for r in create_api(core).routes if getattr(r, "path", "") == "/metrics")
    request = Request({"type": "http", "method": "GET", "path": "/metrics", "headers": [],
                       "server": ("10.0.0.5", 8000)})
    with pytest.raises(ApiError) as err:
        asyncio.run(route.endpoint(request, None))  # type: ignore[attr-defined]
    assert err.value.status == 401
    core.authorise_metrics("t0k", "10.0.0.5")  # the token opens it
    core.authorise_metrics(None, "127.0.0.1")  # loopback: public
    public = _core_with({"auth": {"token": "t0k", "token_env": None, "metrics_public": True}})
    public.authorise_metrics(None, "10.0.0.5")


def test_metrics_say_which_precision_each_model_runs_at():
    from fusion_ray.engine import ModelInfo

    core = _core()
    info = {"scrfd_2.5g": ModelInfo("scrfd_2.5g", "/m/scrfd.onnx", "verified", ("CPUExecutionProvider",), False, "int8"),
            "inswapper_128": ModelInfo("inswapper_128", "/m/i.onnx", "verified", (), False, "fp32")}

    async def model_info(t):
        return info

    async def render_metrics(t, gauges):
        return MetricsStore().render(gauges)

    core.downstream.model_info = model_info
    core.downstream.render_metrics = render_metrics
    text = asyncio.run(core.metrics_text())
    assert 'fusion_ray_model_precision{model="scrfd_2.5g",precision="int8"} 1' in text
    assert 'fusion_ray_model_precision{model="inswapper_128",precision="fp32"} 1' in text


def test_readiness_without_the_token_names_no_paths_or_errors():
    from fusion_ray.engine import ModelInfo
    from fusion_ray.serve.ops import readiness

    info = {"scrfd_2.5g": ModelInfo(name="scrfd_2.5g", path="/srv/models/scrfd.onnx", status="loaded",
                                    providers=("CPUExecutionProvider",), stand_in=False)}

    async def loaded():
        return info

    async def broken():
        raise RuntimeError("/srv/models/secret.onnx: bad")

    probes = {"Detector": loaded, "Swapper": broken}
    public = asyncio.run(readiness(probes, detailed=False))
    assert public.status == "not_ready" and public.deployments == {"Detector": "ready", "Swapper": "failed"}
    assert public.models == {"scrfd_2.5g": "loaded"} and "/srv" not in public.model_dump_json()
    detailed = asyncio.run(readiness(probes, detailed=True))
    assert detailed.models == {"scrfd_2.5g": "/srv/models/scrfd.onnx"}
    assert detailed.deployments["Swapper"] == "failed (RuntimeError)"


# ------------------------------------------------------------ OpenAPI
def test_openapi_declares_the_multipart_fields():
    from fusion_ray.serve.app import create_api
    from fusion_ray.serve.schemas import SwapOptions

    spec = create_api(_core()).openapi()

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


def _core_with(args):
    from fusion_ray.serve.ingress import IngressCore

    threads = cv2.getNumThreads()
    core = IngressCore(parse_settings(args), None, None, None, None)
    cv2.setNumThreads(threads)
    return core


# ------------------------------------------------------------ packaged config
def test_the_packaged_default_config_equals_configs_serve_yaml():
    from fusion_ray.cli.serve import default_config

    assert default_config().read_bytes() == (REPO / "configs" / "serve.yaml").read_bytes()


def test_auto_placement_is_fused_unless_a_node_has_more_than_one_gpu():
    from fusion_ray.serve.settings import resolve_placement

    assert resolve_placement("auto", []) == "fused"  # no cluster yet, or CPU nodes only
    assert resolve_placement("auto", [0.0, 1.0]) == "fused"  # one GPU per node
    assert resolve_placement("auto", [0.0, 2.0]) == "split"
    assert resolve_placement("fused", [8.0]) == "fused" and resolve_placement("split", []) == "split"
    assert ServeSettings().placement == "auto"
    with pytest.raises(ConfigError):
        parse_settings({"placement": "scattered"})


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

    api = create_api(_core())
    assert _asgi_get(api, "/docs")[0] == 404 and _asgi_get(api, "/redoc")[0] == 404
    status, body = _asgi_get(api, "/openapi.json")
    assert status == 200 and "/v1/swap" in json.loads(body)["paths"]
    status, page = _asgi_get(api, "/live")
    assert status == 200 and b"getUserMedia" in page
    assert not re.findall(rb"(?:src|href)\s*=\s*[\"']?(?:https?:)?//", page)  # no script or style from elsewhere


@pytest.mark.parametrize("fmt", ["WEBP", "PNG"])
def test_an_animated_upload_is_415_not_its_first_frame(fmt):
    import io

    from PIL import Image

    frames = [Image.fromarray(np.full((8, 8, 3), level, np.uint8)) for level in (0, 128, 255)]
    buffer = io.BytesIO()
    frames[0].save(buffer, fmt, save_all=True, append_images=frames[1:], duration=50)
    with pytest.raises(ApiError) as err:
        check_image(buffer.getvalue(), "target image", max_pixels=10**6)
    assert err.value.status == 415
    assert f"target image is an animated {fmt} of 3 frames" in err.value.body()["detail"]
