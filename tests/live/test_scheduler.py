"""Fair slot sharing across streams, with a fake slow processor."""

import asyncio

from fusion_ray.live.scheduler import FairScheduler


async def _stream(scheduler: FairScheduler, name: str, workers: int, stop: asyncio.Event, done: dict) -> None:
    async def worker() -> None:
        while not stop.is_set():
            async with scheduler.slot(name):
                if stop.is_set():  # waiters still queued at the end are not counted
                    return
                await asyncio.sleep(0.005)  # the slow processor
                done[name] = done.get(name, 0) + 1

    await asyncio.gather(*(worker() for _ in range(workers)))


def test_a_greedy_stream_does_not_starve_the_others():
    async def scenario():
        scheduler = FairScheduler(slots=1)
        stop = asyncio.Event()
        done: dict[str, int] = {}
        tasks = [asyncio.create_task(_stream(scheduler, "greedy", 6, stop, done)),
                 asyncio.create_task(_stream(scheduler, "a", 1, stop, done)),
                 asyncio.create_task(_stream(scheduler, "b", 1, stop, done))]
        await asyncio.sleep(0.6)
        stop.set()
        await asyncio.gather(*tasks)
        return done, scheduler

    done, scheduler = asyncio.run(scenario())
    total = sum(done.values())
    assert total > 30
    # Round robin: each of the three streams gets about a third, however many requests it queues.
    for name in ("greedy", "a", "b"):
        assert abs(done[name] - total / 3) <= 1.5, done
    assert scheduler.free == 1 and scheduler.waiting() == 0


def test_immediate_grant_when_free_and_fifo_per_stream():
    async def scenario():
        scheduler = FairScheduler(slots=2)
        await scheduler.acquire("x")
        await scheduler.acquire("x")
        assert scheduler.free == 0
        order: list[str] = []

        async def wait(name: str, tag: str) -> None:
            await scheduler.acquire(name)
            order.append(tag)

        tasks = [asyncio.create_task(wait("x", "x1")), asyncio.create_task(wait("x", "x2")),
                 asyncio.create_task(wait("y", "y1"))]
        await asyncio.sleep(0.01)
        for _ in range(3):
            scheduler.release()
            await asyncio.sleep(0.01)
        await asyncio.gather(*tasks)
        return order

    # y was never served, so it goes first; x's waiters keep their order.
    assert asyncio.run(scenario()) == ["y1", "x1", "x2"]


def test_a_cancelled_waiter_gives_its_turn_away():
    async def scenario():
        scheduler = FairScheduler(slots=1)
        await scheduler.acquire("a")
        cancelled = asyncio.create_task(scheduler.acquire("b"))
        other = asyncio.create_task(scheduler.acquire("c"))
        await asyncio.sleep(0.01)
        cancelled.cancel()
        await asyncio.sleep(0.01)
        scheduler.release()
        await asyncio.wait_for(other, 1)
        scheduler.release()
        return scheduler

    scheduler = asyncio.run(scenario())
    assert scheduler.free == 1 and scheduler.waiting() == 0
