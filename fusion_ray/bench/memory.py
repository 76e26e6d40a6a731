"""Peak memory of this process and every process it started (Ray's workers included).

A background thread samples this process and all its descendants every ``interval_s`` and
keeps the peaks of:

- **RSS sum**: resident set sizes. Shared pages (Ray's object store in /dev/shm, shared
  libraries) are counted once per process that maps them, so the sum overstates the memory
  really used. Cheap (about 0.1 ms per process).
- **System memory added**: the machine's memory in use (total - available, which counts
  /dev/shm once) minus its value when sampling started. Cheap, counts shared pages once, but
  also counts anything else that allocates meanwhile: run on a quiet machine.
- **PSS sum** (opt-in, Linux): proportional set sizes, each shared page split between the
  processes that map it: the memory the tree really occupies. Reading it walks every page
  table (about 12 ms for a 300 MB process, ~0.2 s per sample for a Ray job's 16 processes:
  a fifth of a core at 0.5 s), so it perturbs throughput; enable it for memory checks only.

A local Ray instance started by this process (``ray.init``) runs its GCS, raylet and workers as
descendants, so they are counted. Workers of a Ray instance started elsewhere are counted too
when ``include_ray_processes`` is set: every process of this user whose name starts with
``ray::`` or is a Ray daemon. The largest processes at the PSS peak are kept, so that growth
can be traced to a process.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from typing import Any

import psutil

_RAY_DAEMONS = ("raylet", "gcs_server", "plasma_store", "dashboard", "log_monitor", "runtime_env_agent")
_TOP = 8


@dataclass(frozen=True)
class MemoryPeak:
    """Peak summed memory of the process tree, in MiB."""

    peak_rss_mib: float
    peak_pss_mib: float | None
    """None unless PSS sampling was enabled (and available)."""
    system_added_peak_mib: float
    """Peak of (total - available) minus its value at the start."""
    processes_at_peak: int
    samples: int
    interval_s: float
    baseline_rss_mib: float
    driver_peak_rss_mib: float
    """This process alone (the driver): the part that must not hold a whole video."""
    top_at_peak: list[tuple[str, float]] = field(default_factory=list)
    """(process name, MiB) of the largest processes at the peak (PSS when sampled, else RSS)."""

    def to_json(self) -> dict[str, Any]:
        return {"peak_rss_mib": round(self.peak_rss_mib, 1),
                "peak_pss_mib": round(self.peak_pss_mib, 1) if self.peak_pss_mib is not None else None,
                "system_added_peak_mib": round(self.system_added_peak_mib, 1),
                "driver_peak_rss_mib": round(self.driver_peak_rss_mib, 1),
                "processes_at_peak": self.processes_at_peak, "samples": self.samples,
                "interval_s": self.interval_s, "baseline_rss_mib": round(self.baseline_rss_mib, 1),
                "top_at_peak": [[name, round(mib, 1)] for name, mib in self.top_at_peak],
                "what": "RSS/PSS: sums over this process and its descendants (Ray workers included); RSS "
                        "counts shared pages once per process, PSS splits them (Linux, opt-in); system added: "
                        "peak of total - available minus its value at the start"}


def _system_used() -> int:
    memory = psutil.virtual_memory()
    return int(memory.total - memory.available)


def _is_ray_process(proc: psutil.Process) -> bool:
    try:
        name = proc.name()
    except (psutil.Error, OSError):
        return False
    return name.startswith("ray::") or any(name.startswith(d) for d in _RAY_DAEMONS)


def _processes(root: psutil.Process, include_ray_processes: bool) -> list[psutil.Process]:
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
    return list(procs.values())


@dataclass
class TreeSample:
    rss: int
    pss: int | None
    count: int
    driver_rss: int
    by_process: list[tuple[str, int]]


def sample_tree(root: psutil.Process | None = None, *, include_ray_processes: bool = False,
                pss: bool = False) -> TreeSample:
    """Summed RSS (and PSS) of ``root`` (default: this process) and its descendants."""
    root = root or psutil.Process(os.getpid())
    total_rss = total_pss = count = driver = 0
    pss_ok = pss
    by_process: list[tuple[str, int]] = []
    for proc in _processes(root, include_ray_processes):
        share: int | None = None
        try:
            if pss_ok:
                try:
                    info = proc.memory_full_info()
                    rss, share = info.rss, getattr(info, "pss", None)
                except psutil.AccessDenied:
                    share = None
                    rss = proc.memory_info().rss
                if share is None:
                    pss_ok = False
                else:
                    total_pss += share
            else:
                rss = proc.memory_info().rss
            name = proc.name()
        except psutil.Error:  # exited between listing and reading
            continue
        total_rss += rss
        count += 1
        if proc.pid == root.pid:
            driver = rss
        by_process.append((name, share if pss_ok and share is not None else rss))
    return TreeSample(total_rss, total_pss if pss_ok else None, count, driver, by_process)


def tree_rss(root: psutil.Process | None = None, *, include_ray_processes: bool = False) -> tuple[int, int]:
    """(summed RSS in bytes, number of processes) of ``root`` (this process) and its descendants."""
    sample = sample_tree(root, include_ray_processes=include_ray_processes, pss=False)
    return sample.rss, sample.count


class PeakMemorySampler:
    """Context manager: samples :func:`sample_tree` in a daemon thread; ``result`` after exit."""

    def __init__(self, interval_s: float = 0.5, *, include_ray_processes: bool = False, pss: bool = False) -> None:
        if interval_s <= 0:
            raise ValueError(f"interval_s must be positive, got {interval_s}")
        self.interval_s = interval_s
        self.include_ray_processes = include_ray_processes
        self.pss = pss
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._peak_rss = 0
        self._peak_pss: int | None = None
        self._peak_count = 0
        self._driver = 0
        self._top: list[tuple[str, int]] = []
        self._samples = 0
        self._baseline = 0
        self._system_baseline = 0
        self._system_peak = 0
        self.result: MemoryPeak | None = None

    def _sample(self) -> None:
        sample = sample_tree(include_ray_processes=self.include_ray_processes, pss=self.pss)
        self._system_peak = max(self._system_peak, _system_used())
        self._samples += 1
        self._driver = max(self._driver, sample.driver_rss)
        key = sample.pss if sample.pss is not None else sample.rss
        best = self._peak_pss if self._peak_pss is not None else self._peak_rss
        if key > best or self._samples == 1:
            self._top = sorted(sample.by_process, key=lambda item: -item[1])[:_TOP]
            self._peak_count = sample.count
        if sample.pss is not None:
            self._peak_pss = max(self._peak_pss or 0, sample.pss)
        self._peak_rss = max(self._peak_rss, sample.rss)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._sample()

    def __enter__(self) -> PeakMemorySampler:
        self._baseline = sample_tree(include_ray_processes=self.include_ray_processes, pss=False).rss
        self._system_baseline = _system_used()
        self._sample()
        self._thread = threading.Thread(target=self._loop, name="fusion-ray-memory", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._sample()
        mib = 2**20
        self.result = MemoryPeak(
            peak_rss_mib=self._peak_rss / mib,
            peak_pss_mib=self._peak_pss / mib if self._peak_pss is not None else None,
            system_added_peak_mib=max(0, self._system_peak - self._system_baseline) / mib,
            processes_at_peak=self._peak_count, samples=self._samples, interval_s=self.interval_s,
            baseline_rss_mib=self._baseline / mib, driver_peak_rss_mib=self._driver / mib,
            top_at_peak=[(name, value / mib) for name, value in self._top])
