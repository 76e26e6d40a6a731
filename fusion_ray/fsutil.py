"""Atomic file output: write beside the destination, rename into place, never leave a partial file."""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def atomic_path(destination: Path) -> Iterator[Path]:
    """A temporary path beside ``destination``: renamed onto it on success, removed on failure.

    The name is unique (not ``mkstemp``, whose 0600 mode would survive the rename), so files
    created through it get the usual umask-based permissions.
    """
    destination = Path(destination)
    destination.parent.mkdir(parents=True, exist_ok=True)
    tmp = destination.parent / f".{destination.name}.{uuid.uuid4().hex[:12]}.part"
    try:
        yield tmp
        os.replace(tmp, destination)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


def atomic_write_bytes(destination: Path, data: bytes, *, fsync: bool = False) -> None:
    """Write ``data`` to ``destination`` atomically (optionally fsynced before the rename)."""
    with atomic_path(destination) as tmp, tmp.open("wb") as handle:
        handle.write(data)
        if fsync:
            handle.flush()
            os.fsync(handle.fileno())
