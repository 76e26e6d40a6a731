"""The model store: find, verify and download the registered model files.

Layout of a models directory (``resolve_models_dir``)::

    inswapper_128.onnx          the weights
    inswapper_128.hash          CRC32 published beside the file (8 lower-case hex digits)
    inswapper_128.onnx.sha256   our hash record: {"sha256", "size", "mtime_ns", "source"}
    inswapper_128.onnx.part     an unfinished download (resumed by the next download)

Integrity has three levels, reported as :attr:`LocatedModel.status`:

``verified``
    a hash record exists and the file matches it;
``crc32-verified``
    no record yet, but a ``.hash`` file beside the model matched its CRC32 (a record is then
    written, so the next look-up is ``verified``);
``unverified``
    a hand-placed file with neither: usable, with a logged warning, because nothing offline
    can say whether it is the right file.

The store never prints; it logs through ``logging`` and raises the typed errors of
:mod:`fusion_ray.errors`. It holds no global mutable state: everything hangs off a
:class:`ModelStore` instance built from explicit arguments.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import logging
import os
import re
import urllib.error
import urllib.request
import zlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal

from fusion_ray import __version__
from fusion_ray.errors import DownloadError, ModelError, ModelIntegrityError, ModelMissingError
from fusion_ray.fsutil import atomic_write_bytes
from fusion_ray.models.registry import ModelSpec, all_specs, get_spec

logger = logging.getLogger(__name__)

ModelStatus = Literal["verified", "crc32-verified", "unverified"]
RecordSource = Literal["download", "crc32-verified", "generated"]
ProgressCallback = Callable[[int, int | None], None]

ENV_MODELS_DIR = "FUSION_RAY_MODELS"
"""Environment variable naming the models directory (after an explicit ``--models-dir``)."""
RECORD_SUFFIX = ".sha256"
PART_SUFFIX = ".part"
HASH_SUFFIX = ".hash"
CHUNK_SIZE = 1 << 20
DEFAULT_TIMEOUT_S = 30.0

_RECORD_SOURCES: frozenset[str] = frozenset({"download", "crc32-verified", "generated"})
_CRC32_RE = re.compile(r"^[0-9a-f]{8}$")
_CONTENT_RANGE_RE = re.compile(r"^bytes\s+(\d+)-(\d+)/(\d+|\*)$")
_USER_AGENT = f"fusion-ray/{__version__} (+urllib)"


# --------------------------------------------------------------------------- directories


def user_cache_dir(env: Mapping[str, str] | None = None) -> Path:
    """fusion_ray's per-user cache: ``$XDG_CACHE_HOME/fusion_ray`` (``~/.cache`` when unset)."""
    environ: Mapping[str, str] = os.environ if env is None else env
    xdg = environ.get("XDG_CACHE_HOME", "").strip()
    # The XDG spec says relative paths are invalid and must be ignored.
    cache = Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".cache"
    return cache / "fusion_ray"


def resolve_models_dir(explicit: Path | None = None, env: Mapping[str, str] | None = None) -> Path:
    """The models directory: ``explicit`` (the CLI's ``--models-dir``), else ``$FUSION_RAY_MODELS``,
    else the per-user cache ``$XDG_CACHE_HOME/fusion_ray/models`` (``~/.cache`` when unset).

    ``env`` defaults to ``os.environ``; pass a mapping to resolve without touching the process
    environment. Nothing is created on disk.
    """
    environ: Mapping[str, str] = os.environ if env is None else env
    if explicit is not None:
        return Path(explicit).expanduser()
    from_env = environ.get(ENV_MODELS_DIR, "").strip()
    if from_env:
        return Path(from_env).expanduser()
    return user_cache_dir(environ) / "models"


def record_path(path: Path) -> Path:
    """The hash record beside a model file: ``<file>.sha256``."""
    return path.with_name(path.name + RECORD_SUFFIX)


def hash_file_path(path: Path) -> Path:
    """The published CRC32 file beside a model file: ``<stem>.hash`` (FaceFusion's naming)."""
    return path.with_name(path.stem + HASH_SUFFIX)


def part_path(path: Path) -> Path:
    """Where an unfinished download of ``path`` is kept: ``<file>.part``."""
    return path.with_name(path.name + PART_SUFFIX)


# --------------------------------------------------------------------------- hashing


def _iter_chunks(path: Path, chunk_size: int = CHUNK_SIZE) -> Iterator[bytes]:
    with open(path, "rb") as fh:
        while chunk := fh.read(chunk_size):
            yield chunk


