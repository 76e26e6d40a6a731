"""The real-time rules of one stream: drops, deadlines, order, limits, stats, the ladder."""

import asyncio

import cv2
import numpy as np
import pytest

from fusion_ray.live.config import LadderConfig, LiveConfig
from fusion_ray.live.hub import LiveHub
from fusion_ray.live.protocol import unpack_frame

from .helpers import START, MemoryTransport, ScriptedBackend, ScriptedProcessor, frame_message, jpeg


def run_stream(cfg: LiveConfig, processor: ScriptedProcessor, script, *, start: str = START,
               transport: MemoryTransport | None = None, **backend_kw):
    """Serve one connection on a hub while ``script(transport)`` plays the client; returns both."""

    async def scenario():
        conn = transport or MemoryTransport()
        hub = LiveHub(cfg, ScriptedBackend(processor, **backend_kw))
        serving = asyncio.create_task(hub.serve(conn))
        conn.send(start)
        await script(conn)
        conn.disconnect()
        summary = await asyncio.wait_for(serving, 5)
        assert hub.active_streams == 0 and hub.scheduler.free == cfg.slots
        return conn, summary, hub

    return asyncio.run(scenario())


def test_ready_then_a_processed_frame_with_its_header_echoed():
    async def script(conn):
        conn.send(frame_message(5))
        await asyncio.sleep(0.2)

    conn, summary, _ = run_stream(LiveConfig(), ScriptedProcessor(), script)
    assert conn.texts[0]["type"] == "ready" and conn.texts[0]["deadline_ms"] == 300
    seq, ts, image = unpack_frame(conn.results[0])
    assert (seq, ts) == (5, 5.0)
    out = cv2.imdecode(np.frombuffer(image, np.uint8), cv2.IMREAD_COLOR)
    assert abs(int(out.mean()) - 155) <= 3  # the processed (inverted) frame, not the input
    assert summary.frames_in == 1 and summary.frames_out == 1


def test_latest_frame_wins_and_replaced_frames_are_stale():
    async def script(conn):
        for seq in range(5):
            conn.send(frame_message(seq))
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.5)

    processor = ScriptedProcessor(delay=lambda seq: 0.15)
    conn, summary, _ = run_stream(LiveConfig(), processor, script)
    assert conn.result_seqs() == [0, 4]
    assert conn.dropped("stale") == [1, 2, 3]
    assert [p.seq for p in processor.plans] == [0, 4]  # stale frames were never processed


def test_a_late_frame_is_dropped_never_sent():
    async def script(conn):
        conn.send(frame_message(0))
        await asyncio.sleep(0.4)
        conn.send(frame_message(1))
        await asyncio.sleep(0.3)

    processor = ScriptedProcessor(delay=lambda seq: 0.2 if seq == 0 else 0.0)
    conn, _, _ = run_stream(LiveConfig(deadline_ms=100), processor, script)
    assert conn.dropped("deadline") == [0]
    assert conn.result_seqs() == [1]


def test_a_failed_frame_is_dropped_not_sent_unprocessed():
    async def script(conn):
        conn.send(frame_message(0))
        await asyncio.sleep(0.1)
        conn.send(frame_message(1))
        await asyncio.sleep(0.1)

    conn, _, _ = run_stream(LiveConfig(), ScriptedProcessor(fail={0}), script)
    assert conn.dropped("bad_frame") == [0]  # the chain could not process it: the frame's doing
    assert conn.result_seqs() == [1]


class Refused(Exception):
    status = 503


def test_a_frame_the_host_refuses_for_load_is_overload():
    async def script(conn):
        conn.send(frame_message(0))
        await asyncio.sleep(0.1)

    conn, _, _ = run_stream(LiveConfig(), ScriptedProcessor(fail={0}, failure=Refused), script)
    assert conn.dropped("overload") == [0]


def test_frames_that_break_the_chain_do_not_move_the_ladder():
    """Before, every failure was ``overload``: twenty bad frames took the ladder from level 0 to 5,
    where it stayed for the good frames after them."""
    fast = LadderConfig(degrade_after_s=0.1, recover_after_s=5.0)
    cfg = LiveConfig(stats_interval_s=0.05, ladder=fast)

    async def script(conn):
        for seq in range(20):
            conn.send(frame_message(seq))
            await asyncio.sleep(0.03)
        for seq in range(20, 30):
            conn.send(frame_message(seq))
            await asyncio.sleep(0.03)

    conn, _, _ = run_stream(cfg, ScriptedProcessor(fail=set(range(20))), script)
    assert conn.dropped("bad_frame") == list(range(20))
    assert {t["level"] for t in conn.texts if t["type"] == "stats"} == {0}
    assert conn.result_seqs() == list(range(20, 30))


