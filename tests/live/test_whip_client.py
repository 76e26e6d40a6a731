"""The WHIP/WHEP client against real aiortc peers over 127.0.0.1: the plain echo server (every
frame back unchanged) with H.264 and VP8, WHEP playback, and the endpoint's bad answers."""

import asyncio
import itertools
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from aiohttp import web

from fusion_ray.bench.live import make_clip
from fusion_ray.bench.webrtc_echo import EchoServer
from fusion_ray.imageio import read_image
from fusion_ray.live.stamp import read_stamp
from fusion_ray.live.whip_client import WhipError, play, publish
from fusion_ray.live.whip_session import LatestFrameTrack

TOKEN = "secret"


@pytest.fixture(scope="module")
def frames(images_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> list[np.ndarray]:
    face = read_image(images_dir / "biden.jpg").frame
    return make_clip(face, tmp_path_factory.mktemp("whip") / "clip.mp4", n_frames=30)


@pytest.fixture(scope="module")
def echo() -> Iterator[EchoServer]:
    with EchoServer(token=TOKEN) as server:
        yield server


@pytest.mark.parametrize("codec", ["h264", "vp8"])
def test_every_frame_comes_back_in_order_with_its_stamp(echo: EchoServer, frames: list[np.ndarray], codec: str):
    got: list[tuple[int, tuple[int, ...], int | None]] = []
    report = asyncio.run(publish(echo.url, TOKEN, itertools.cycle(frames), fps=30, codec=codec, seconds=2.0,
                                 on_frame=lambda seq, image: got.append((seq, image.shape, read_stamp(image)))))
    assert report.codec == codec and report.sent == 60
    assert report.received >= 40, report.summary()  # a loaded 2-core machine may replace a few before encoding
    assert report.order_violations == 0 and report.duplicates == 0 and report.unreadable == 0
    assert report.seqs == sorted(report.seqs) and set(report.seqs) <= set(range(60))
    assert all(shape == (360, 640, 3) and stamp == seq for seq, shape, stamp in got) and len(got) == report.received
    assert len(report.latencies_ms) == report.received and 0 < report.latency(50) < 1000
    assert report.fps > 15 and report.summary()["latency_ms"]["p99"] is not None
    assert echo.sessions == {}  # the session was DELETEd


def test_separate_send_and_receive_transceivers_and_audio(echo: EchoServer, frames: list[np.ndarray]):
    report = asyncio.run(publish(echo.url, TOKEN, frames, fps=30, codec="vp8", separate=True, audio=True))
    assert report.sent == len(frames) and report.received >= len(frames) // 2
    assert report.order_violations == 0 and report.unreadable == 0


def test_play_reads_a_session_over_whep(echo: EchoServer, frames: list[np.ndarray]):
    async def scenario():
        publishing = asyncio.create_task(publish(echo.url, TOKEN, itertools.cycle(frames), fps=30, seconds=3.0,
                                                 receive=False))
        while not echo.sessions:
            await asyncio.sleep(0.02)
        played = await play(echo.whep_url(), TOKEN, seconds=1.5)
        return await publishing, played

    published, played = asyncio.run(scenario())
    assert published.received == 0 and published.sent == 90
    assert played.codec == "h264" and played.received >= 15 and played.unreadable == 0
    assert played.order_violations == 0 and played.seqs == sorted(played.seqs)


def test_a_wrong_token_is_a_clear_error(echo: EchoServer, frames: list[np.ndarray]):
    with pytest.raises(WhipError, match="refused the token: 401") as caught:
        asyncio.run(publish(echo.url, "wrong", frames, fps=30))
    assert caught.value.status == 401 and "wrong bearer token" in str(caught.value)


class _BadEndpoint:
    """A real HTTP server answering WHIP offers badly."""

    def __init__(self) -> None:
        async def refuse(request: web.Request) -> web.Response:
            return web.Response(status=422, text="codec\nnot supported")

        async def ok_not_created(request: web.Request) -> web.Response:
            return web.Response(status=200, text="v=0", content_type="application/sdp")

        async def no_location(request: web.Request) -> web.Response:
            return web.Response(status=201, text="v=0", content_type="application/sdp")

        async def garbage(request: web.Request) -> web.Response:
            return web.Response(status=201, text="not an sdp", headers={"Location": "/x"})

        self.app = web.Application()
        self.app.add_routes([web.post("/refuse", refuse), web.post("/ok", ok_not_created),
                             web.post("/no-location", no_location), web.post("/garbage", garbage)])


@pytest.mark.parametrize(("path", "message"), [
    ("refuse", "did not create a session: 422 Unprocessable Entity: codec not supported"),
    ("ok", "did not create a session: 200 OK"),
    ("no-location", "201 without a Location header"),
    ("garbage", "unusable SDP answer"),
    ("missing", "404 Not Found"),
])
def test_bad_answers_are_clear_errors(frames: list[np.ndarray], path: str, message: str):
    async def scenario() -> None:
        runner = web.AppRunner(_BadEndpoint().app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        try:
            await publish(f"http://127.0.0.1:{port}/{path}", None, frames, fps=30, timeout_s=5.0)
        finally:
            await runner.cleanup()

    with pytest.raises(WhipError, match=message):
        asyncio.run(scenario())


def test_unreachable_endpoint_is_a_clear_error(frames: list[np.ndarray]):
    with pytest.raises(WhipError, match="cannot reach"):
        asyncio.run(publish("http://127.0.0.1:9/whip", None, frames, fps=30, timeout_s=3.0))


def test_the_outgoing_track_never_waits_and_keeps_only_the_newest_frame():
    async def scenario():
        track = LatestFrameTrack(fps=30)
        for seq in range(1000):  # nobody reads: a stalled endpoint
            track.push(np.full((36, 64, 3), seq % 256, np.uint8), seq)
        first = await asyncio.wait_for(track.recv(), 1.0)
        track.push(np.zeros((36, 64, 3), np.uint8), 1003)
        second = await asyncio.wait_for(track.recv(), 1.0)
        return track, first, second

    track, first, second = asyncio.run(scenario())
    assert track.replaced == 999 and track.sent == 2
    assert first.pts == 999 * 3000 and int(first.to_ndarray(format="bgr24")[0, 0, 0]) == 999 % 256
    assert second.pts == 1003 * 3000  # pts at the input's rate: the skipped frames leave a gap
