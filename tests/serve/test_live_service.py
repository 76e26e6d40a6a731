"""Live streams on the Serve app over real WebSockets on 127.0.0.1, and the /live page in a real
headless Chromium whose fake camera plays a test clip.

The app runs the classic swapper (the one real swap here: no stand-in is involved, only the
real SCRFD detector) through the detector and swapper deployments, as HTTP requests do.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import urllib.request
from fractions import Fraction

import cv2
import numpy as np
import pytest
from websockets.asyncio.client import connect

from fusion_ray.imageio import read_image
from fusion_ray.live.client import register_source, run_stream
from fusion_ray.live.frame_sources import JpegClip, encode_frame
from fusion_ray.live.protocol import pack_frame, unpack_frame
from fusion_ray.serve.metrics import parse_exposition
from fusion_ray.video.decode import decode_all
from fusion_ray.video.synthetic import make_test_video
from tests.procs import free_port
from tests.serve.browser import CHROMIUM, face_detector, run_live_page, swapped_towards_source

pytestmark = pytest.mark.ray

TOKEN = "live-token-7"
MAX_STREAMS = 2



@pytest.fixture(scope="module")
def service(ray_cluster, models_config):
    """The app with the classic swapper, deployed once for the module."""
    from ray import serve

    from fusion_ray.serve.app import build_app

    args = {
        "placement": "split",  # the parts' step metrics (track) are checked; both: test_placement.py
        "engine": {"models": models_config.model_dump(mode="json"), "runtime": {"providers": ["cpu"]},
                   "swap": {"swapper": "classic"}},
        "deployments": {"ingress": {"num_cpus": 0.2}, "detector": {"num_cpus": 0.2},
                        "swapper": {"num_cpus": 0.1}, "enhancer_enabled": False,
                        "state": {"num_cpus": 0.05}},
        "auth": {"token": TOKEN, "token_env": None, "metrics_public": True},
        "live": {"max_streams": MAX_STREAMS, "deadline_ms": 2000, "stats_interval_s": 0.25},
    }
    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    try:
        serve.run(build_app(args), name="fusion_ray_live_test", route_prefix="/")
        yield port
    finally:
        serve.shutdown()


LEVEL2_PREFIX = "/l2"


@pytest.fixture(scope="module")
def level2(service, models_config):
    """A second app whose streams step straight down to level 3 (detect_every_k) and stay there (any latency is
    'unhealthy'): detection on every 3rd frame, the stream's tracker and crop re-detection between."""
    from ray import serve

    from fusion_ray.serve.app import build_app

    args = {
        "placement": "split",  # the parts' step metrics (track) are checked; both: test_placement.py
        "engine": {"models": models_config.model_dump(mode="json"), "runtime": {"providers": ["cpu"]},
                   "swap": {"swapper": "classic"}},
        "deployments": {"ingress": {"num_cpus": 0.1}, "detector": {"num_cpus": 0.1},
                        "swapper": {"num_cpus": 0.05}, "enhancer_enabled": False, "state": {"num_cpus": 0.05}},
        "auth": {"token": None, "token_env": None, "metrics_public": True},
        "live": {"deadline_ms": 3000, "stats_interval_s": 0.2,
                 "ladder": {"allowed_levels": [0, 3], "degrade_latency": 0.001, "recover_latency": 0.001, "degrade_after_s": 0.2,
                            "recover_after_s": 600, "detect_every": 3}},
    }
    serve.run(build_app(args), name="fusion_ray_live_level2", route_prefix=LEVEL2_PREFIX)
    return f"127.0.0.1:{service}{LEVEL2_PREFIX}"


@pytest.fixture(scope="module")
def http(service):
    return f"http://127.0.0.1:{service}"


@pytest.fixture(scope="module")
def ws(service):
    return f"ws://127.0.0.1:{service}/v1/stream"


@pytest.fixture(scope="module")
def clip(images_dir, tmp_path_factory):
    """A 640x360 clip of a real photo's face moving (the real detector finds it)."""
    face = read_image(images_dir / "biden.jpg").frame
    path = make_test_video(tmp_path_factory.mktemp("live") / "clip.mp4", face_image=face, n_frames=24,
                           fps=Fraction(30), audio=False)
    return path, [decoded.frame for decoded in decode_all(path)]


@pytest.fixture(scope="module")
def source_id(http, images_dir):
    return register_source(http, (images_dir / "obama.jpg").read_bytes(), "obama.jpg", token=TOKEN)


def _decode(data: bytes) -> np.ndarray:
    return cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)


async def _refusal(url: str, first: str | bytes) -> tuple[dict, int | None]:
    async with connect(url) as conn:
        await conn.send(first)
        event = json.loads(await conn.recv())
        with contextlib.suppress(Exception):  # the close
            await conn.recv()
        return event, conn.close_code


