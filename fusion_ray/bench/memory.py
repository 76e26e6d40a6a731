"""Peak memory of this process and every process it started (Ray's workers included).

A background thread sums the resident set size (RSS) of this process and all its descendants
every ``interval_s`` and keeps the maximum. A local Ray instance started by this process
(``ray.init``) runs its GCS, raylet and workers as descendants, so they are counted. Workers
of a Ray instance started elsewhere are counted too when ``include_ray_processes`` is set: every
process of this user whose name starts with ``ray::`` or is a Ray daemon. RSS counts shared
pages (the object store in /dev/shm, shared libraries) once per process that maps them, so the
sum overstates the memory really used; it is a consistent upper bound, which is what a
"does memory grow with video length" check needs.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from typing import Any

import psutil

_RAY_DAEMONS = ("raylet", "gcs_server", "plasma_store", "dashboard", "log_monitor", "runtime_env_agent")


@dataclass(frozen=True)
class MemoryPeak:
    """The largest summed RSS seen, in MiB, with the process count at that moment."""

    peak_rss_mib: float
    processes_at_peak: int
    samples: int
    interval_s: float
    baseline_rss_mib: float

    def to_json(self) -> dict[str, Any]:
        return {"peak_rss_mib": round(self.peak_rss_mib, 1), "processes_at_peak": self.processes_at_peak,
                "samples": self.samples, "interval_s": self.interval_s,
                "baseline_rss_mib": round(self.baseline_rss_mib, 1),
                "what": "sum of RSS of this process and its descendants (Ray workers included); "
                        "shared pages counted once per process"}


def _is_ray_process(proc: psutil.Process) -> bool:
    try:
        name = proc.name()
    except (psutil.Error, OSError):
        return False
    return name.startswith("ray::") or any(name.startswith(d) for d in _RAY_DAEMONS)


def tree_rss(root: psutil.Process | None = None, *, include_ray_processes: bool = False) -> tuple[int, int]:
    """(summed RSS in bytes, number of processes) of ``root`` (this process) and its descendants."""
    root = root or psutil.Process(os.getpid())
    procs: dict[int, psutil.Process] = {root.pid: root}
    try:
        for child in root.children(recursive=True):
            procs[child.pid] = child
    except psutil.Error:
        pass
    if include_ray_processes:
        user = root.username()
        for proc in psutil.process_iter():
            if proc.pid not in procs and _is_ray_process(proc):
                try:
                    if proc.username() == user:
                        procs[proc.pid] = proc
                except psutil.Error:
                    continue
    total = count = 0
    for proc in procs.values():
        try:
            total += proc.memory_info().rss
            count += 1
        except psutil.Error:  # exited between listing and reading
            continue
    return total, count


class PeakMemorySampler:
    """Context manager: samples :func:`tree_rss` in a daemon thread; ``result`` after exit."""

    def __init__(self, interval_s: float = 0.25, *, include_ray_processes: bool = False) -> None:
        if interval_s <= 0:
            raise ValueError(f"interval_s must be positive, got {interval_s}")
        self.interval_s = interval_s
        self.include_ray_processes = include_ray_processes
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._peak = 0
        self._peak_count = 0
        self._samples = 0
        self._baseline = 0
        self.result: MemoryPeak | None = None

    def _sample(self) -> None:
        rss, count = tree_rss(include_ray_processes=self.include_ray_processes)
        self._samples += 1
        if rss > self._peak:
            self._peak, self._peak_count = rss, count

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._sample()

    def __enter__(self) -> PeakMemorySampler:
        self._baseline, _ = tree_rss(include_ray_processes=self.include_ray_processes)
        self._sample()
        self._thread = threading.Thread(target=self._loop, name="fusion-ray-memory", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._sample()
        self.result = MemoryPeak(self._peak / 2**20, self._peak_count, self._samples, self.interval_s,
                                 self._baseline / 2**20)
