"""Hashes of model files and the records kept beside them.

Beside a model file ``<stem>.onnx`` live::

    <stem>.hash          the CRC32 published with the file (8 lower-case hex digits)
    <stem>.onnx.sha256   our hash record: {"sha256", "size", "mtime_ns", "source"}

Files are hashed in chunks; :class:`Digests` feeds SHA-256 and CRC32 together so a file is
read once for both. Writes are atomic (temporary file, fsync, rename).
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from fusion_ray.errors import ModelError, ModelIntegrityError
from fusion_ray.fsutil import atomic_write_bytes

logger = logging.getLogger(__name__)

RecordSource = Literal["download", "crc32-verified", "generated"]

RECORD_SUFFIX = ".sha256"
HASH_SUFFIX = ".hash"
CHUNK_SIZE = 1 << 20

_RECORD_SOURCES: frozenset[str] = frozenset({"download", "crc32-verified", "generated"})
_CRC32_RE = re.compile(r"^[0-9a-f]{8}$")


def record_path(path: Path) -> Path:
    """The hash record beside a model file: ``<file>.sha256``."""
    return path.with_name(path.name + RECORD_SUFFIX)


def hash_file_path(path: Path) -> Path:
    """The published CRC32 file beside a model file: ``<stem>.hash`` (FaceFusion's naming)."""
    return path.with_name(path.stem + HASH_SUFFIX)


def is_crc32(text: str) -> bool:
    """Whether ``text`` is a CRC32 as the ``.hash`` files hold it (8 lower-case hex digits)."""
    return _CRC32_RE.match(text) is not None


# --------------------------------------------------------------------------- hashing


def _iter_chunks(path: Path, chunk_size: int = CHUNK_SIZE) -> Iterator[bytes]:
    with open(path, "rb") as fh:
        while chunk := fh.read(chunk_size):
            yield chunk


class Digests:
    """SHA-256 and CRC32 fed together, so a file is read once for both."""

    def __init__(self) -> None:
        self._sha = hashlib.sha256()
        self._crc = 0

    def update(self, data: bytes) -> None:
        self._sha.update(data)
        self._crc = zlib.crc32(data, self._crc)

    def update_from_file(self, path: Path, chunk_size: int = CHUNK_SIZE) -> None:
        for chunk in _iter_chunks(path, chunk_size):
            self.update(chunk)

    @property
    def sha256(self) -> str:
        return self._sha.hexdigest()

    @property
    def crc32(self) -> str:
        return format(self._crc & 0xFFFFFFFF, "08x")


def sha256_file(path: Path, chunk_size: int = CHUNK_SIZE) -> str:
    """Hex SHA-256 of a file, read in chunks."""
    sha = hashlib.sha256()
    for chunk in _iter_chunks(Path(path), chunk_size):
        sha.update(chunk)
    return sha.hexdigest()


def crc32_file(path: Path, chunk_size: int = CHUNK_SIZE) -> str:
    """CRC32 of a file as 8 lower-case hex digits (the ``.hash`` file format), read in chunks."""
    crc = 0
    for chunk in _iter_chunks(Path(path), chunk_size):
        crc = zlib.crc32(chunk, crc)
    return format(crc & 0xFFFFFFFF, "08x")


def file_digests(path: Path, chunk_size: int = CHUNK_SIZE) -> Digests:
    """Both digests of a file, read once."""
    digests = Digests()
    digests.update_from_file(path, chunk_size)
    return digests


# --------------------------------------------------------------------------- records


@dataclass(frozen=True)
class HashRecord:
    """Contents of a ``<file>.sha256`` record."""

    sha256: str
    size: int
    mtime_ns: int
    source: RecordSource


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically and fsynced; raises ``OSError``."""
    atomic_write_bytes(path, text.encode("utf-8"), fsync=True)


def write_record(path: Path, source: RecordSource, sha256: str) -> None:
    """Write the record of ``path`` (its current size and mtime) for a known sha256; raises
    ``OSError`` (see :func:`write_hash_record` for the checked, typed-error version)."""
    stat = path.stat()
    body = {"sha256": sha256, "size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "source": source}
    atomic_write_text(record_path(path), json.dumps(body, indent=2) + "\n")


def write_hash_record(path: Path, source: RecordSource, *, sha256: str | None = None) -> str:
    """Hash ``path`` and write its ``<file>.sha256`` record atomically; return the sha256.

    ``source`` says how the file was trusted: ``"download"`` (fetched and CRC-checked here),
    ``"crc32-verified"`` (matched a published ``.hash``) or ``"generated"`` (built locally,
    e.g. a stand-in model). Pass ``sha256`` when it is already known to skip re-hashing.
    Raises :class:`ModelError` when the record cannot be written.
    """
    path = Path(path)
    if source not in _RECORD_SOURCES:
        raise ValueError(f"source: expected one of {sorted(_RECORD_SOURCES)}, got {source!r}")
    try:
        digest = sha256 if sha256 is not None else sha256_file(path)
        write_record(path, source, digest)
    except OSError as exc:
        raise ModelError(f"could not write the hash record {record_path(path)}: {exc}") from exc
    return digest


def read_hash_record(path: Path) -> HashRecord | None:
    """The record beside ``path``, or ``None`` when there is none or it cannot be parsed."""
    rec_path = record_path(Path(path))
    try:
        raw = json.loads(rec_path.read_text(encoding="utf-8"))
        record = HashRecord(
            sha256=str(raw["sha256"]).lower(),
            size=int(raw["size"]),
            mtime_ns=int(raw["mtime_ns"]),
            source=raw["source"] if raw.get("source") in _RECORD_SOURCES else "download",
        )
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        logger.warning("ignoring unreadable hash record %s: %s", rec_path, exc)
        return None
    if not re.fullmatch(r"[0-9a-f]{64}", record.sha256):
        logger.warning("ignoring hash record %s: %r is not a sha256", rec_path, record.sha256)
        return None
    return record


def read_crc_file(path: Path) -> str | None:
    """The CRC32 in a ``.hash`` file, or ``None`` when there is no such file.

    Raises :class:`ModelError` when it cannot be read and :class:`ModelIntegrityError` when it
    does not hold a CRC32.
    """
    try:
        text = path.read_text(encoding="ascii", errors="replace").strip().lower()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ModelError(f"could not read {path}: {exc}") from exc
    if not is_crc32(text):
        raise ModelIntegrityError(
            f"{path} should hold a CRC32 as 8 hex digits, got {text[:40]!r}. "
            f"Fix: delete {path} (it is re-fetched by `fusion-ray models download`)."
        )
    return text
