"""``Storage``: read, list and publish files and objects through one explicit object.

A ``Storage`` holds a ``StorageConfig`` and the filesystems built from it (one per scheme,
built on first use). It pickles as its config, so a Ray task or actor given one builds its
own filesystems on its node. Every failure is a StorageError naming the location and the
cause (see ``storage.errors``).

Publishing: an output appears under its name only when complete. A local output is written
beside its destination and renamed into place (``fsutil``). An object is uploaded straight
to its final key in one request or one multipart upload, which the store makes visible only
when it completes. pyarrow completes an upload whenever its stream is closed, also when an
exception interrupts the writing (its streams have no abort), so nothing is ever streamed to
the store from Python: ``publish`` copies a finished local file in pyarrow's C++ copy, and
``write_bytes_atomic`` writes a buffer in one call; ``open_output`` spools to a local file
and publishes it on success only.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import glob as globlib
import logging
import os
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import IO, Any, TypeVar

import pyarrow.fs as pafs

from fusion_ray.errors import one_line
from fusion_ray.fsutil import atomic_path, atomic_write_bytes, check_writable_dir
from fusion_ray.storage.config import StorageConfig, make_filesystem
from fusion_ray.storage.errors import (
    BucketNotFoundError,
    ObjectNotFoundError,
    StorageError,
    translate,
)
from fusion_ray.storage.location import Location, match_segments, parse_location, split_pattern
from fusion_ray.storage.uploads import abort_uploads

T = TypeVar("T")
log = logging.getLogger(__name__)
LocationLike = Location | str | os.PathLike[str]
UPLOAD_CHUNK_BYTES = 8 << 20


@dataclass(frozen=True)
class ObjectStat:
    """What identifies one version of a file or object (for resume invalidation)."""

    size: int
    mtime_ns: int | None
    etag: str | None
    """The store's entity tag (an object's ETag); None for a local file."""

    @property
    def fingerprint(self) -> str:
        """Changes when the content changes: the size with the ETag, else with the mtime."""
        return f"{self.size}:etag:{self.etag}" if self.etag else f"{self.size}:mtime:{self.mtime_ns}"


class Storage:
    """Files and objects of every scheme a ``StorageConfig`` describes (see the module doc)."""

    def __init__(self, config: StorageConfig | None = None) -> None:
        self.config = config or StorageConfig()
        self._filesystems: dict[str, pafs.FileSystem] = {}

    def __reduce__(self) -> tuple[Any, ...]:
        return (Storage, (self.config,))

    def filesystem(self, location: Location) -> pafs.FileSystem:
        """The pyarrow filesystem of ``location``'s scheme (built once per Storage)."""
        fs = self._filesystems.get(location.scheme)
        if fs is None:
            fs = self._filesystems.setdefault(location.scheme, make_filesystem(location.scheme, self.config))
        return fs

    def _call(self, location: Location, action: str, fn: Callable[[], T]) -> T:
        """``fn()``; what it raises becomes a StorageError naming ``location``."""
        try:
            return fn()
        except (OSError, StorageError) as exc:
            error = translate(exc, str(location), action)
            if type(error) is ObjectNotFoundError and not location.is_local:
                self._check_bucket(location)
            raise error from exc

    def _check_bucket(self, location: Location) -> None:
        with contextlib.suppress(OSError):
            info = self.filesystem(location).get_file_info(location.bucket)
            if info.type == pafs.FileType.NotFound:
                raise BucketNotFoundError(f"{location}: no such bucket {location.bucket!r}")

    # Reading

    def open_input(self, location: LocationLike) -> IO[bytes]:
        """A seekable binary file (``av.open`` takes it). In a bucket every buffer refill is one
        ranged GET of ``config.read_ahead_bytes``; the file's ``raw`` is a CountingReader."""
        loc = parse_location(location)
        if loc.is_local:
            return self._call(loc, "read", lambda: _open_local(loc.path))
        from fusion_ray.storage.streams import buffered_reader

        file = self._call(loc, "read", lambda: self.filesystem(loc).open_input_file(loc.fs_path))
        return buffered_reader(file, loc.fs_path, self.config.read_ahead_bytes)

    @contextlib.contextmanager
    def open_media(self, location: LocationLike) -> Iterator[str | IO[bytes]]:
        """What ``av.open`` should get: a local file's path (FFmpeg's own file I/O), else
        ``open_input``'s file, closed when the block ends (close the container inside it)."""
        loc = parse_location(location)
        if loc.is_local:
            if not loc.path.is_file():
                self._call(loc, "read", lambda: _open_local(loc.path).close())
            yield loc.key
            return
        with self.open_input(loc) as file:
            yield file

    def read_bytes(self, location: LocationLike, max_bytes: int | None = None) -> bytes:
        """The whole content; StorageError when it is larger than ``max_bytes``."""
        loc = parse_location(location)

        def read() -> bytes:
            with self.filesystem(loc).open_input_file(loc.fs_path) as file:
                size = int(file.size())
                if max_bytes is not None and size > max_bytes:
                    raise StorageError(f"{loc}: {size} bytes, more than the {max_bytes} allowed")
                return bytes(file.read())

        if loc.is_local and Path(loc.key).is_dir():
            raise StorageError(f"{loc}: is a folder, not a file")
        return self._call(loc, "read", read)

    def stat(self, location: LocationLike) -> ObjectStat:
        """Size, modification time and ETag (one HEAD request for an object)."""
        loc = parse_location(location)
        if loc.is_local:
            st = self._call(loc, "stat", lambda: os.stat(loc.key))
            if not os.path.isfile(loc.key):
                raise StorageError(f"{loc}: is a folder, not a file")
            return ObjectStat(st.st_size, st.st_mtime_ns, None)

        def head() -> ObjectStat:
            with self.filesystem(loc).open_input_file(loc.fs_path) as file:
                meta = {_text(k).lower(): _text(v) for k, v in (file.metadata() or {}).items()}
                etag = meta.get("etag", "").strip('"') or None
                return ObjectStat(int(file.size()), _parse_time(meta.get("last-modified", "")), etag)

        return self._call(loc, "stat", head)

    def exists(self, location: LocationLike) -> bool:
        """Whether a file exists there (a folder or prefix is not a file). Refused credentials
        raise StorageAccessError instead of answering False."""
        loc = parse_location(location)
        info = self._call(loc, "check", lambda: self.filesystem(loc).get_file_info(loc.fs_path))
        return bool(info.type == pafs.FileType.File)

    def glob(self, pattern: LocationLike) -> list[Location]:
        """Files matching ``pattern`` (``s3://b/clips/*.mp4``, ``faces/**/*.jpg``), sorted, with
        ``glob.glob(recursive=True)``'s rules (``*`` within a name, ``**`` across folders,
        hidden names only matched explicitly). A missing bucket is a BucketNotFoundError."""
        loc = parse_location(pattern)
        root, segments = split_pattern(loc)
        if not segments:
            return [loc] if self.exists(loc) else []
        if loc.is_local:
            found = globlib.glob(loc.key, recursive=True)
            return sorted(Location("file", "", path) for path in found if os.path.isfile(path))
        selector = pafs.FileSelector(root.fs_path, recursive=len(segments) > 1 or "**" in segments,
                                     allow_not_found=True)
        infos = self._call(root, "list", lambda: self.filesystem(root).get_file_info(selector))
        prefix = len(root.key) + 1 if root.key else 0
        matches = []
        for info in infos:
            key = info.path.partition("/")[2]
            if info.type == pafs.FileType.File and match_segments(segments, key[prefix:].split("/")):
                matches.append(Location(root.scheme, root.bucket, key))
        if not matches:
            self._check_bucket(root)
        return sorted(matches)

    # Writing

    def publish(self, local_file: Path, location: LocationLike, *, move: bool = False) -> None:
        """Put the finished ``local_file`` at ``location``, complete or not at all (see the
        module doc). ``move`` removes ``local_file`` afterwards (a rename when it can)."""
        loc = parse_location(location)
        local_file = Path(local_file)
        if not local_file.is_file():
            raise ObjectNotFoundError(f"{local_file}: no such file to publish to {loc}")
        if loc.is_local:
            self._call(loc, "write", lambda: _publish_local(local_file, loc.path, move=move))
            return
        self._upload(loc, lambda: pafs.copy_files(
            str(local_file), loc.fs_path, source_filesystem=pafs.LocalFileSystem(),
            destination_filesystem=self.filesystem(loc), chunk_size=UPLOAD_CHUNK_BYTES), local_file.stat().st_size)
        if move:
            local_file.unlink()

    def write_bytes_atomic(self, location: LocationLike, data: bytes) -> None:
        """Write ``data`` at ``location``, complete or not at all (one write, then close)."""
        loc = parse_location(location)
        if loc.is_local:
            self._call(loc, "write", lambda: atomic_write_bytes(loc.path, data))
            return

        def put() -> None:
            stream = self.filesystem(loc).open_output_stream(loc.fs_path)
            stream.write(data)
            stream.close()

        self._upload(loc, put, len(data))

    def _upload(self, loc: Location, upload: Callable[[], None], size: int) -> None:
        """``upload()`` of ``size`` bytes to an object, then checked there (pyarrow's copy only
        logs a part that failed). When it fails, the parts of an unfinished multipart upload of
        that key are aborted (a stalled store leaves them), or the error says they remain."""
        def upload_and_check() -> None:
            upload()
            info = self.filesystem(loc).get_file_info(loc.fs_path)
            if info.type != pafs.FileType.File or info.size != size:
                held = f"{info.size} of {size} bytes" if info.type == pafs.FileType.File else "nothing"
                raise StorageError(f"{loc}: the upload did not complete (the store holds {held})")

        try:
            self._call(loc, "write", upload_and_check)
        except StorageError as exc:
            if loc.scheme != "s3":
                raise
            try:
                abort_uploads(self.config.s3, loc.bucket, loc.key)
            except Exception as abort_error:  # noqa: BLE001 - botocore's errors; the store may still be down
                log.warning("%s: unfinished upload not aborted (%s)", loc, one_line(str(abort_error)))
                raise type(exc)(f"{exc}; an unfinished upload of it may remain in the bucket: "
                                "`fusion-ray job --clean-parts` aborts it") from exc
            raise

    def abort_uploads(self, prefix: LocationLike) -> int:
        """Abort every unfinished multipart upload under ``prefix`` in a bucket (0 elsewhere)."""
        loc = parse_location(prefix)
        if loc.scheme != "s3":
            return 0
        key = f"{loc.key}/" if loc.key else ""
        try:
            return abort_uploads(self.config.s3, loc.bucket, key, prefix=True)
        except Exception as exc:  # noqa: BLE001 - botocore's errors, as one line
            raise StorageError(f"{loc}: cannot abort unfinished uploads: {one_line(str(exc))}") from exc

    @contextlib.contextmanager
    def open_output(self, location: LocationLike, spool_dir: Path | None = None) -> Iterator[IO[bytes]]:
        """A binary file to write; on success it appears at ``location``, on an exception
        nothing does. Objects are spooled to a local file in ``spool_dir`` (the system's
        temporary folder by default) and published when the block ends."""
        loc = parse_location(location)
        if loc.is_local:
            self._call(loc, "write", lambda: loc.path.parent.mkdir(parents=True, exist_ok=True))
            with atomic_path(loc.path) as tmp, tmp.open("wb") as file:
                yield file
            return
        fd, name = tempfile.mkstemp(prefix=".fusion_ray_spool.", suffix=loc.suffix, dir=spool_dir)
        spool = Path(name)
        try:
            with os.fdopen(fd, "wb") as file:
                yield file
            self.publish(spool, loc)
        finally:
            spool.unlink(missing_ok=True)

    def check_writable(self, folder: LocationLike, what: str = "output root") -> None:
        """StorageError (InputError) unless a new file can be created in ``folder``: a local
        folder is probed as ``fsutil.check_writable_dir`` does; in a bucket an empty probe
        object is written and deleted (a missing bucket or refused credentials fail here)."""
        loc = parse_location(folder)
        if loc.is_local:
            check_writable_dir(loc.path, what)
            return
        probe = loc / f".fusion_ray_write_probe.{uuid.uuid4().hex[:12]}"
        self.write_bytes_atomic(probe, b"")
        self.remove(probe)

    def remove(self, location: LocationLike) -> None:
        """Delete a file or object; nothing when there is none."""
        loc = parse_location(location)
        with contextlib.suppress(ObjectNotFoundError):
            self._call(loc, "delete", lambda: self.filesystem(loc).delete_file(loc.fs_path))

    def remove_tree(self, location: LocationLike) -> None:
        """Delete a folder (every object under a prefix) and its content; nothing when absent."""
        loc = parse_location(location)
        if not loc.is_local and not loc.key:
            raise StorageError(f"{loc}: refusing to delete a whole bucket")
        if loc.is_local:
            shutil.rmtree(loc.key, ignore_errors=True)
            return
        with contextlib.suppress(ObjectNotFoundError):
            self._call(loc, "delete", lambda: self.filesystem(loc).delete_dir(loc.fs_path))


def _open_local(path: Path) -> IO[bytes]:
    if path.is_dir():
        raise IsADirectoryError(21, "is a folder, not a file", str(path))
    return path.open("rb")


def _publish_local(source: Path, destination: Path, *, move: bool) -> None:
    if move:
        with contextlib.suppress(OSError):
            destination.parent.mkdir(parents=True, exist_ok=True)
            os.replace(source, destination)
            return
    with atomic_path(destination) as tmp:
        shutil.copyfile(source, tmp)
    if move:
        source.unlink()


def _text(value: object) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value) if value is not None else ""


def _parse_time(text: str) -> int | None:
    """Nanoseconds since the epoch of an ISO 8601 or HTTP date; None when unreadable."""
    if not text:
        return None
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        try:
            when = parsedate_to_datetime(text)
        except (TypeError, ValueError):
            return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return int(when.timestamp()) * 1_000_000_000