def test_results_only_ever_increase():
    async def script(conn):
        conn.send(frame_message(0))
        await asyncio.sleep(0.02)
        conn.send(frame_message(1))
        await asyncio.sleep(0.4)

    processor = ScriptedProcessor(delay=lambda seq: 0.2 if seq == 0 else 0.01)
    conn, _, _ = run_stream(LiveConfig(stream_inflight=2), processor, script)
    assert conn.result_seqs() == [1]
    assert conn.dropped("stale") == [0]


def test_bad_and_oversized_frames_are_dropped_and_the_stream_goes_on():
    big = jpeg(200, 100)

    async def script(conn):
        conn.send(b"\x00\x01")                       # shorter than the header
        conn.send(frame_message(1, b"not an image"))
        conn.send(frame_message(2, b"\xff\xd8\xff\xe0" + b"\x00" * 40))  # JPEG magic, broken header
        conn.send(frame_message(3, big))             # 20000 pixels > 10000
        conn.send(frame_message(4, b"\xff" * 5000))  # over the byte limit
        await asyncio.sleep(0.05)
        conn.send(frame_message(5))
        await asyncio.sleep(0.2)

    conn, summary, _ = run_stream(LiveConfig(max_frame_pixels=10_000, max_frame_bytes=4096), ScriptedProcessor(),
                                  script)
    assert conn.dropped("bad_frame") == [-1, 1, 2]
    assert conn.dropped("too_large") == [3, 4]
    assert conn.result_seqs() == [5]
    assert summary.frames_in == 6


def test_frames_above_the_rate_limit_are_overload():
    async def script(conn):
        for seq in range(10):
            conn.send(frame_message(seq))
        await asyncio.sleep(0.3)

    conn, _, _ = run_stream(LiveConfig(max_fps=1.0, burst_frames=2), ScriptedProcessor(delay=lambda s: 0.01), script)
    assert conn.dropped("overload") == list(range(2, 10))


def test_a_slow_client_never_blocks_the_stream():
    async def script(conn):
        for seq in range(30):
            conn.send(frame_message(seq))
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.6)

    cfg = LiveConfig(send_queue=1, deadline_ms=200)
    conn, summary, _ = run_stream(cfg, ScriptedProcessor(), script, transport=MemoryTransport(send_delay_s=0.25))
    assert summary.frames_in == 30  # every frame was received while the socket was stuck
    lost = conn.dropped("overload") + conn.dropped("deadline") + conn.dropped("stale")
    assert len(conn.results) <= 4 and len(lost) >= 20


def test_idle_timeout_ends_the_stream_with_an_error_event():
    async def script(conn):
        conn.send(frame_message(0))
        await asyncio.sleep(0.5)

    cfg = LiveConfig(idle_timeout_s=0.15, stats_interval_s=0.05)
    conn, summary, _ = run_stream(cfg, ScriptedProcessor(), script)
    assert summary.reason == "idle_timeout"
    assert conn.events("error")[-1]["code"] == "idle_timeout" and conn.closed == (1000, "idle_timeout")


def test_stats_events_count_frames():
    async def script(conn):
        for seq in range(3):
            conn.send(frame_message(seq))
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.15)

    conn, _, _ = run_stream(LiveConfig(stats_interval_s=0.05), ScriptedProcessor(), script)
    last = conn.events("stats")[-1]
    assert (last["frames_in"], last["frames_out"], last["level"]) == (3, 3, 0)
    assert last["latency_ms"]["p50"] is not None and sum(last["dropped"].values()) == 0


def test_stop_message_closes_normally():
    async def script(conn):
        conn.send('{"type": "stop"}')
        await asyncio.sleep(0.1)

    conn, summary, _ = run_stream(LiveConfig(), ScriptedProcessor(), script)
    assert summary.reason == "client_stop" and conn.closed == (1000, "client_stop")


