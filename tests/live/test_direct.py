"""The stream policy in this process, over the in-memory connection (``fusion-ray live`` without --url):
the same hub and stream as the served endpoint, so the same drop, order and refusal rules."""

import asyncio

import numpy as np
import pytest

from fusion_ray.live.client import LiveClientError
from fusion_ray.live.config import LiveConfig
from fusion_ray.live.direct import DirectConnection, run_direct
from fusion_ray.live.frame_sources import JpegClip, encode_frame
from fusion_ray.live.hub import LiveHub
from fusion_ray.live.transport import TransportClosed
from tests.live.helpers import ScriptedBackend, ScriptedProcessor, jpeg


def _hub(processor: ScriptedProcessor, **cfg) -> LiveHub:
    return LiveHub(LiveConfig(stats_interval_s=0.05, **cfg), ScriptedBackend(processor))


def test_every_frame_is_delivered_or_dropped_in_order_and_the_stream_closes_normally():
    results: dict[int, bytes] = {}
    processor = ScriptedProcessor(delay=lambda seq: 0.05)  # slower than the 50 fps sent: frames go stale
    report = asyncio.run(run_direct(_hub(processor, deadline_ms=1000), {"source_id": "src"},
                                    JpegClip([jpeg(value=v) for v in range(20)], fps=50, loop=False),
                                    on_result=lambda seq, image: results.__setitem__(seq, image)))
    assert report.ready["type"] == "ready" and report.sent == 20
    assert 3 <= report.received < 20 and report.dropped["stale"] > 0  # latest frame wins
    assert report.received + sum(report.dropped.values()) == report.sent
    assert report.received_seqs == sorted(set(report.received_seqs)) == sorted(results)
    assert report.close_code == 1000 and report.latency(50) is not None


class _Seeing(ScriptedProcessor):
    """Records the decoded frames it is given."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[np.ndarray] = []

    async def process(self, frame, plan):
        self.seen.append(frame.copy())
        return await super().process(frame, plan)


def test_bmp_frames_reach_the_processor_exactly():
    frame = np.random.default_rng(1).integers(0, 255, (48, 64, 3), np.uint8)
    processor = _Seeing()
    report = asyncio.run(run_direct(_hub(processor), {"source_id": "src"},
                                    JpegClip([encode_frame(frame, fmt="bmp")], fps=10, loop=False)))
    assert report.received == 1 and len(processor.seen) == 1
    assert np.array_equal(processor.seen[0], frame)  # lossless in: no JPEG between the camera and the swap


def test_a_refused_start_is_a_client_error():
    with pytest.raises(LiveClientError) as caught:
        asyncio.run(run_direct(_hub(ScriptedProcessor()), {"source_id": "nope"}, JpegClip([jpeg()], fps=5)))
    assert (caught.value.close_code, caught.value.code) == (1008, "unknown_source")


def test_the_connection_ends_both_ways_once_closed():
    async def scenario() -> tuple[list, int | None]:
        conn = DirectConnection(client_queue=1)
        await conn.server.send_text("a")
        conn.finish(1000)  # the queue is full: the end marker waits behind the unread message
        got = [message async for message in conn]
        with pytest.raises(TransportClosed):
            await conn.server.receive()
        with pytest.raises(TransportClosed):
            await conn.send("late")
        return got, conn.close_code

    got, code = asyncio.run(scenario())
    assert got == ["a"] and code == 1000
