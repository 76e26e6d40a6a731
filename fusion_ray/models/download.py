"""HTTP downloads of registered model files: the published CRC32 first, then the weights.

The weights go to ``<file>.part`` (:func:`part_path`). An existing ``.part`` is resumed with a
``Range`` request: appended on a 206 for the range asked, restarted from zero on a 200, judged
as it is on a 416. The CRC32 is checked before the file is renamed into place, and the
``.hash`` and sha256 record (:mod:`fusion_ray.models.hashes`) are written beside it.

Network failures raise :class:`DownloadError` naming the URL (an interrupted ``.part`` is kept
for resuming); a CRC32 mismatch deletes the ``.part`` and raises :class:`ModelIntegrityError`.
"""

from __future__ import annotations

import http.client
import logging
import os
import re
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from fusion_ray import __version__
from fusion_ray.errors import DownloadError, ModelIntegrityError
from fusion_ray.models.hashes import (
    CHUNK_SIZE,
    Digests,
    atomic_write_text,
    file_digests,
    hash_file_path,
    is_crc32,
    record_path,
    write_record,
)
from fusion_ray.models.spec import ModelSpec

logger = logging.getLogger(__name__)

ProgressCallback = Callable[[int, int | None], None]

PART_SUFFIX = ".part"
DEFAULT_TIMEOUT_S = 30.0

_CONTENT_RANGE_RE = re.compile(r"^bytes\s+(\d+)-(\d+)/(\d+|\*)$")
_USER_AGENT = f"fusion-ray/{__version__} (+urllib)"
_NETWORK_ERRORS = (urllib.error.URLError, http.client.HTTPException, OSError)


def part_path(path: Path) -> Path:
    """Where an unfinished download of ``path`` is kept: ``<file>.part``."""
    return path.with_name(path.name + PART_SUFFIX)


def _http_status(response: Any) -> int:
    status = getattr(response, "status", None)
    return int(status if status is not None else response.getcode())


def _describe_network_error(exc: BaseException) -> str:
    if isinstance(exc, urllib.error.HTTPError):
        return f"HTTP {exc.code} {exc.reason}"
    if isinstance(exc, urllib.error.URLError):
        return str(exc.reason)
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _failed(url: str, exc: BaseException) -> DownloadError:
    return DownloadError(f"could not download {url}: {_describe_network_error(exc)}")


class Downloader:
    """Fetches a model's published CRC32 and its weights over HTTP(S).

    ``opener`` is called as ``opener(request, timeout=...)`` and must return a response like
    ``urllib.request.urlopen`` does (the default). ``chunk_size`` is the read size of bodies
    and files; ``timeout_s`` the timeout of each request.
    """

    def __init__(
        self,
        opener: Callable[..., Any] | None = None,
        *,
        chunk_size: int = CHUNK_SIZE,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        self.opener: Callable[..., Any] = opener if opener is not None else urllib.request.urlopen
        self.chunk_size = chunk_size
        self.timeout_s = timeout_s

    def fetch_crc(self, spec: ModelSpec) -> str:
        """The CRC32 published at ``spec.hash_url`` (8 lower-case hex digits)."""
        url = spec.hash_url
        try:
            with self.opener(self._request(url), timeout=self.timeout_s) as response:
                raw = response.read(256)
        except urllib.error.HTTPError as exc:
            exc.close()
            raise _failed(url, exc) from exc
        except _NETWORK_ERRORS as exc:
            raise _failed(url, exc) from exc
        text = bytes(raw).decode("ascii", errors="replace").strip().lower()
        if not is_crc32(text):
            raise DownloadError(f"{url} should hold a CRC32 as 8 hex digits, got {text[:40]!r}")
        return text

    def download_to(
        self, spec: ModelSpec, dest: Path, expected_crc: str, progress: ProgressCallback | None
    ) -> str:
        """Fetch ``spec.url`` into ``dest`` (through its ``.part``), write the ``.hash`` and the
        sha256 record beside it, and return the sha256."""
        try:
            dest.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise DownloadError(f"could not create the models directory {dest.parent}: {exc}") from exc
        part = part_path(dest)
        sha = self.fetch_model(spec, part, expected_crc, progress)
        try:
            # Drop stale metadata first so no reader pairs the new file with an old record.
            record_path(dest).unlink(missing_ok=True)
            os.replace(part, dest)
            atomic_write_text(hash_file_path(dest), expected_crc)
            write_record(dest, "download", sha)
        except OSError as exc:
            raise DownloadError(f"could not move {part} into place at {dest}: {exc}") from exc
        return sha

    def fetch_model(
        self, spec: ModelSpec, part: Path, expected_crc: str, progress: ProgressCallback | None
    ) -> str:
        """Fetch ``spec.url`` into ``part`` (resuming it), check CRC32, return the sha256."""
        url = spec.url
        for _attempt in range(2):  # a second attempt only after discarding an unusable .part
            offset = part.stat().st_size if part.is_file() else 0
            headers = {"Range": f"bytes={offset}-"} if offset else {}
            try:
                response = self.opener(self._request(url, headers), timeout=self.timeout_s)
            except urllib.error.HTTPError as exc:
                exc.close()
                if exc.code == 416 and offset:
                    # The .part already holds the whole file (or more): judge it as it is.
                    digests = file_digests(part, self.chunk_size)
                    if digests.crc32 == expected_crc:
                        return digests.sha256
                    logger.warning("discarding %s: the server has nothing past its end", part)
                    part.unlink(missing_ok=True)
                    continue
                raise _failed(url, exc) from exc
            except _NETWORK_ERRORS as exc:
                raise _failed(url, exc) from exc
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
        return self._checked(spec, part, expected_crc, digests, done, total)

    # ----------------------------------------------------------------- internals

    def _request(self, url: str, headers: Mapping[str, str] | None = None) -> urllib.request.Request:
        return urllib.request.Request(url, headers={"User-Agent": _USER_AGENT, **(headers or {})})

    def _checked(
        self, spec: ModelSpec, part: Path, expected_crc: str, digests: Digests, done: int,
        total: int | None,
    ) -> str:
        """The sha256 of a complete ``part`` whose CRC32 matched; raises otherwise."""
        if total is not None and done != total:
            raise DownloadError(
                f"download of {spec.url} stopped at {done} of {total} bytes; "
                f"run `fusion-ray models download {spec.name}` again to resume from {part}"
            )
        if digests.crc32 != expected_crc:
            part.unlink(missing_ok=True)
            raise ModelIntegrityError(
                f"downloaded {spec.url} does not match its published CRC32: expected {expected_crc}, "
                f"got {digests.crc32}; the partial file was deleted. "
                f"Fix: run `fusion-ray models download {spec.name}` again."
            )
        return digests.sha256

    def _start_body(
        self, response: Any, part: Path, offset: int
    ) -> tuple[Digests, int, int | None] | None:
        """How to take the response: (digests, bytes already done, total or None).

        On a 206 for the range asked, the digests are seeded from ``part`` and the body is
        appended; on anything else (200) ``part`` is truncated and the body starts at zero.
        ``None`` when a 206 answers a different range than asked (``part`` must go).
        """
        status = _http_status(response)
        length_header = response.headers.get("Content-Length", "").strip()
        length = int(length_header) if length_header.isdigit() else None
        digests = Digests()
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
        digests: Digests,
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