def test_the_ladder_degrades_a_stream_that_cannot_keep_up():
    async def script(conn):
        for seq in range(60):
            conn.send(frame_message(seq))
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.2)

    ladder = LadderConfig(degrade_after_s=0.05, recover_after_s=10.0, detect_every=3)
    cfg = LiveConfig(stats_interval_s=0.05, ladder=ladder)
    processor = ScriptedProcessor(delay=lambda seq: 0.04)  # 25 fps against 100 fps: many stale drops
    conn, _, _ = run_stream(cfg, processor, script, start='{"source_id": "src", "enhance": true}')
    levels = [s["level"] for s in conn.events("stats")]
    assert levels == sorted(levels) and levels[-1] >= 4
    assert 1 not in levels  # no model masks or pixel boost in the processor's config: level 1 is skipped
    assert processor.plans[0].enhance is True and processor.plans[-1].enhance is False
    level3 = [p for p in processor.plans if p.level >= 3]
    assert any(p.landmarks is not None for p in level3) and any(p.landmarks is None for p in level3)
    assert any(p.detector_size == ladder.small_detector_size for p in processor.plans if p.level >= 4)


def test_the_ladder_drops_model_masks_and_pixel_boost_before_the_enhancer():
    """Level 1 (masks_off, named in the stats events): the stream's frames are planned without its
    model masks and pixel boost while the enhancer still runs; level 2 then turns the enhancer off.
    The start message asks for neither: the host's config has them (a service default of occlusion
    masks, a pixel boost on the command line), and the stream does not skip level 1."""
    async def script(conn):
        for seq in range(40):
            conn.send(frame_message(seq))
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.2)

    ladder = LadderConfig(allowed_levels=(0, 1, 2), degrade_after_s=0.05, recover_after_s=10.0)
    cfg = LiveConfig(stats_interval_s=0.05, ladder=ladder)
    processor = ScriptedProcessor(delay=lambda seq: 0.04, costly=True)
    conn, _, _ = run_stream(cfg, processor, script, start='{"source_id": "src", "enhance": true}')
    names = [(s["level"], s["level_name"]) for s in conn.events("stats")]
    assert (1, "masks_off") in names and names[-1] == (2, "enhancer_off")
    assert processor.plans[0].costly is True and processor.plans[0].enhance is True
    level1 = [p for p in processor.plans if p.level == 1]
    assert level1 and all(not p.costly and p.enhance for p in level1)
    assert all(not p.costly and not p.enhance for p in processor.plans if p.level == 2)


@pytest.mark.parametrize(("start", "close_code", "code"), [
    ("nope", 1003, "malformed_start"),
    ("[" * 100_000 + "]" * 100_000, 1003, "malformed_start"),  # a RecursionError in json.loads once
    ('{"source_id": "src", "quality": 500}', 1003, "malformed_start"),
    ('{"source_id": "src", "token": "t", "deadline_ms": 10000}', 1003, "malformed_start"),
    ('{"source_id": "src"}', 1008, "unauthorized"),
    ('{"source_id": "src", "token": "wrong"}', 1008, "unauthorized"),
    ('{"source_id": "other", "token": "t"}', 1008, "unknown_source"),
])
def test_refusals(start, close_code, code):
    async def script(conn):
        await asyncio.sleep(0.05)

    conn, summary, hub = run_stream(LiveConfig(), ScriptedProcessor(), script, start=start, token="t")
    assert conn.texts == [conn.texts[0]] and conn.texts[0]["type"] == "error" and conn.texts[0]["code"] == code
    assert conn.closed is not None and conn.closed[0] == close_code and hub.refusals == {code: 1}


def test_a_stream_without_the_enhancer_skips_level_1():
    async def script(conn):
        for seq in range(40):
            conn.send(frame_message(seq))
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.1)

    cfg = LiveConfig(stats_interval_s=0.05, ladder=LadderConfig(degrade_after_s=0.05, recover_after_s=10.0))
    conn, _, _ = run_stream(cfg, ScriptedProcessor(delay=lambda seq: 0.04), script)
    levels = [s["level"] for s in conn.events("stats")]
    assert 1 not in levels and max(levels) >= 2