class _Digests:
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


def _both_digests(path: Path, chunk_size: int = CHUNK_SIZE) -> _Digests:
    digests = _Digests()
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


def _atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"), fsync=True)


def _write_record(path: Path, source: RecordSource, sha256: str) -> None:
    stat = path.stat()
    body = {"sha256": sha256, "size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "source": source}
    _atomic_write_text(record_path(path), json.dumps(body, indent=2) + "\n")


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
        _write_record(path, source, digest)
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


def _read_crc_file(path: Path) -> str | None:
    """The CRC32 in a ``.hash`` file, or ``None`` when there is no such file."""
    try:
        text = path.read_text(encoding="ascii", errors="replace").strip().lower()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ModelError(f"could not read {path}: {exc}") from exc
    if not _CRC32_RE.match(text):
        raise ModelIntegrityError(
            f"{path} should hold a CRC32 as 8 hex digits, got {text[:40]!r}. "
            f"Fix: delete {path} (it is re-fetched by `fusion-ray models download`)."
        )
    return text


# --------------------------------------------------------------------------- store


@dataclass(frozen=True)
class LocatedModel:
    """A model file that exists, and how far its integrity was established."""

    name: str
    path: Path
    status: ModelStatus
    sha256: str | None = None
    """The file's sha256 when known (from the record or computed); ``None`` if not hashed."""


def _http_status(response: Any) -> int:
    status = getattr(response, "status", None)
    return int(status if status is not None else response.getcode())


def _describe_network_error(exc: BaseException) -> str:
    if isinstance(exc, urllib.error.HTTPError):
        return f"HTTP {exc.code} {exc.reason}"
    if isinstance(exc, urllib.error.URLError):
        return str(exc.reason)
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


class ModelStore:
    """The registered models in one directory, plus per-model path overrides.

    ``root`` is the models directory (see :func:`resolve_models_dir`); ``overrides`` maps a
    model name to an explicit file, e.g. the real detector at
    ``../shared/assets/models/scrfd_2.5g.onnx``. ``chunk_size`` and ``timeout_s`` tune hashing
    reads and downloads.
    """

    def __init__(
        self,
        root: Path,
        overrides: Mapping[str, Path] | None = None,
        *,
        chunk_size: int = CHUNK_SIZE,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        if chunk_size <= 0:
            raise ValueError(f"chunk_size: expected a positive int, got {chunk_size}")
        self.root = Path(root)
        for name in overrides or {}:
            get_spec(name)  # an override for an unknown model is a typo: say so now
        self.overrides: Mapping[str, Path] = MappingProxyType(
            {name: Path(p).expanduser() for name, p in (overrides or {}).items()}
        )
        self.chunk_size = chunk_size
        self.timeout_s = timeout_s

    def __repr__(self) -> str:
        return f"ModelStore(root={str(self.root)!r}, overrides={dict(self.overrides)!r})"

    # ----------------------------------------------------------------- look-up

    def path_for(self, name: str) -> Path:
        """Where model ``name`` is expected: its override, else ``root / file_name``."""
        spec = get_spec(name)
        return self.overrides.get(name, self.root / spec.file_name)

    def locate(self, name: str) -> LocatedModel:
        """Find model ``name`` and establish its integrity as cheaply as is safe.

        Fast path: a hash record whose size and mtime_ns match the file is trusted without
        re-hashing (a change that keeps both is not detected here; :meth:`verify` re-hashes).
        A record that no longer matches size or mtime triggers a full re-hash: same content
        refreshes the record, different content raises :class:`ModelIntegrityError`. With no
        record, a ``.hash`` beside the file is checked (CRC32) and a record written. With
        neither, the file is returned as ``"unverified"`` with a logged warning.

        Raises :class:`ModelMissingError` (with the path, the expected hash and the fix) when the
        file is absent.
        """
        spec = get_spec(name)
        path = self.path_for(name)
        if not path.is_file():
            raise self._missing_error(spec, path)
        return self._check(spec, path, full=False, warn=True)

    def verify(self, name: str) -> LocatedModel:
        """Like :meth:`locate` but always re-hashes the whole file (sha256, and CRC32 when a
        ``.hash`` file is beside it), whatever the record's size and mtime say."""
        spec = get_spec(name)
        path = self.path_for(name)
        if not path.is_file():
            raise self._missing_error(spec, path)
        return self._check(spec, path, full=True, warn=True)

    def status_rows(self) -> list[dict[str, Any]]:
        """One row per registered model for ``fusion-ray models list``.

        Keys: ``name``, ``kind``, ``file``, ``present``, ``status`` (``"missing"``,
        ``"verified"``, ``"crc32-verified"``, ``"unverified"`` or ``"corrupt"``), ``size``
        (bytes, ``None`` when missing), ``approx_size_mb``, ``licence``, ``licence_url``,
        ``detail`` (the error text of a corrupt file, else ``None``). Logs no warnings.
        """
        rows: list[dict[str, Any]] = []
        for spec in all_specs():
            path = self.path_for(spec.name)
            present = path.is_file()
            status = "missing"
            detail: str | None = None
            size: int | None = None
            if present:
                size = path.stat().st_size
                try:
                    status = self._check(spec, path, full=False, warn=False).status
                except ModelError as exc:
                    status, detail = "corrupt", str(exc)
            rows.append(
                {
                    "name": spec.name,
                    "kind": spec.kind,
                    "file": str(path),
                    "present": present,
                    "status": status,
                    "size": size,
                    "approx_size_mb": spec.approx_size_mb,
                    "licence": spec.licence,
                    "licence_url": spec.licence_url,
                    "detail": detail,
                }
            )
        return rows

    # ----------------------------------------------------------------- download

    def download(
        self,
        name: str,
        *,
        progress: ProgressCallback | None = None,
        opener: Callable[..., Any] | None = None,
        force: bool = False,
    ) -> LocatedModel:
        """Download model ``name`` into :meth:`path_for` and return it as ``"verified"``.

        Order: nothing is fetched when the file is present and verified (unless ``force``);
        the published ``.hash`` (CRC32) is fetched first; a present but unverified file whose
        CRC32 matches it is kept (record written, no model download); otherwise the model is
        fetched into ``<file>.part``, resuming an existing ``.part`` with a ``Range`` request
        (appended on 206, restarted from zero on 200), its CRC32 checked, renamed into place
        atomically, and the ``.hash`` and sha256 record written beside it.

        ``progress(bytes_done, total_or_None)`` is called as chunks arrive. ``opener`` is called
        as ``opener(request, timeout=...)`` and must return a response like
        ``urllib.request.urlopen`` does (the default). Network failures raise
        :class:`DownloadError` naming the URL (an interrupted ``.part`` is kept for resuming);
        a CRC32 mismatch deletes the ``.part`` and raises :class:`ModelIntegrityError`.
        """
        spec = get_spec(name)
        dest = self.path_for(name)
        open_url: Callable[..., Any] = opener if opener is not None else urllib.request.urlopen

        present_unverified = False
        if dest.is_file() and not force:
            try:
                located = self._check(spec, dest, full=False, warn=False)
            except ModelError as exc:
                logger.warning("%s; downloading a fresh copy", exc)
            else:
                if located.status != "unverified":
                    logger.info("%s is already present and verified at %s", name, dest)
                    return located
                present_unverified = True

        logger.info(
            "downloading %s (about %.0f MB) from %s; licence: %s (%s)",
            name, spec.approx_size_mb, spec.url, spec.licence, spec.licence_url,
        )
        expected_crc = self._fetch_crc(spec, open_url)

        if present_unverified and crc32_file(dest, self.chunk_size) == expected_crc:
            logger.info("%s at %s matches the published CRC32; keeping it", name, dest)
            self._try_write_text(hash_file_path(dest), expected_crc)
            sha = sha256_file(dest, self.chunk_size)
            self._try_write_record(dest, "crc32-verified", sha)
            return LocatedModel(spec.name, dest, "crc32-verified", sha)

        try:
            dest.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise DownloadError(f"could not create the models directory {dest.parent}: {exc}") from exc
        part = part_path(dest)
        sha = self._fetch_model(spec, part, expected_crc, open_url, progress)
        try:
            # Drop stale metadata first so no reader pairs the new file with an old record.
            record_path(dest).unlink(missing_ok=True)
            os.replace(part, dest)
            _atomic_write_text(hash_file_path(dest), expected_crc)
            _write_record(dest, "download", sha)
        except OSError as exc:
            raise DownloadError(f"could not move {part} into place at {dest}: {exc}") from exc
        logger.info("downloaded %s to %s (sha256 %s)", name, dest, sha)
        return LocatedModel(spec.name, dest, "verified", sha)

    # ----------------------------------------------------------------- internals

    def _check(self, spec: ModelSpec, path: Path, *, full: bool, warn: bool) -> LocatedModel:
        stat = path.stat()
        record = read_hash_record(path)
        if (
            record is not None
            and not full
            and record.size == stat.st_size
            and record.mtime_ns == stat.st_mtime_ns
        ):
            return LocatedModel(spec.name, path, "verified", record.sha256)

        expected_crc = _read_crc_file(hash_file_path(path))
        if record is None and expected_crc is None and not full:
            if warn:
                self._warn_unverified(spec, path)
            return LocatedModel(spec.name, path, "unverified")

        digests = _both_digests(path, self.chunk_size)
        if record is not None and digests.sha256 != record.sha256:
            raise ModelIntegrityError(
                f"model {spec.name!r} at {path} does not match its hash record "
                f"{record_path(path)}: expected sha256 {record.sha256}, got {digests.sha256}. "
                f"Fix: delete {path} and re-download it with `fusion-ray models download {spec.name}`."
            )
        if expected_crc is not None and digests.crc32 != expected_crc:
            raise ModelIntegrityError(
                f"model {spec.name!r} at {path} does not match {hash_file_path(path)}: "
                f"expected CRC32 {expected_crc}, got {digests.crc32}. "
                f"Fix: delete {path} and re-download it with `fusion-ray models download {spec.name}`."
            )
        if record is not None:
            if (record.size, record.mtime_ns) != (stat.st_size, stat.st_mtime_ns):
                # Same content, new mtime (copied or touched): refresh the fast-path keys.
                self._try_write_record(path, record.source, digests.sha256)
            return LocatedModel(spec.name, path, "verified", digests.sha256)
        if expected_crc is not None:
            self._try_write_record(path, "crc32-verified", digests.sha256)
            return LocatedModel(spec.name, path, "crc32-verified", digests.sha256)
        if warn:
            self._warn_unverified(spec, path)
        return LocatedModel(spec.name, path, "unverified", digests.sha256)

    def _warn_unverified(self, spec: ModelSpec, path: Path) -> None:
        logger.warning(
            "model %r at %s is unverified: it has no hash record (%s) and no CRC32 file (%s) "
            "beside it, so its integrity could not be checked offline. To check it, run "
            "`fusion-ray models download %s` (it fetches the published CRC32 from %s and keeps "
            "this file without re-downloading it if it matches), or save that .hash file as %s.",
            spec.name, path, record_path(path).name, hash_file_path(path).name,
            spec.name, spec.hash_url, hash_file_path(path),
        )

    def _missing_error(self, spec: ModelSpec, path: Path) -> ModelMissingError:
        hash_path = hash_file_path(path)
        try:
            expected_crc = _read_crc_file(hash_path)
        except ModelError:
            expected_crc = None
        expected = (
            f"expected CRC32 {expected_crc} from {hash_path}"
            if expected_crc is not None
            else "expected hash: recorded on download"
        )
        origin = " (set by an override)" if spec.name in self.overrides else ""
        return ModelMissingError(
            f"model {spec.name!r} not found at {path}{origin} ({expected}). "
            f"Fix: run `fusion-ray models download {spec.name}` (about {spec.approx_size_mb:.0f} MB "
            f"from {spec.url}; licence: {spec.licence}), or place the file at {path}."
        )

    def _try_write_record(self, path: Path, source: RecordSource, sha256: str) -> None:
        try:
            _write_record(path, source, sha256)
        except OSError as exc:
            logger.info("could not write the hash record beside %s (%s); it is re-checked next time", path, exc)

    def _try_write_text(self, path: Path, text: str) -> None:
        try:
            _atomic_write_text(path, text)
        except OSError as exc:
            logger.info("could not write %s: %s", path, exc)

    def _request(self, url: str, headers: Mapping[str, str] | None = None) -> urllib.request.Request:
        return urllib.request.Request(url, headers={"User-Agent": _USER_AGENT, **(headers or {})})

    def _fetch_crc(self, spec: ModelSpec, open_url: Callable[..., Any]) -> str:
        url = spec.hash_url
        try:
            with open_url(self._request(url), timeout=self.timeout_s) as response:
                raw = response.read(256)
        except urllib.error.HTTPError as exc:
            exc.close()
            raise DownloadError(f"could not download {url}: {_describe_network_error(exc)}") from exc
        except (urllib.error.URLError, http.client.HTTPException, OSError) as exc:
            raise DownloadError(f"could not download {url}: {_describe_network_error(exc)}") from exc
        text = bytes(raw).decode("ascii", errors="replace").strip().lower()
        if not _CRC32_RE.match(text):
            raise DownloadError(f"{url} should hold a CRC32 as 8 hex digits, got {text[:40]!r}")
        return text

    def _fetch_model(
        self,
        spec: ModelSpec,
        part: Path,
        expected_crc: str,
        open_url: Callable[..., Any],
        progress: ProgressCallback | None,
    ) -> str:
        """Fetch ``spec.url`` into ``part`` (resuming it), check CRC32, return the sha256."""
        url = spec.url
        for _attempt in range(2):  # a second attempt only after discarding an unusable .part
            offset = part.stat().st_size if part.is_file() else 0
            headers = {"Range": f"bytes={offset}-"} if offset else {}
            try:
                response = open_url(self._request(url, headers), timeout=self.timeout_s)
            except urllib.error.HTTPError as exc:
                exc.close()
                if exc.code == 416 and offset:
                    # The .part already holds the whole file (or more): judge it as it is.
                    digests = _both_digests(part, self.chunk_size)
                    if digests.crc32 == expected_crc:
                        return digests.sha256
                    logger.warning("discarding %s: the server has nothing past its end", part)
                    part.unlink(missing_ok=True)
                    continue
                raise DownloadError(f"could not download {url}: {_describe_network_error(exc)}") from exc
            except (urllib.error.URLError, http.client.HTTPException, OSError) as exc:
                raise DownloadError(f"could not download {url}: {_describe_network_error(exc)}") from exc
            with response:
                start = self._start_body(response, part, offset)
                if start is None:
                    part.unlink(missing_ok=True)
                    continue
                digests, done, total = start
                done = self._stream_body(response, url, part, digests, done, total, progress)
            break
        else:
            raise DownloadError(f"could not download {url}: the server would not resume or restart")

        if total is not None and done != total:
            raise DownloadError(
                f"download of {url} stopped at {done} of {total} bytes; "
                f"run `fusion-ray models download {spec.name}` again to resume from {part}"
            )
        if digests.crc32 != expected_crc:
            part.unlink(missing_ok=True)
            raise ModelIntegrityError(
                f"downloaded {url} does not match its published CRC32: expected {expected_crc}, "
                f"got {digests.crc32}; the partial file was deleted. "
                f"Fix: run `fusion-ray models download {spec.name}` again."
            )
        return digests.sha256

    def _start_body(
        self, response: Any, part: Path, offset: int
    ) -> tuple[_Digests, int, int | None] | None:
        """How to take the response: (digests, bytes already done, total or None).

        On a 206 for the range asked, the digests are seeded from ``part`` and the body is
        appended; on anything else (200) ``part`` is truncated and the body starts at zero.
        ``None`` when a 206 answers a different range than asked (``part`` must go).
        """
        status = _http_status(response)
        length_header = response.headers.get("Content-Length", "").strip()
        length = int(length_header) if length_header.isdigit() else None
        digests = _Digests()
        if offset and status == 206:
            match = _CONTENT_RANGE_RE.match(response.headers.get("Content-Range", "").strip())
            if match is None or int(match.group(1)) != offset:
                logger.warning("server answered a different range than bytes=%d-; restarting", offset)
                return None
            if match.group(3) != "*":
                total: int | None = int(match.group(3))
            else:
                total = offset + length if length is not None else None
            digests.update_from_file(part, self.chunk_size)
            return digests, offset, total
        if offset:
            logger.info("server ignored the Range request (HTTP %d); restarting from zero", status)
        try:
            part.write_bytes(b"")
        except OSError as exc:
            raise DownloadError(f"could not write {part}: {exc}") from exc
        return digests, 0, length

    def _stream_body(
        self,
        response: Any,
        url: str,
        part: Path,
        digests: _Digests,
        done: int,
        total: int | None,
        progress: ProgressCallback | None,
    ) -> int:
        """Append the body to ``part``, feeding ``digests``; return the bytes now in ``part``."""
        if progress is not None:
            progress(done, total)
        try:
            with open(part, "ab") as fh:
                while True:
                    try:
                        chunk = response.read(self.chunk_size)
                    except (http.client.HTTPException, OSError) as exc:
                        raise DownloadError(
                            f"download of {url} was interrupted after {done} bytes "
                            f"({_describe_network_error(exc)}); run it again to resume from {part}"
                        ) from exc
                    if not chunk:
                        break
                    fh.write(chunk)
                    digests.update(chunk)
                    done += len(chunk)
                    if progress is not None:
                        progress(done, total)
        except OSError as exc:  # open / write / close of the .part; read errors are handled above
            raise DownloadError(f"could not write {part}: {exc}") from exc
        return done
