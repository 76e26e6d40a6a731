"""End to end over a real WebSocket on 127.0.0.1: the in-process host with the real SCRFD detector
and the classic swapper (a real swap), driven by the Python live client."""

import asyncio
import contextlib
import json
import time
import urllib.error
import urllib.request
from fractions import Fraction

import cv2
import numpy as np
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from fusion_ray.imageio import read_image
from fusion_ray.live.backend import FramePlan
from fusion_ray.live.client import LiveClientError, register_source, run_stream
from fusion_ray.live.config import LiveConfig
from fusion_ray.live.frame_sources import JpegClip, encode_frame
from fusion_ray.live.hub import LiveHub
from fusion_ray.live.local import EngineBackend
from fusion_ray.live.localhost import LocalServer
from fusion_ray.live.protocol import StartMessage, pack_frame, unpack_frame
from fusion_ray.video.synthetic import make_test_video
from tests.live.conftest import face_clip

TOKEN = "live-secret"


@pytest.fixture(scope="module")
def server(engine):
    backend = EngineBackend(engine, token=TOKEN)
    hub = LiveHub(LiveConfig(stats_interval_s=0.25, deadline_ms=1000), backend)
    with LocalServer(hub, backend) as running:
        yield running


@pytest.fixture(scope="module")
def clip(images_dir, tmp_path_factory):
    return face_clip(images_dir, tmp_path_factory.mktemp("live"), n_frames=20, fps=30)


@pytest.fixture(scope="module")
def source_id(server, images_dir):
    return register_source(server.http_url, (images_dir / "obama.jpg").read_bytes(), "obama.jpg", token=TOKEN)


def _decode(data: bytes) -> np.ndarray:
    return cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)


def test_a_stream_returns_swapped_frames_in_order(server, clip, source_id, engine):
    results: dict[int, bytes] = {}
    jpegs = [encode_frame(f, 90) for f in clip]
    source = JpegClip(jpegs, fps=10, loop=False)
    report = asyncio.run(run_stream(server.ws_url, {"source_id": source_id, "token": TOKEN}, source,
                                    on_result=lambda seq, image: results.__setitem__(seq, image), drain_s=5.0))
    assert report.ready["stand_in_models"] == []  # real detector, model-free classic swapper
    assert report.sent == len(clip) and report.received >= 5
    assert report.received_seqs == sorted(set(report.received_seqs))
    assert report.received + sum(report.dropped.values()) == report.sent
    counted = [s["frames_in"] for s in report.stats]
    assert counted and counted == sorted(counted) and 0 < counted[-1] <= len(clip)
    assert report.close_code == 1000
    # The face region changed (the swap), the background did not (beyond JPEG noise).
    seq = report.received_seqs[0]
    sent, got = _decode(jpegs[seq]).astype(np.int16), _decode(results[seq]).astype(np.int16)
    faces = engine.detect(clip[seq])
    assert faces
    x0, y0, x1, y1 = (int(v) for v in faces[0].bbox_xyxy)
    inner = np.abs(got[y0:y1, x0:x1] - sent[y0:y1, x0:x1]).mean()
    mask = np.ones(sent.shape[:2], bool)
    mask[max(0, y0 - 40):y1 + 40, max(0, x0 - 40):x1 + 40] = False
    outer = np.abs(got[mask] - sent[mask]).mean()
    print(f"face region changed by {inner:.1f}, the rest by {outer:.1f}")
    assert inner > 8.0 and outer < 3.0, (inner, outer)


def test_a_frame_without_a_face_comes_back_unchanged(server, source_id):
    background = np.tile(np.linspace(40, 200, 640, dtype=np.uint8)[None, :, None], (360, 1, 3))
    results: list[bytes] = []
    source = JpegClip([encode_frame(background, 95)], fps=5, loop=False)
    report = asyncio.run(run_stream(server.ws_url, {"source_id": source_id, "token": TOKEN}, source,
                                    on_result=lambda seq, image: results.append(image), drain_s=5.0))
    assert report.received == 1
    assert np.abs(_decode(results[0]).astype(np.int16) - background.astype(np.int16)).mean() < 2.0


@pytest.mark.parametrize(("start", "close_code", "code"), [
    ({"source_id": "x"}, 1008, "unauthorized"),
    ({"source_id": "src_nope", "token": TOKEN}, 1008, "unknown_source"),
    ({"source_id": "x", "token": TOKEN, "select": "everyone"}, 1003, "malformed_start"),
])
def test_refusals_over_a_real_websocket(server, start, close_code, code):
    with pytest.raises(LiveClientError) as caught:
        asyncio.run(run_stream(server.ws_url, start, JpegClip([b"x"], fps=1, loop=False)))
    assert (caught.value.close_code, caught.value.code) == (close_code, code)