def test_the_session_length_limit_ends_the_stream_with_an_error_event():
    async def script(conn):
        for seq in range(10):
            conn.send(frame_message(seq))
            await asyncio.sleep(0.05)

    cfg = LiveConfig(max_session_s=0.2, stats_interval_s=0.05)
    conn, summary, _ = run_stream(cfg, ScriptedProcessor(), script)
    assert summary.reason == "session_limit"
    assert conn.events("error")[-1]["code"] == "session_limit" and conn.closed[1] == "session_limit"
    assert 1 <= summary.frames_out < 10  # frames flowed until the limit, none after it


class _Cancellable(ScriptedProcessor):
    """Records whether a frame's processing was cancelled (the client left mid-frame)."""

    def __init__(self) -> None:
        super().__init__(delay=lambda seq: 3.0)
        self.cancelled: list[int] = []

    async def process(self, frame, plan):
        try:
            return await super().process(frame, plan)
        except asyncio.CancelledError:
            self.cancelled.append(plan.seq)
            raise


def test_a_client_leaving_mid_frame_frees_its_slot_and_cancels_the_frame():
    async def script(conn):
        conn.send(frame_message(0))
        await asyncio.sleep(0.2)  # frame 0 is being processed (it takes 3 s) when the client leaves

    processor = _Cancellable()
    conn, summary, _ = run_stream(LiveConfig(), processor, script)  # asserts no stream and every slot free
    assert [p.seq for p in processor.plans] == [0] and processor.cancelled == [0]
    assert conn.results == [] and summary.frames_out == 0


def test_old_or_repeated_sequence_numbers_are_stale_before_any_work():
    """5, 3, 3, 6: the 3s are dropped as stale on arrival (never decoded or processed, never
    overload), and they do not count against the stream's health: the ladder stays at level 0."""
    async def script(conn):
        for seq in (5, 3, 3):
            conn.send(frame_message(seq))
        await asyncio.sleep(0.1)
        for _ in range(40):  # a client replaying an old frame over and over
            conn.send(frame_message(3))
            await asyncio.sleep(0.005)
        conn.send(frame_message(6))
        await asyncio.sleep(0.3)

    ladder = LadderConfig(degrade_after_s=0.05, degrade_drop_rate=0.1)
    processor = ScriptedProcessor()
    conn, summary, hub = run_stream(LiveConfig(stats_interval_s=0.05, ladder=ladder, max_fps=1000), processor, script)
    assert [p.seq for p in processor.plans] == [5, 6] and conn.result_seqs() == [5, 6]
    assert conn.dropped("stale") == [3] * 42
    assert conn.dropped("overload") == [] and hub.outcomes["overload"] == 0
    assert {s["level"] for s in conn.events("stats")} == {0}
    assert summary.frames_in == 44 and summary.dropped["stale"] == 42


def test_a_deeply_nested_text_message_mid_stream_is_ignored():
    async def script(conn):
        conn.send("[" * 100_000)
        conn.send(frame_message(1))
        await asyncio.sleep(0.2)

    conn, summary, _ = run_stream(LiveConfig(), ScriptedProcessor(), script)
    assert conn.result_seqs() == [1] and summary.reason == "disconnected"


def test_a_frame_that_queued_on_the_way_in_loses_that_time_from_its_deadline():
    """After a second of frames on time, the client stamped frame 20 300 ms before it arrived (its
    own clock): with a 250 ms deadline it is late on arrival, dropped and never processed; the
    frame after it is on time."""
    import time as clock

    from fusion_ray.live.protocol import pack_frame

    from .helpers import jpeg

    async def script(conn):
        base = clock.monotonic()
        stamp = lambda: (clock.monotonic() - base) * 1000.0 + 5e6  # noqa: E731 - any clock: only differences count
        for seq in range(20):
            conn.send(pack_frame(seq, stamp(), jpeg()))
            await asyncio.sleep(0.06)
        late = stamp()
        await asyncio.sleep(0.3)
        conn.send(pack_frame(20, late, jpeg()))  # queued 300 ms somewhere on the way
        await asyncio.sleep(0.05)
        conn.send(pack_frame(21, stamp(), jpeg()))
        await asyncio.sleep(0.3)

    processor = ScriptedProcessor()
    conn, _, _ = run_stream(LiveConfig(deadline_ms=250), processor, script)
    assert conn.dropped("deadline") == [20]
    assert 20 not in [p.seq for p in processor.plans] and 21 in conn.result_seqs()
