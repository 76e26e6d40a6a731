"""The adaptive batch wait: the window is skipped only when arrivals are sparse."""

from __future__ import annotations


def test_adaptive_wait_skips_the_window_only_when_arrivals_are_sparse():
    from fusion_ray.serve.batching import AdaptiveWait

    wait = AdaptiveWait(0.015)
    assert wait.arrival(0.0) == 0.015  # no history: assume load
    now = 0.0
    for _ in range(5):  # one client, a request every 100 ms: nobody to wait for
        now += 0.1
        last = wait.arrival(now)
    assert last == 0.0
    for _ in range(10):  # a burst, 2 ms apart: wait for the batch to fill
        now += 0.002
        last = wait.arrival(now)
    assert last == 0.015
    off = AdaptiveWait(0.015, enabled=False)
    assert [off.arrival(t) for t in (0.0, 1.0, 2.0)] == [0.015] * 3