def test_binary_start_message_is_1003(server):
    async def scenario():
        async with connect(server.ws_url) as ws:
            await ws.send(b"\x00" * 20)
            event = json.loads(await ws.recv())
            await ws.wait_closed()
            return event, ws.close_code

    event, close_code = asyncio.run(scenario())
    assert event["code"] == "malformed_start" and close_code == 1003


def test_source_registration_needs_the_token(server, images_dir):
    with pytest.raises(LiveClientError, match="401"):
        register_source(server.http_url, (images_dir / "obama.jpg").read_bytes(), token="wrong")


def test_live_page_is_self_contained(server):
    with urllib.request.urlopen(server.http_url + "/live") as response:
        html = response.read().decode()
    assert "getUserMedia" in html and "/v1/stream" in html and "/v1/sources" in html
    assert "setUint32(0, seq, false)" in html and "setFloat64(4, ts, false)" in html
    assert "<script src" not in html and "http://" not in html and "https://" not in html.replace('"https:"', "")


def test_the_processor_runs_the_engine_chain(engine, clip, images_dir):
    """The stream processor's detect-select-swap-paste equals Engine.process_frame on the same frame."""
    backend = EngineBackend(engine)
    identity_id = backend.add_source(read_image(images_dir / "obama.jpg").frame)
    processor = asyncio.run(backend.open(StartMessage(source_id=identity_id)))
    frame = clip[5]
    processed = processor.process_sync(frame, FramePlan(seq=0, level=0, enhance=False))
    expected = engine.process_frame(frame, backend.sources.get(identity_id))
    assert processed.faces_detected == expected.faces_detected == 1
    np.testing.assert_array_equal(processed.frame, expected.frame)
    # Level 3 (landmarks from a recent detection): the stream's tracker follows the face and it is
    # re-detected on a small crop around its prediction, then swapped where it is.
    followed = processor.process_sync(frame, FramePlan(seq=1, level=3, enhance=False, landmarks=processed.landmarks))
    assert followed.faces_detected == 1 and list(processor.follower.crops)  # a crop re-detection ran
    assert np.abs(followed.landmarks - processed.landmarks).max() < 3.0  # the same face, same place
    assert float(np.abs(followed.frame.astype(np.int16) - expected.frame.astype(np.int16)).mean()) < 1.0
    assert not np.array_equal(followed.frame, frame)
    small = processor.process_sync(frame, FramePlan(seq=2, level=4, enhance=False, detector_size=320))
    assert small.faces_detected == 1 and not np.array_equal(small.frame, frame)


def test_unknown_http_errors_are_not_swallowed(server):
    request = urllib.request.Request(server.http_url + "/v1/sources", data=b"x", method="POST",
                                     headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "text/plain"})
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(request)
    assert caught.value.code in (400, 422)


def test_cli_live_plays_a_video_as_a_camera_and_writes_the_result(server, images_dir, tmp_path, capsys):
    from fusion_ray.cli import main

    face = read_image(images_dir / "biden.jpg").frame
    video = make_test_video(tmp_path / "in.mp4", face_image=face, n_frames=15, fps=Fraction(15), audio=False)
    out = tmp_path / "out.mp4"
    code = main(["live", "--url", server.ws_url, "--source", str(images_dir / "obama.jpg"), "--input", str(video),
                 "--output", str(out), "--token", TOKEN, "--deadline-ms", "1000"])
    printed = capsys.readouterr().out
    assert code == 0 and "sent 15 frames" in printed and "latency" in printed and "dropped" in printed
    written = cv2.VideoCapture(str(out))
    assert written.isOpened() and int(written.get(cv2.CAP_PROP_FRAME_COUNT)) >= 5


def test_live_bench_driver_and_baseline(server, clip, engine, images_dir, source_id):
    from fusion_ray.bench.live import render_markdown, run_live_bench

    backend = EngineBackend(engine)
    processor = asyncio.run(backend.open(StartMessage(source_id=backend.add_source(
        read_image(images_dir / "obama.jpg").frame))))
    result = run_live_bench(server.ws_url, {"source_id": source_id, "token": TOKEN}, clip, stream_counts=[2],
                            seconds=1.0, fps=10, deadline_ms=1000, baseline=processor.process_sync)
    assert result["baseline"]["processed"] > 0 and result["baseline"]["latency_ms"]["p50"] is not None
    run = result["runs"][0]
    assert run["streams"] == 2 and len(run["fps_per_stream"]) == 2 and run["received"] > 0
    assert run["sent"] == run["received"] + sum(run["dropped"].values())
    assert "| 2 |" in render_markdown(result)


