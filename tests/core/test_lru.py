"""LockedLru: the least recently used key goes first, and concurrent gets never fail."""

from __future__ import annotations

import sys
import threading

import pytest

from fusion_ray.core.lru import LockedLru


def test_the_least_recently_used_key_is_dropped_first() -> None:
    made: list[str] = []
    cache: LockedLru[str, str] = LockedLru(2, lambda k: made.append(k) or k.upper())
    assert cache.get("a") == "A" and cache.get("b") == "B"
    assert cache.get("a") == "A"  # kept (not made again), and now the most recent
    assert cache.get("c") == "C"  # drops b, the least recently used
    assert cache.keys() == ["a", "c"] and made == ["a", "b", "c"]
    cache.get("b")
    assert cache.keys() == ["c", "b"] and made == ["a", "b", "c", "b"] and len(cache) == 2


def test_a_key_in_use_survives_churn() -> None:
    cache: LockedLru[int, int] = LockedLru(3, lambda k: k)
    for k in range(1, 50):
        cache.get(0)  # the common key (a service's no-options setup) is used between the others
        cache.get(k)
    assert 0 in cache and 1 not in cache


def test_a_failed_make_keeps_nothing() -> None:
    def make(key: str) -> str:
        raise ValueError(key)

    cache: LockedLru[str, str] = LockedLru(2, make)
    with pytest.raises(ValueError, match="bad"):
        cache.get("bad")
    assert len(cache) == 0


def test_concurrent_gets_with_a_tiny_bound_never_fail() -> None:
    cache: LockedLru[int, int] = LockedLru(2, lambda k: k * 10)
    errors: list[BaseException] = []
    wrong: list[tuple[int, int]] = []
    start = threading.Barrier(8)

    def work(offset: int) -> None:
        start.wait()
        try:
            for i in range(5000):
                key = (i + offset) % 7
                value = cache.get(key)
                if value != key * 10:
                    wrong.append((key, value))
        except BaseException as exc:  # noqa: BLE001 - any failure in a thread fails the test
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads often: an unlocked cache fails here (two trims pop one key)
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(interval)
    assert errors == [] and wrong == [] and len(cache) <= 2


def test_the_bound_is_at_least_one() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        LockedLru(0, lambda k: k)
