"""Helpers for tests that start servers and commands: a free loopback port, surviving processes."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import time

import psutil


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def alive(processes: list[psutil.Process]) -> list[str]:
    """'pid command' of those processes still running (zombies count as gone)."""
    names = []
    for p in processes:
        with contextlib.suppress(psutil.NoSuchProcess):
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                names.append(f"{p.pid} {' '.join(p.cmdline())[:100]}")
    return names


def left_after(processes: list[psutil.Process], timeout_s: float) -> list[str]:
    """Those still running after up to ``timeout_s`` (polled every 0.5 s)."""
    deadline = time.monotonic() + timeout_s
    while alive(processes) and time.monotonic() < deadline:
        time.sleep(0.5)
    return alive(processes)


def kill_9_leaves(proc: subprocess.Popen, processes: list[psutil.Process], timeout_s: float = 15.0) -> list[str]:
    """``kill -9`` of ``proc``, then those of its ``processes`` still running after ``timeout_s``
    ("a few seconds": the reaper sends SIGTERM, then SIGKILL 2 s later, on a loaded host)."""
    proc.kill()
    proc.wait(timeout=30)
    return left_after(processes, timeout_s)


def kill_all(processes: list[psutil.Process]) -> None:
    """Kill whatever of them is left (a test never leaves them to the next one)."""
    for p in processes:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.kill()
