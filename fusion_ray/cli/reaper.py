"""A watchdog for the local Ray a command starts: ``python -m fusion_ray.cli.reaper DRIVER_PID``.

``ray.init()`` without an address starts a local cluster whose processes are the driver's
descendants. After a ``kill -9`` of the driver its GCS and raylet die with it, but the
dashboard and runtime-env agents (and replicas for a while) are orphaned for a minute or
more. The reaper, started in its own session before ``ray.init``, records the driver's
descendants every half second; once the driver is gone, it sends each survivor SIGTERM, then
SIGKILL two seconds later. A process is recognised by its pid and start time, so a reused pid
is never signalled. Linux only (it reads /proc); elsewhere it exits at once.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from pathlib import Path

POLL_S = 0.5
GRACE_S = 2.0
Proc = tuple[int, str]
"""(pid, start time in clock ticks since boot): one process, even after its pid is reused."""


def _stat(pid: int) -> tuple[int, str] | None:
    """(parent pid, start time) from /proc/PID/stat, or None when the process is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()  # after "pid (comm) ": state ppid ...
    if fields[0] == "Z":
        return None
    return int(fields[1]), fields[19]


def descendants(root: int) -> set[Proc]:
    """Every live process below ``root``."""
    children: dict[int, list[Proc]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            stat = _stat(int(entry.name))
            if stat is not None:
                children.setdefault(stat[0], []).append((int(entry.name), stat[1]))
    found: set[Proc] = set()
    todo = [root]
    while todo:
        for proc in children.get(todo.pop(), []):
            if proc not in found:
                found.add(proc)
                todo.append(proc[0])
    return found


def _alive(proc: Proc) -> bool:
    stat = _stat(proc[0])
    return stat is not None and stat[1] == proc[1]


def _signal_all(procs: set[Proc], signum: int) -> None:
    for proc in procs:
        if _alive(proc):
            with contextlib.suppress(OSError):  # gone meanwhile
                os.kill(proc[0], signum)


def watch(driver: int) -> None:
    """Record ``driver``'s descendants until it exits, then end the ones still alive."""
    me = os.getpid()
    known: set[Proc] = set()
    start = _stat(driver)
    while start is not None and _alive((driver, start[1])):
        known |= {p for p in descendants(driver) if p[0] != me}
        time.sleep(POLL_S)
    _signal_all(known, signal.SIGTERM)
    deadline = time.monotonic() + GRACE_S
    while any(_alive(p) for p in known) and time.monotonic() < deadline:
        time.sleep(0.1)
    _signal_all(known, signal.SIGKILL)


def main(argv: list[str]) -> int:
    if not Path("/proc/self/stat").exists() or len(argv) != 1 or not argv[0].isdigit():
        return 0
    watch(int(argv[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