@pytest.mark.parametrize("start,code,error", [
    ({"source_id": "x"}, 1008, "unauthorized"),                       # no token
    ({"source_id": "x", "token": "wrong"}, 1008, "unauthorized"),
    ({"source_id": "nope", "token": TOKEN}, 1008, "unknown_source"),
    ({"token": TOKEN}, 1003, None),                                   # source_id missing: malformed
    ("[" * 100_000 + "]" * 100_000, 1003, "malformed_start"),         # a RecursionError and 1006 once
])
def test_refusals_send_an_error_then_close(ws, source_id, start, code, error):
    event, close_code = asyncio.run(_refusal(ws, start if isinstance(start, str) else json.dumps(start)))
    assert event["type"] == "error" and close_code == code
    if error:
        assert event["code"] == error


def test_a_stream_returns_swapped_frames_through_the_deployments(ws, clip, source_id, detector):
    _, frames = clip
    jpegs = [encode_frame(f, 90) for f in frames]
    results: dict[int, bytes] = {}
    report = asyncio.run(run_stream(ws, {"source_id": source_id, "token": TOKEN}, JpegClip(jpegs, fps=8, loop=False),
                                    on_result=lambda seq, image: results.__setitem__(seq, image), drain_s=8.0))
    assert report.ready["stand_in_models"] == []  # the real detector and the model-free classic swap
    assert report.received >= 3 and report.received_seqs == sorted(set(report.received_seqs))
    assert report.received + sum(report.dropped.values()) == report.sent
    assert report.stats and "level" in report.stats[-1]
    for seq in report.received_seqs:  # the face region changed, the rest did not (beyond JPEG noise)
        inside, outside = _face_change(detector, _decode(jpegs[seq]), _decode(results[seq]))
        assert inside > 4 * outside and outside < 3, (seq, inside, outside)


def test_a_frame_without_a_face_comes_back_unchanged_and_the_header_is_echoed(ws, source_id):
    async def one() -> tuple[int, float, bytes]:
        async with connect(ws) as conn:
            await conn.send(json.dumps({"source_id": source_id, "token": TOKEN}))
            assert json.loads(await conn.recv())["type"] == "ready"
            blank = cv2.imencode(".png", np.full((120, 160, 3), 90, np.uint8))[1].tobytes()
            await conn.send(pack_frame(7, 1234.5, blank))
            while True:
                message = await conn.recv()
                if isinstance(message, bytes):
                    return unpack_frame(message)

    seq, ts, data = asyncio.run(one())
    assert (seq, ts) == (7, 1234.5)
    assert np.abs(_decode(data).astype(int) - 90).max() <= 3  # JPEG of the same flat frame


def test_too_many_streams_is_1013_and_metrics_show_streams(ws, http, source_id):
    async def crowd() -> tuple[dict, int | None]:
        opened = []
        try:
            for _ in range(MAX_STREAMS):
                conn = await connect(ws)
                await conn.send(json.dumps({"source_id": source_id, "token": TOKEN}))
                assert json.loads(await conn.recv())["type"] == "ready"
                opened.append(conn)
            text = urllib.request.urlopen(f"{http}/metrics", timeout=30).read().decode()
            samples = parse_exposition(text)
            assert samples["fusion_ray_live_streams"] == [({}, float(MAX_STREAMS))]
            by_level = {labels["level"]: value for labels, value in samples["fusion_ray_live_streams_by_level"]}
            assert set(by_level) >= {"0", "5"}
            assert by_level["0"] == float(MAX_STREAMS) and sum(by_level.values()) == float(MAX_STREAMS)  # new streams
            latency = {name: value for name, series in samples.items() if name.startswith("fusion_ray_live_latency_seconds")
                       for _, value in series}
            assert latency["fusion_ray_live_latency_seconds_count"] >= 1  # the earlier tests' frames
            outcomes = {labels["outcome"] for labels, _ in samples["fusion_ray_live_frames_total"]}
            assert "delivered" in outcomes  # the earlier tests' frames
            return await _refusal(ws, json.dumps({"source_id": source_id, "token": TOKEN}))
        finally:
            for conn in opened:
                await conn.close()

    event, code = asyncio.run(crowd())
    assert code == 1013 and event["type"] == "error"


def test_http_swap_runs_the_classic_swapper_as_the_image_command_does(http, source_id, images_dir, models_config):
    """The service runs the classic swapper over HTTP too (it refused it at config load once):
    the same pixels as the image command's engine, and no stand-in label (none was used)."""
    import requests

    from fusion_ray.config import EngineConfig, RuntimeConfig, SwapConfig
    from fusion_ray.imageio import decode_image, read_png_text
    from fusion_ray.runners.inline import Engine

    target, source = (images_dir / "biden.jpg").read_bytes(), (images_dir / "obama.jpg").read_bytes()
    response = requests.post(f"{http}/v1/swap", files=[("target", ("biden.jpg", target, "image/jpeg"))],
                             data={"source_id": source_id, "format": "png"},
                             headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60)
    assert response.status_code == 200, response.text
    cfg = EngineConfig(models=models_config, runtime=RuntimeConfig(providers=["cpu"]), swap=SwapConfig(swapper="classic"))
    engine = Engine.load(cfg, components=["detector"], cpu_budget=1)
    frame = decode_image(target).frame
    expected = engine.process_frame(frame, engine.prepare_source([decode_image(source).frame])).frame
    assert np.array_equal(_decode(response.content), expected)
    assert not np.array_equal(expected, frame)  # a visible swap
    assert "X-Fusion-Ray-Stand-In" not in response.headers
    assert "fusion_ray.stand_in_models" not in read_png_text(response.content)


