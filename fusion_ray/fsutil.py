"""Atomic file output: write beside the destination, rename into place, never leave a partial file."""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path

from fusion_ray.errors import InputError


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


def same_file(a: Path, b: Path) -> bool:
    """Whether two paths name the same file, through symbolic and hard links.

    When one of them does not exist, their resolved forms are compared.
    """
    try:
        return os.path.samefile(a, b)
    except OSError:
        return Path(a).resolve() == Path(b).resolve()


def check_not_an_input(output: Path, inputs: Sequence[tuple[str, Path]], what: str = "--output") -> None:
    """InputError naming both arguments when ``output`` is the same file as one of ``inputs``.

    ``inputs`` are (argument name, path) pairs. Even with ``--force`` an output must never
    replace the file it is made from.
    """
    for name, path in inputs:
        if same_file(output, path):
            raise InputError(f"{what} {output} is the same file as {name} {path}: refusing to overwrite an input")


def check_writable_dir(folder: Path, what: str = "output folder") -> None:
    """InputError unless ``folder`` is an existing folder where a new file can be created.

    Permission bits do not stop root, so this creates (and removes) a probe file: that also
    catches read-only mounts, immutable folders (``chattr +i``) and pseudo file systems.
    """
    folder = Path(folder)
    if not folder.exists():
        raise InputError(f"{what} does not exist: {folder}")
    if not folder.is_dir():
        raise InputError(f"{what} is not a folder: {folder}")
    probe = folder / f".fusion_ray_write_probe.{uuid.uuid4().hex[:12]}"
    try:
        os.close(os.open(probe, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    except OSError as exc:
        raise InputError(f"{what} is not writable: {folder} ({exc.strerror or exc})") from exc
    with contextlib.suppress(OSError):
        probe.unlink()
