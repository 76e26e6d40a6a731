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
import re
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


_SESSION = re.compile(r"session_\d{4}-\d\d-\d\d_\d\d-\d\d-\d\d_\d+_\d+")


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
    except OSError:
        return ""


def sessions(procs: set[Proc]) -> set[str]:
    """The Ray session names on these processes' command lines (GCS, raylet, starting workers)."""
    return {m.group(0) for pid, _ in procs for m in _SESSION.finditer(_cmdline(pid))}


def of_sessions(names: set[str]) -> set[Proc]:
    """Live processes whose command line names one of the sessions: a worker the raylet started
    after the last poll has its session on its command line until it renames itself."""
    found: set[Proc] = set()
    if not names:
        return found
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and any(name in _cmdline(int(entry.name)) for name in names):
            stat = _stat(int(entry.name))
            if stat is not None:
                found.add((int(entry.name), stat[1]))
    return found


def watch(driver: int) -> None:
    """Record ``driver``'s descendants (and its Ray sessions) until it exits, then end the ones
    still alive, and any process of those sessions started since the last look."""
    me = os.getpid()
    known: set[Proc] = set()
    names: set[str] = set()
    start = _stat(driver)
    while start is not None and _alive((driver, start[1])):
        new = {p for p in descendants(driver) if p[0] != me} - known
        known |= new
        names |= sessions(new)
        time.sleep(POLL_S)
    known |= {p for p in of_sessions(names) if p[0] != me}
    end(known, names, GRACE_S, skip={me})


def end(procs: set[Proc], names: set[str], grace_s: float, skip: set[int] | frozenset[int] = frozenset()) -> None:
    """SIGTERM to ``procs`` still alive, SIGKILL to those left after ``grace_s`` and to any process
    of the Ray sessions ``names`` started meanwhile (pids in ``skip`` are left alone)."""
    _signal_all(procs, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while any(_alive(p) for p in procs) and time.monotonic() < deadline:
        time.sleep(0.1)
    procs = procs | {p for p in of_sessions(names) if p[0] not in skip}  # started while the others stopped
    _signal_all(procs, signal.SIGKILL)


def own_ray(skip: set[int]) -> tuple[set[Proc], set[str]]:
    """This process's descendants (but ``skip``) and their Ray sessions: what ``end`` stops after
    ``ray.shutdown()``, which leaves agents and workers re-parented to init for half a minute."""
    procs = {p for p in descendants(os.getpid()) if p[0] not in skip}
    return procs, sessions(procs)


def start() -> int:
    """Start the reaper for this process, in its own session (Ctrl-C in the terminal does not
    reach it; it exits once this process and the Ray it started are gone); its pid."""
    import subprocess

    return subprocess.Popen([sys.executable, "-m", "fusion_ray.cli.reaper", str(os.getpid())],
                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                     start_new_session=True).pid


def main(argv: list[str]) -> int:
    if not Path("/proc/self/stat").exists() or len(argv) != 1 or not argv[0].isdigit():
        return 0
    watch(int(argv[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