def _face_change(detector, sent: np.ndarray, got: np.ndarray) -> tuple[float, float]:
    """Mean absolute change inside the sent frame's face box, and outside it."""
    diff = np.abs(sent.astype(np.int16) - got.astype(np.int16)).mean(axis=2)
    x1, y1, x2, y2 = (int(v) for v in max(detector.detect(sent), key=lambda f: f.area).bbox_xyxy)
    inside = np.zeros(diff.shape, bool)
    inside[y1:y2, x1:x2] = True
    return float(diff[inside].mean()), float(diff[~inside].mean())


def test_level_3_follows_faces_with_the_tracker_between_detections(level2, clip, images_dir, detector):
    _, frames = clip
    source = register_source(f"http://{level2}", (images_dir / "obama.jpg").read_bytes(), "obama.jpg")
    jpegs = [encode_frame(f, 90) for f in frames * 2]
    results: dict[int, bytes] = {}
    report = asyncio.run(run_stream(f"ws://{level2}/v1/stream", {"source_id": source}, JpegClip(jpegs, fps=6, loop=False),
                                    on_result=lambda seq, image: results.__setitem__(seq, image), drain_s=10.0))
    assert any(stats["level"] == 3 for stats in report.stats)
    late = [seq for seq in report.received_seqs if seq >= len(frames)]  # well after the step down
    assert len(late) >= 3
    for seq in late:  # every delivered frame has its face swapped, detected or followed
        inside, outside = _face_change(detector, _decode(jpegs[seq]), _decode(results[seq]))
        assert inside > 4 * outside and outside < 3, (seq, inside, outside)
    text = urllib.request.urlopen(f"http://{level2}/metrics", timeout=30).read().decode()
    steps = {labels.get("step") for labels, _ in parse_exposition(text).get("fusion_ray_step_seconds_count", [])}
    assert "track" in steps  # the crop re-detection ran (in the detect part, where the chain's steps are counted)


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (.ci/run installs it)")
def test_the_live_page_in_headless_chromium_shows_swapped_frames(http, clip, images_dir, tmp_path, detector):
    """This service is split: WebRTC runs in the fused placement only (501 here), so the page falls
    back to the WebSocket."""
    _, frames = clip
    shot, shown = run_live_page(http, TOKEN, frames, images_dir / "obama.jpg", tmp_path)
    assert shown["transport"] == "WebSocket", shown
    # The counters show what the stream does: frames sent and received at a rate, a latency, a level.
    assert float(shown["fps"]) > 0 and float(shown["latency"]) > 0, shown
    assert int(shown["sent"]) >= int(shown["received_at_shot"]) and int(shown["level"]) in range(6), shown
    assert swapped_towards_source(detector, shot, read_image(images_dir / "obama.jpg").frame, frames[0])


@pytest.fixture(scope="module")
def detector(models_config):
    return face_detector(models_config)


def test_deleting_a_source_ends_the_streams_using_it(ws, http, images_dir):
    """DELETE /v1/sources/{id}: an open stream on it gets source_deleted and close 1008 within a
    second (it stayed usable for the rest of the stream, up to an hour)."""
    import time

    import requests
    from websockets.exceptions import ConnectionClosed

    source = register_source(http, (images_dir / "obama.jpg").read_bytes(), "obama.jpg", token=TOKEN)

    async def scenario() -> tuple[list[dict], int | None, float]:
        events: list[dict] = []
        async with connect(ws) as conn:
            await conn.send(json.dumps({"source_id": source, "token": TOKEN}))
            assert json.loads(await conn.recv())["type"] == "ready"
            deleted = await asyncio.to_thread(requests.delete, f"{http}/v1/sources/{source}", timeout=30,
                                              headers={"Authorization": f"Bearer {TOKEN}"})
            assert deleted.status_code == 204
            began = time.monotonic()
            with contextlib.suppress(ConnectionClosed, TimeoutError):
                while True:
                    message = await asyncio.wait_for(conn.recv(), 10)
                    if isinstance(message, str):
                        events.append(json.loads(message))
            return events, conn.close_code, time.monotonic() - began

    events, close_code, took = asyncio.run(scenario())
    assert events[-1]["type"] == "error" and events[-1]["code"] == "source_deleted", events
    assert close_code == 1008 and took < 1.0
