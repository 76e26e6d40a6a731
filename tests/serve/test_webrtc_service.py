"""WebRTC through the Serve app (fused placement) on 127.0.0.1: real aiortc peers publish over
WHIP into the replica that runs the chain, a second peer plays the session over WHEP. The
classic swapper (a real swap) with the real SCRFD detector."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.error
import urllib.request

import pytest

from fusion_ray.imageio import read_image
from fusion_ray.live.client import register_source
from fusion_ray.serve.metrics import parse_exposition
from tests.live.conftest import face_clip
from tests.live.webrtc_peer import play as whep_play
from tests.live.webrtc_peer import publish
from tests.procs import free_port
from tests.serve.browser import CHROMIUM, face_detector, run_live_page, swapped_towards_source

pytestmark = pytest.mark.ray

TOKEN = "rtc-token-3"


@pytest.fixture(scope="module")
def service(ray_cluster, models_config):
    from ray import serve

    from fusion_ray.serve.app import build_app

    args = {
        "placement": "fused",
        "engine": {"models": models_config.model_dump(mode="json"), "runtime": {"providers": ["cpu"]},
                   "swap": {"swapper": "classic"}},
        "deployments": {"ingress": {"num_cpus": 0.2}, "fused": {"num_cpus": 0.3}, "enhancer_enabled": False,
                        "state": {"num_cpus": 0.05}},
        "auth": {"token": TOKEN, "token_env": None, "metrics_public": True},
        "live": {"max_streams": 2, "deadline_ms": 2000, "stats_interval_s": 0.25, "idle_timeout_s": 2.0},
    }
    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    try:
        serve.run(build_app(args), name="fusion_ray_webrtc_test", route_prefix="/")
        yield f"http://127.0.0.1:{port}"
    finally:
        serve.shutdown()


@pytest.fixture(scope="module")
def clip(images_dir, tmp_path_factory):
    return face_clip(images_dir, tmp_path_factory.mktemp("rtc"), n_frames=15, fps=15)


@pytest.fixture(scope="module")
def source_id(service, images_dir):
    return register_source(service, (images_dir / "obama.jpg").read_bytes(), "obama.jpg", token=TOKEN)


def _metrics(base: str) -> dict:
    with urllib.request.urlopen(f"{base}/metrics", timeout=10) as response:
        return parse_exposition(response.read().decode())


def _count(samples: dict, name: str, **labels: str) -> float:
    return sum(v for lab, v in samples.get(name, []) if all(lab.get(k) == x for k, x in labels.items()))


def test_whip_into_the_fused_replica_and_a_whep_viewer(service, clip, source_id):
    async def scenario():
        answered: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        publishing = asyncio.create_task(publish(service, f"source_id={source_id}", TOKEN, clip, seconds=5.0,
                                                 on_location=answered.set_result))
        location = await asyncio.wait_for(answered, 30)
        await asyncio.sleep(1.0)
        viewer = await whep_play(service, location.replace("/v1/whip/", "/v1/whep/"), TOKEN, seconds=1.5)
        return await publishing, viewer

    published, (viewer_status, seen) = asyncio.run(scenario())
    assert published.status == 201, published.error
    assert published.location.startswith("/v1/whip/")
    assert len(published.received) >= 5 and published.order == sorted(published.order)
    assert published.deleted == 200
    assert viewer_status == 201 and len(seen) >= 3
    samples = {}
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # the replica's counts reach /metrics at its next flush
        samples = _metrics(service)
        if _count(samples, "fusion_ray_webrtc_sessions_total", event="ended", reason="deleted") >= 1:
            break
        time.sleep(0.5)
    assert _count(samples, "fusion_ray_webrtc_sessions_total", event="opened") >= 1
    assert _count(samples, "fusion_ray_webrtc_sessions_total", event="ended", reason="deleted") >= 1
    assert _count(samples, "fusion_ray_live_frames_total", outcome="delivered") >= 5


@pytest.mark.parametrize(("query", "token", "status", "code"), [
    ("source_id={sid}", "wrong", 401, "unauthorized"),
    ("source_id=nope", TOKEN, 404, "unknown_source"),
    ("source_id={sid}&face_mask_types=occlusion", TOKEN, 403, "over_cap"),
    ("source_id={sid}&nonsense=1", TOKEN, 400, "malformed_start"),
])
def test_refusals_are_json_with_the_reason(service, clip, source_id, query, token, status, code):
    result = asyncio.run(publish(service, query.format(sid=source_id), token, clip, seconds=0.1))
    assert (result.status, result.error["error"]) == (status, code), result.error


def test_a_session_over_the_stream_cap_is_503_and_a_vanished_client_is_reaped(service, clip, source_id):
    async def scenario():
        held = [asyncio.create_task(publish(service, f"source_id={source_id}", TOKEN, clip, seconds=2.5,
                                            delete=False)) for _ in range(2)]
        await asyncio.sleep(1.5)
        third = await publish(service, f"source_id={source_id}", TOKEN, clip, seconds=0.1)
        return third, await asyncio.gather(*held)

    third, held = asyncio.run(scenario())
    assert [h.status for h in held] == [201, 201] and third.status == 503
    assert third.error["error"] == "too_many_streams"
    # The two clients closed without DELETE: their sessions end (idle timeout or ICE) and are counted.
    deadline = time.monotonic() + 20
    ended = 0.0
    while time.monotonic() < deadline:
        samples = _metrics(service)
        ended = sum(_count(samples, "fusion_ray_webrtc_sessions_total", event="ended", reason=r)
                    for r in ("idle_timeout", "disconnected"))
        if ended >= 2:
            break
        time.sleep(0.5)
    assert ended >= 2
    again = asyncio.run(publish(service, f"source_id={source_id}", TOKEN, clip, seconds=0.5))
    assert again.status == 201  # their places were freed


def test_unknown_sessions_are_404(service):
    request = urllib.request.Request(f"{service}/v1/whip/abc-def", method="DELETE",
                                     headers={"Authorization": f"Bearer {TOKEN}"})
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(request, timeout=10)
    assert caught.value.code == 404 and json.loads(caught.value.read())["error"] == "unknown_session"


@pytest.fixture(scope="module")
def detector(models_config):
    return face_detector(models_config)


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (.ci/run installs it)")
def test_the_live_page_streams_over_webrtc_in_headless_chromium(service, clip, images_dir, tmp_path, detector):
    """The page publishes its (fake) camera over WHIP and draws the swapped track it gets back on the
    same connection into its canvas, whose pixels show the swap."""
    shot, shown = run_live_page(service, TOKEN, clip, images_dir / "obama.jpg", tmp_path)
    assert shown["transport"] == "WebRTC", shown
    assert float(shown["fps"]) > 0 and float(shown["latency"]) > 0 and int(shown["level"]) in range(6), shown
    assert int(shown["sent"]) >= int(shown["received_at_shot"]), shown
    assert swapped_towards_source(detector, shot, read_image(images_dir / "obama.jpg").frame, clip[0])
