"""WebRTC into the in-process host over 127.0.0.1: real aiortc peers, the real SCRFD detector and
the classic swapper (a real swap); WHIP ingest, refusals, DELETE."""

import asyncio
import json
import time

import numpy as np
import pytest

from fusion_ray.live.client import register_source
from fusion_ray.live.config import LiveConfig
from fusion_ray.live.hub import LiveHub
from fusion_ray.live.local import EngineBackend
from fusion_ray.live.localhost import LocalServer
from fusion_ray.live.stamp import STAMP_SIZE

from .conftest import face_clip
from .webrtc_peer import publish

TOKEN = "rtc-secret"


@pytest.fixture(scope="module")
def server(engine):
    backend = EngineBackend(engine, token=TOKEN)
    hub = LiveHub(LiveConfig(stats_interval_s=0.25, deadline_ms=1000, max_streams=2), backend)
    with LocalServer(hub, backend) as running:
        yield running


@pytest.fixture(scope="module")
def clip(images_dir, tmp_path_factory):
    return face_clip(images_dir, tmp_path_factory.mktemp("rtc"), n_frames=15, fps=15)


@pytest.fixture(scope="module")
def source_id(server, images_dir):
    return register_source(server.http_url, (images_dir / "obama.jpg").read_bytes(), "obama.jpg", token=TOKEN)