def test_live_bench_in_this_process_without_a_socket(clip, engine, images_dir):
    """``fusion-ray bench live --direct``: the streams run as ``fusion-ray live`` without --url runs them."""
    from fusion_ray.bench.live import run_live_bench
    from fusion_ray.live.local import local_hub

    backend = EngineBackend(engine)
    source_id = backend.add_source(read_image(images_dir / "obama.jpg").frame)
    result = run_live_bench("", {"source_id": source_id, "deadline_ms": 1000}, clip, stream_counts=[2], seconds=1.0,
                            fps=10, hub=local_hub(backend, streams=2))
    run = result["runs"][0]
    assert result["url"].startswith("in-process") and run["streams"] == 2 and run["received"] > 0
    assert run["sent"] == run["received"] + sum(run["dropped"].values())


def test_a_deeply_nested_start_message_is_malformed_start_1003(server):
    """100,000 nested arrays: an error event and close 1003 (a RecursionError dropped the socket, 1006)."""
    async def scenario():
        async with connect(server.ws_url, max_size=None) as ws:
            await ws.send("[" * 100_000 + "]" * 100_000)
            event = json.loads(await ws.recv())
            await ws.wait_closed()
            return event, ws.close_code

    event, close_code = asyncio.run(scenario())
    assert (event["type"], event["code"], close_code) == ("error", "malformed_start", 1003)


def test_deleting_a_source_ends_its_open_stream_within_a_second(server, images_dir):
    source = register_source(server.http_url, (images_dir / "obama.jpg").read_bytes(), "obama.jpg", token=TOKEN)

    async def scenario():
        async with connect(server.ws_url) as ws:
            await ws.send(json.dumps({"source_id": source, "token": TOKEN}))
            assert json.loads(await ws.recv())["type"] == "ready"
            request = urllib.request.Request(f"{server.http_url}/v1/sources/{source}", method="DELETE",
                                             headers={"Authorization": f"Bearer {TOKEN}"})
            began = time.monotonic()
            with urllib.request.urlopen(request) as response:
                assert response.status == 204
            events = []
            with contextlib.suppress(ConnectionClosed):
                while True:
                    message = await ws.recv()
                    if isinstance(message, str):
                        events.append(json.loads(message))
            return events, ws.close_code, time.monotonic() - began

    events, close_code, took = asyncio.run(scenario())
    assert events[-1]["type"] == "error" and events[-1]["code"] == "source_deleted"
    assert close_code == 1008 and took < 1.0
    with pytest.raises(LiveClientError) as caught:  # and a new stream cannot use it
        asyncio.run(run_stream(server.ws_url, {"source_id": source, "token": TOKEN}, JpegClip([b"x"], fps=1, loop=False)))
    assert caught.value.code == "unknown_source"


def test_a_frame_over_the_limit_is_too_large_and_the_stream_goes_on(server, source_id, clip):
    """A 5 MB frame (over live.max_frame_bytes, 2 MB; within the transport's 16 MiB cap) is dropped
    as too_large and the next frame comes back (the host's cap was the frame limit + 64 KiB: 1009);
    a message over the cap closes the connection with 1009, as the README says."""
    async def scenario(size: int) -> tuple[list[dict], list[int], int | None]:
        events, results = [], []
        async with connect(server.ws_url, max_size=None) as ws:
            await ws.send(json.dumps({"source_id": source_id, "token": TOKEN}))
            assert json.loads(await ws.recv())["max_message_bytes"] == 16 * 1024 * 1024
            await ws.send(pack_frame(1, 0.0, b"\xff\xd8" + b"\x00" * size))
            with contextlib.suppress(ConnectionClosed):
                for seq in range(2, 12):  # good frames until one comes back (a busy host may miss deadlines)
                    await ws.send(pack_frame(seq, 0.0, encode_frame(clip[0], 80)))
                    with contextlib.suppress(TimeoutError):
                        while True:
                            message = await asyncio.wait_for(ws.recv(), 1.0)
                            if isinstance(message, str):
                                events.append(json.loads(message))
                            else:
                                results.append(unpack_frame(message)[0])
                                return events, results, None
                await ws.recv()
        return events, results, ws.close_code

    events, results, _ = asyncio.run(scenario(5_000_000))
    assert {"type": "dropped", "seq": 1, "reason": "too_large"} in events and len(results) == 1
    _, results, close_code = asyncio.run(scenario(17 * 1024 * 1024))
    assert results == [] and close_code == 1009


def test_the_frame_limit_must_stay_below_the_transport_cap():
    with pytest.raises(ValueError, match="max_message_bytes"):
        LiveConfig(max_frame_bytes=16 * 1024 * 1024)
