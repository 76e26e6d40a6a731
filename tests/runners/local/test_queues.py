"""Dynamic batching and stoppable queues between the local runner's threads."""

from __future__ import annotations

import queue
import threading

import pytest

from fusion_ray.runners.local.queues import END, Clock, Stopped, get, put, take_batch


def _filled(*items):
    q: queue.Queue = queue.Queue()
    for item in items:
        q.put(item)
    return q


def test_a_batch_takes_what_is_there_up_to_the_maximum():
    q = _filled(*range(5))
    assert take_batch(q, 3, 0.0, threading.Event())[:2] == ([0, 1, 2], False)
    assert take_batch(q, 3, 0.0, threading.Event())[:2] == ([3, 4], False)


def test_a_batch_waits_the_window_for_more_after_the_first():
    q = _filled(0)
    threading.Timer(0.05, q.put, args=(1,)).start()
    assert take_batch(q, 4, 2.0, threading.Event())[0] == [0, 1]  # the late frame joined the batch


def test_the_end_marker_ends_the_batch_and_the_input():
    assert take_batch(_filled(0, 1, END, 2), 8, 0.0, threading.Event())[:2] == ([0, 1], True)
    assert take_batch(_filled(END), 8, 0.0, threading.Event())[:2] == ([], True)


def test_a_stop_ends_a_blocked_get_or_put():
    stop = threading.Event()
    threading.Timer(0.05, stop.set).start()
    with pytest.raises(Stopped):
        get(queue.Queue(), stop)
    full: queue.Queue = queue.Queue(maxsize=1)
    full.put(0)
    with pytest.raises(Stopped):
        put(full, 1, stop)


def test_clocks_add_from_threads():
    clock = Clock()
    threads = [threading.Thread(target=lambda: [clock.add(0.001, 0.002) for _ in range(1000)]) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert clock.busy_s == pytest.approx(4.0) and clock.idle_s == pytest.approx(8.0)
