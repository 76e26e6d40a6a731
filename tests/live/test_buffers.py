"""Latest-frame-wins queue and the bounded send queue."""

import asyncio

import pytest

from fusion_ray.live.buffers import LatestQueue, Outbox, OutResult


def test_latest_queue_replaces_the_oldest():
    queue: LatestQueue[int] = LatestQueue(1)
    assert queue.put(1) == []
    assert queue.put(2) == [1]
    assert queue.put(3) == [2]
    assert len(queue) == 1 and queue.pop() == 3 and queue.pop() is None


def test_deeper_queue_keeps_the_newest_in_order():
    queue: LatestQueue[int] = LatestQueue(2)
    replaced = [r for i in range(5) for r in queue.put(i)]
    assert replaced == [0, 1, 2]
    assert [queue.pop(), queue.pop(), queue.pop()] == [3, 4, None]
    with pytest.raises(ValueError):
        LatestQueue(0)


def test_wait_wakes_on_put():
    async def scenario():
        queue: LatestQueue[str] = LatestQueue(1)
        waiter = asyncio.create_task(queue.wait())
        await asyncio.sleep(0.01)
        assert not waiter.done()
        queue.put("frame")
        await asyncio.wait_for(waiter, 1)
        return queue.pop()

    assert asyncio.run(scenario()) == "frame"


def test_outbox_sends_events_first_refuses_results_beyond_its_bound():
    async def scenario():
        box = Outbox(max_results=2, max_events=3)
        results = [OutResult(i, b"x", 0.0, 1.0) for i in range(3)]
        assert [box.put_result(r) for r in results] == [True, True, False]
        for i in range(5):
            box.put_event(f"e{i}")
        assert box.events_lost == 2
        got = [await box.get() for _ in range(5)]
        return got

    got = asyncio.run(scenario())
    assert got[:3] == ["e2", "e3", "e4"]
    assert [r.seq for r in got[3:]] == [0, 1]