@pytest.mark.parametrize("codec", ["video/H264", "video/VP8"])
def test_whip_returns_the_swapped_camera_on_the_same_transceiver(server, clip, source_id, engine, codec):
    result = asyncio.run(publish(server.http_url, f"source_id={source_id}", TOKEN, clip, codec=codec, seconds=3.0))
    assert result.status == 201 and result.location.startswith("/v1/whip/"), result.error
    assert result.headers["Content-Type"].startswith("application/sdp")
    assert len(result.received) >= 5, (len(result.received), result.events[-1:])
    assert result.order == sorted(result.order)  # never out of order
    assert result.deleted == 200
    stats = [json.loads(e) for e in result.events if '"stats"' in e]
    assert stats and all(s["dropped"].get("deadline", 0) >= 0 for s in stats)
    # The face region changed (the swap), the stamped corner came back as sent.
    seq = result.order[len(result.order) // 2]
    sent, got = clip[seq % len(clip)].astype(np.int16), result.received[seq].astype(np.int16)
    faces = engine.detect(clip[seq % len(clip)])
    x0, y0, x1, y1 = (int(v) for v in faces[0].bbox_xyxy)
    inner = np.abs(got[y0:y1, x0:x1] - sent[y0:y1, x0:x1]).mean()
    mask = np.ones(sent.shape[:2], bool)
    mask[max(0, y0 - 40):y1 + 40, max(0, x0 - 40):x1 + 40] = False
    mask[:STAMP_SIZE[1] + 8] = False
    outer = np.abs(got[mask] - sent[mask]).mean()
    assert inner > 8.0 and outer < 6.0, (inner, outer)


def test_separate_send_and_receive_transceivers_work_too(server, clip, source_id):
    result = asyncio.run(publish(server.http_url, f"source_id={source_id}", TOKEN, clip, seconds=2.5, sendrecv=False))
    assert result.status == 201 and len(result.received) >= 3


@pytest.mark.parametrize(("query", "token", "status", "code"), [
    ("source_id={sid}", "wrong", 401, "unauthorized"),
    ("source_id=nope", TOKEN, 404, "unknown_source"),
    ("source_id={sid}&face_swapper_pixel_boost=1024x1024", TOKEN, 422, "invalid_option"),
    ("source_id={sid}&bogus=1", TOKEN, 400, "malformed_start"),
    ("source_id={sid}&deadline_ms=1", TOKEN, 400, "malformed_start"),
])
def test_refusals(server, clip, source_id, query, token, status, code):
    result = asyncio.run(publish(server.http_url, query.format(sid=source_id), token, clip, seconds=0.1))
    assert (result.status, result.error["error"]) == (status, code), result.error


async def _offer(video: int = 1, audio: bool = False, direction: str = "sendrecv") -> str:
    from aiortc import RTCPeerConnection

    pc = RTCPeerConnection()
    for _ in range(video):
        pc.addTransceiver("video", direction=direction)
    if audio:
        pc.addTransceiver("audio", direction="sendrecv")
    await pc.setLocalDescription(await pc.createOffer())
    sdp = pc.localDescription.sdp
    await pc.close()
    return sdp


def _post(url: str, body: str, token: str | None = TOKEN, content_type: str = "application/sdp") -> tuple[int, dict]:
    import aiohttp

    async def go() -> tuple[int, dict]:
        headers = {"Content-Type": content_type, **({"Authorization": f"Bearer {token}"} if token else {})}
        async with aiohttp.ClientSession() as http, http.post(url, data=body, headers=headers) as response:
            return response.status, await response.json()

    return asyncio.run(go())


def _only_codec(sdp: str, name: str) -> str:
    """The offer with its video codecs renamed to ``name`` (one the service does not take)."""
    return sdp.replace("VP8/90000", f"{name}/90000").replace("H264/90000", f"{name}/90000")


@pytest.mark.parametrize(("make", "content_type", "status", "code"), [
    (lambda: "hello, not an offer", "application/sdp", 400, "bad_sdp"),
    (lambda: "v=0\r\nthis is garbage\r\n", "application/sdp", 400, "bad_sdp"),
    (lambda: asyncio.run(_offer(video=0, audio=True)), "application/sdp", 422, "no_video"),
    (lambda: asyncio.run(_offer(direction="recvonly")), "application/sdp", 422, "no_video"),
    (lambda: asyncio.run(_offer(video=50)), "application/sdp", 422, "too_many_tracks"),
    (lambda: _only_codec(asyncio.run(_offer()), "VP9"), "application/sdp", 415, "unsupported_codec"),
    (lambda: asyncio.run(_offer()), "application/json", 415, "unsupported_media_type"),
    (lambda: "v=0\r\n" + "a=x\r\n" * 40000, "application/sdp", 413, "offer_too_large"),
])
def test_offers_the_service_cannot_take_are_refused_with_the_reason(server, source_id, make, content_type, status,
                                                                    code):
    got, body = _post(f"{server.http_url}/v1/whip?source_id={source_id}", make(), content_type=content_type)
    assert (got, body["error"]) == (status, code), body
    assert body["detail"]


def test_over_the_stream_cap_is_503_and_unknown_sessions_404(server, clip, source_id):
    async def scenario() -> list[int]:
        first = [asyncio.create_task(publish(server.http_url, f"source_id={source_id}", TOKEN, clip, seconds=2.0))
                 for _ in range(2)]
        await asyncio.sleep(1.0)
        third = await publish(server.http_url, f"source_id={source_id}", TOKEN, clip, seconds=0.1)
        return [third.status, *[r.status for r in await asyncio.gather(*first)]]

    assert asyncio.run(scenario()) == [503, 201, 201]
    assert _post(f"{server.http_url}/v1/whep/nosuchsession", asyncio.run(_offer(direction="recvonly")))[0] == 404


def test_audio_offered_comes_back_in_step(server, clip, source_id):
    result = asyncio.run(publish(server.http_url, f"source_id={source_id}", TOKEN, clip, seconds=2.5, audio=True))
    assert result.status == 201 and len(result.received) >= 3
    assert result.audio_frames >= 50  # 20 ms frames: the offered audio was passed through


def test_a_session_whose_source_is_deleted_ends_with_the_reason(server, clip, images_dir):
    from fusion_ray.live.client import register_source

    doomed = register_source(server.http_url, (images_dir / "obama.jpg").read_bytes(), "obama.jpg", token=TOKEN)

    async def scenario():
        answered: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        session = asyncio.create_task(publish(server.http_url, f"source_id={doomed}", TOKEN, clip, seconds=15,
                                              delete=False, on_location=answered.set_result))
        await asyncio.wait_for(answered, 10)
        await asyncio.sleep(1.0)
        import aiohttp

        async with aiohttp.ClientSession() as http, http.delete(
                f"{server.http_url}/v1/sources/{doomed}", headers={"Authorization": f"Bearer {TOKEN}"}) as response:
            assert response.status == 204
        started = time.monotonic()
        return await session, time.monotonic() - started

    result, took = asyncio.run(scenario())
    assert result.closed_by_server and took < 5.0, took
    assert [json.loads(e)["code"] for e in result.events if '"error"' in e] == ["source_deleted"], result.events


def test_twenty_sessions_opened_and_closed_leave_memory_flat(server, clip, source_id):
    import psutil

    process = psutil.Process()
    rtc = server.app.state.webrtc

    async def sessions(count: int) -> list[int]:
        return [(await publish(server.http_url, f"source_id={source_id}", TOKEN, clip, seconds=0.4)).status
                for _ in range(count)]

    assert asyncio.run(sessions(5)) == [201] * 5  # warm-up: codecs, pools
    time.sleep(1.0)
    before = (process.memory_info().rss, process.num_threads(), process.num_fds())
    assert asyncio.run(sessions(20)) == [201] * 20
    deadline = time.monotonic() + 10
    while (rtc.sessions or server.hub.active_streams) and time.monotonic() < deadline:
        time.sleep(0.2)
    after = (process.memory_info().rss, process.num_threads(), process.num_fds())
    assert not rtc.sessions and server.hub.active_streams == 0
    assert after[0] - before[0] < 40 * 2**20, (before, after)  # RSS within 40 MB over 20 sessions
    assert after[1] <= before[1] + 4 and after[2] <= before[2] + 8, (before, after)
