"""Atomic file output: write beside the destination, rename into place, never leave a partial file."""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import uuid
from collections.abc import Iterator, Mapping, Sequence
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


def resolve_path(path: Path) -> Path:
    """``path`` with ``~`` expanded, resolved through its links; InputError for a symbolic-link
    loop (Python 3.11 raises RuntimeError for one, later versions OSError)."""
    try:
        return Path(path).expanduser().resolve()
    except (RuntimeError, OSError) as exc:
        raise InputError(f"{path} is a symbolic link loop") from exc


_NOT_REGULAR = ((stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISSOCK, "a socket"),
                (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))


def check_input_file(path: Path, what: str = "") -> None:
    """InputError naming the real problem unless ``path`` is a regular file with content that
    can be opened: missing, a symbolic-link loop, a folder, a pipe, socket or device (never
    opened: reading a pipe would block), empty, or not readable. ``what`` ("target",
    "source") leads the message."""
    name = f"{what} {path}" if what else str(path)
    try:
        st = os.stat(path)
    except FileNotFoundError as exc:
        raise InputError(f"file not found: {path}") from exc
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise InputError(f"{name} is a symbolic link loop") from exc
        raise InputError(f"cannot read {name}: {exc.strerror or exc}") from exc
    if stat.S_ISDIR(st.st_mode):
        raise InputError(f"{name} is a folder, not a file")
    for test, kind in _NOT_REGULAR:
        if test(st.st_mode):
            raise InputError(f"{name} is not a regular file but {kind}")
    if st.st_size == 0:
        raise InputError(f"{name} is empty (0 bytes)")
    try:
        os.close(os.open(path, os.O_RDONLY))
    except OSError as exc:
        raise InputError(f"cannot read {name}: {exc.strerror or exc}") from exc


def same_file(a: Path, b: Path) -> bool:
    """Whether two paths name the same file, through symbolic and hard links.

    When one of them does not exist, their resolved forms are compared; InputError when one
    is a symbolic-link loop.
    """
    try:
        return os.path.samefile(a, b)
    except OSError:
        return resolve_path(Path(a)) == resolve_path(Path(b))


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


def user_cache_dir(env: Mapping[str, str] | None = None) -> Path:
    """fusion_ray's per-user cache: ``$XDG_CACHE_HOME/fusion_ray`` (``~/.cache`` when unset)."""
    environ: Mapping[str, str] = os.environ if env is None else env
    xdg = environ.get("XDG_CACHE_HOME", "").strip()
    # The XDG spec says relative paths are invalid and must be ignored.
    cache = Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".cache"
    return cache / "fusion_ray"
