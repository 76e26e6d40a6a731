"""The hub over several streams: admission (max_streams, 1013), one slot shared fairly, and the
streams it ends from outside: a deleted or revoked source, a shut-down hub, a draining service."""

import asyncio

from fusion_ray.live.backend import SourceStatus
from fusion_ray.live.config import LiveConfig
from fusion_ray.live.hub import LiveHub

from .helpers import START, MemoryTransport, ScriptedBackend, ScriptedProcessor, frame_message


def test_too_many_streams_is_1013_and_a_freed_slot_admits_again():
    async def scenario():
        hub = LiveHub(LiveConfig(max_streams=1), ScriptedBackend(ScriptedProcessor()))
        first, second, third = MemoryTransport(), MemoryTransport(), MemoryTransport()
        serving = asyncio.create_task(hub.serve(first))
        first.send(START)
        await asyncio.sleep(0.05)
        second.send(START)
        await asyncio.wait_for(hub.serve(second), 2)
        first.disconnect()
        await asyncio.wait_for(serving, 2)
        third.send(START)
        third_serving = asyncio.create_task(hub.serve(third))
        await asyncio.sleep(0.05)
        third.disconnect()
        await asyncio.wait_for(third_serving, 2)
        return second, third

    second, third = asyncio.run(scenario())
    assert second.closed == (1013, "too_many_streams") and second.texts[0]["code"] == "too_many_streams"
    assert third.texts[0]["type"] == "ready"


def test_two_streams_share_one_slot_fairly():
    async def scenario():
        cfg = LiveConfig(slots=1)
        hub = LiveHub(cfg, ScriptedBackend(ScriptedProcessor(delay=lambda s: 0.02)))
        conns = [MemoryTransport(), MemoryTransport()]
        tasks = [asyncio.create_task(hub.serve(c)) for c in conns]
        for c in conns:
            c.send(START)
        for seq in range(40):
            for c in conns:
                c.send(frame_message(seq))
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.1)
        for c in conns:
            c.disconnect()
        await asyncio.gather(*tasks)
        return conns

    a, b = asyncio.run(scenario())
    assert len(a.results) >= 8 and len(b.results) >= 8
    assert abs(len(a.results) - len(b.results)) <= 2


def _serve_then(cfg: LiveConfig, act, *, backend: ScriptedBackend | None = None):
    """Open one stream, send a frame, run ``act(hub, backend)``; (transport, summary, seconds to close)."""
    async def scenario():
        conn = MemoryTransport()
        used = backend or ScriptedBackend(ScriptedProcessor())
        hub = LiveHub(cfg, used)
        serving = asyncio.create_task(hub.serve(conn))
        conn.send(START)
        conn.send(frame_message(1))
        await asyncio.sleep(0.1)
        loop = asyncio.get_running_loop()
        began = loop.time()
        act(hub, used)
        summary = await asyncio.wait_for(serving, 5)
        return conn, summary, loop.time() - began, hub

    return asyncio.run(scenario())


def test_a_deleted_source_ends_its_streams_within_a_second():
    def delete(hub, backend):
        backend.status = SourceStatus(deleted=frozenset({"src"}))

    conn, summary, took, _ = _serve_then(LiveConfig(source_check_s=0.5), delete)
    assert conn.result_seqs() == [1]
    assert conn.texts[-1]["type"] == "error" and conn.texts[-1]["code"] == "source_deleted"
    assert conn.closed == (1008, "source_deleted") and summary.reason == "source_deleted"
    assert took < 1.0


def test_revoking_a_source_ends_only_the_streams_using_it():
    conn, _, took, _ = _serve_then(LiveConfig(), lambda hub, _: hub.revoke_source("src"))
    assert conn.closed == (1008, "source_deleted") and took < 0.5
    _, summary, _, hub = _serve_then(LiveConfig(idle_timeout_s=0.3, stats_interval_s=0.1),
                                     lambda hub, _: hub.revoke_source("another"))
    assert summary.reason == "idle_timeout"


def test_shutting_down_ends_every_stream_with_1001_and_refuses_new_ones():
    async def late_client(hub):
        conn = MemoryTransport()
        conn.send(START)
        await hub.serve(conn)
        return conn

    conn, summary, took, hub = _serve_then(LiveConfig(), lambda hub, _: hub.shut_down())
    assert conn.texts[-1]["code"] == "shutting_down" and conn.closed == (1001, "shutting_down")
    assert took < 0.5
    late = asyncio.run(late_client(hub))
    assert late.closed == (1001, "shutting_down") and late.texts[0]["code"] == "shutting_down"


def test_a_draining_service_ends_the_streams_at_the_next_check():
    backend = ScriptedBackend(ScriptedProcessor())

    def drain(hub, used):
        used.status = SourceStatus(draining=True)

    conn, _, took, _ = _serve_then(LiveConfig(source_check_s=0.2), drain, backend=backend)
    assert conn.closed == (1001, "shutting_down") and took < 1.0 and backend.status_calls >= 1



def test_streams_per_token_are_capped_and_released():
    """live.max_streams_per_token: a token over its cap is refused (too_many_streams), another token
    is not; a stream that ends gives its token's place back."""
    import pytest

    from fusion_ray.live.backend import StreamRefused
    from fusion_ray.live.protocol import StartMessage

    async def scenario():
        hub = LiveHub(LiveConfig(max_streams=4, max_streams_per_token=1), ScriptedBackend(ScriptedProcessor()))
        first = await hub.admit(StartMessage(source_id="src", token="alice"))
        with pytest.raises(StreamRefused) as refused:
            await hub.admit(StartMessage(source_id="src", token="alice"))
        other = await hub.admit(StartMessage(source_id="src", token="bob"))
        hub.release(first)
        again = await hub.admit(StartMessage(source_id="src", token="alice"))
        return refused.value.code, hub.refusals, hub.active_streams, other, again

    code, refusals, active, _, _ = asyncio.run(scenario())
    assert code == "too_many_streams" and refusals == {"too_many_streams": 1} and active == 2
