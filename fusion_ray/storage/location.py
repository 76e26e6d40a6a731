"""Locations: a local path or an object in a bucket (``s3://``, ``gs://``), as one value.

Pure parsing and path arithmetic, no I/O. A remote key is a ``/``-separated list of
non-empty segments without ``.`` or ``..``: object stores take those literally (``a/../b``
is its own key), so they are refused instead of given a meaning. A local location holds an
absolute path (``~`` expanded, relative paths made absolute against a base or the current
folder, symbolic links kept).
"""

from __future__ import annotations

import fnmatch
import os
import posixpath
import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote

from fusion_ray.errors import InputError
from fusion_ray.fsutil import resolve_path
from fusion_ray.storage.errors import LocationError

LOCAL = "file"
REMOTE_SCHEMES = {"s3": "s3", "gs": "gs", "gcs": "gs"}
"""Accepted URI schemes of object stores and the scheme each is stored as."""
_URI = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://(.*)$", re.DOTALL)
_S3_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_GS_BUCKET = re.compile(r"^[a-z0-9][a-z0-9._-]{1,220}[a-z0-9]$")
_GLOB_CHARS = re.compile(r"[*?\[]")


@dataclass(frozen=True, order=True)
class Location:
    """A file or object: ``scheme`` is ``file``, ``s3`` or ``gs``; ``bucket`` is empty for a
    local file; ``key`` is the absolute path (local) or the object key ('' = the bucket)."""

    scheme: str
    bucket: str
    key: str

    @classmethod
    def parse(cls, text: str | os.PathLike[str] | Location, base: Location | None = None) -> Location:
        """A URI (``s3://b/k``, ``gs://b/k``, ``file:///p``) or a path; a relative path is
        relative to ``base`` (a folder, local or remote), else to the current folder."""
        return parse_location(text, base)

    @property
    def is_local(self) -> bool:
        return self.scheme == LOCAL

    @property
    def uri(self) -> str:
        """``s3://bucket/key``, ``gs://bucket/key`` or ``file:///abs/path``."""
        if self.is_local:
            return Path(self.key).as_uri()
        return f"{self.scheme}://{self.bucket}/{self.key}" if self.key else f"{self.scheme}://{self.bucket}"

    @property
    def path(self) -> Path:
        """The local path; LocationError for an object in a bucket."""
        if not self.is_local:
            raise LocationError(f"{self}: not a local path")
        return Path(self.key)

    @property
    def fs_path(self) -> str:
        """The path as pyarrow's filesystems take it: ``bucket/key`` or the local path."""
        if self.is_local:
            return self.key
        return f"{self.bucket}/{self.key}" if self.key else self.bucket

    @property
    def name(self) -> str:
        return posixpath.basename(self.key) if not self.is_local else Path(self.key).name

    @property
    def suffix(self) -> str:
        return Path(self.name).suffix

    @property
    def stem(self) -> str:
        return Path(self.name).stem

    @property
    def parent(self) -> Location:
        if self.is_local:
            return Location(LOCAL, "", str(Path(self.key).parent))
        return Location(self.scheme, self.bucket, posixpath.dirname(self.key))

    def joinpath(self, *parts: str) -> Location:
        """This folder joined with relative ``parts`` (an absolute part or URI is refused)."""
        location = self
        for part in parts:
            location = _join(location, str(part))
        return location

    def __truediv__(self, part: str) -> Location:
        return self.joinpath(part)

    def with_name(self, name: str) -> Location:
        if not name or "/" in name or name in (".", ".."):
            raise LocationError(f"{self}: invalid file name {name!r}")
        return self.parent.joinpath(name)

    def __str__(self) -> str:
        """The local path, or the URI of an object."""
        return self.key if self.is_local else self.uri


def parse_location(text: str | os.PathLike[str] | Location, base: Location | None = None) -> Location:
    """See ``Location.parse``. LocationError (an InputError) names the text and what is wrong."""
    if isinstance(text, Location):
        return text
    raw = os.fspath(text)
    if not raw or not raw.strip():
        raise LocationError("empty path or URI")
    found = _URI.match(raw)
    if found is None:
        relative = not (raw.startswith("/") or raw.startswith("~"))
        return _join(base, raw) if base is not None and relative else _local(raw, Path.cwd())
    scheme = found.group(1).lower()
    if scheme == LOCAL:
        return _file_uri(raw, found.group(2))
    if scheme not in REMOTE_SCHEMES:
        raise LocationError(f"{raw}: unsupported scheme {scheme!r}; use s3://, gs://, file:// or a local path")
    bucket, _, key = found.group(2).partition("/")
    scheme = REMOTE_SCHEMES[scheme]
    _check_bucket(raw, scheme, bucket)
    return Location(scheme, bucket, _check_key(raw, key.rstrip("/")))


def _local(raw: str, base: Path) -> Location:
    path = Path(raw).expanduser()
    return Location(LOCAL, "", os.path.normpath(path if path.is_absolute() else base / path))


def _file_uri(raw: str, rest: str) -> Location:
    host, slash, path = rest.partition("/")
    if host not in ("", "localhost") or not slash:
        raise LocationError(f"{raw}: a file:// URI must name an absolute local path (file:///path)")
    return Location(LOCAL, "", os.path.normpath("/" + unquote(path)))


def _check_bucket(raw: str, scheme: str, bucket: str) -> None:
    if not bucket:
        raise LocationError(f"{raw}: no bucket name")
    pattern = _S3_BUCKET if scheme == "s3" else _GS_BUCKET
    if not pattern.match(bucket) or ".." in bucket:
        rule = "3-63 lowercase letters, digits, dots and hyphens" if scheme == "s3" else \
            "lowercase letters, digits, dots, hyphens and underscores"
        raise LocationError(f"{raw}: invalid bucket name {bucket!r} ({rule})")


def _check_key(raw: str, key: str) -> str:
    if not key:
        return ""
    for segment in key.split("/"):
        if segment in ("", ".", ".."):
            raise LocationError(f"{raw}: object keys may not contain empty, '.' or '..' segments")
    if any(ord(ch) < 32 for ch in key):
        raise LocationError(f"{raw}: control characters in the object key")
    return key


def _join(base: Location, part: str) -> Location:
    if _URI.match(part) or part.startswith("/") or part.startswith("~"):
        raise LocationError(f"{part}: expected a relative path to join to {base}")
    if base.is_local:
        return _local(part, Path(base.key))
    joined = f"{base.key}/{part}" if base.key else part
    return Location(base.scheme, base.bucket, _check_key(f"{base}/{part}", joined.rstrip("/")))


def is_under(location: Location, root: Location) -> bool:
    """Whether ``location`` is ``root`` or inside it, segment by segment (``s3://b/out2/x`` is
    not under ``s3://b/out``). Local paths are compared resolved, through symbolic links."""
    if location.scheme != root.scheme or location.bucket != root.bucket:
        return False
    if location.is_local:
        return resolve_path(Path(location.key)).is_relative_to(resolve_path(Path(root.key)))
    if not root.key:
        return True
    return location.key == root.key or location.key.startswith(root.key + "/")


def confine(location: Location, root: Location | None) -> Location:
    """``location`` (resolved when local); InputError when it falls outside ``root``."""
    resolved = Location(LOCAL, "", str(resolve_path(Path(location.key)))) if location.is_local else location
    if root is not None and not is_under(location, root):
        raise InputError(f"output {location} is outside the output root {root}")
    return resolved


def has_magic(text: str) -> bool:
    """Whether ``text`` holds a glob wildcard (``*``, ``?``, ``[``)."""
    return _GLOB_CHARS.search(text) is not None


def split_pattern(pattern: Location) -> tuple[Location, list[str]]:
    """The folder before the first segment with a wildcard, and the remaining segments."""
    parts = pattern.key.split("/") if pattern.key else []
    if pattern.is_local:
        parts = list(Path(pattern.key).parts[1:])
    for n, part in enumerate(parts):
        if has_magic(part):
            fixed = "/".join(parts[:n])
            root = Location(LOCAL, "", "/" + fixed) if pattern.is_local else \
                Location(pattern.scheme, pattern.bucket, fixed)
            return root, parts[n:]
    return pattern, []


def match_segments(pattern: list[str], parts: list[str]) -> bool:
    """Whether path ``parts`` match glob ``pattern`` segments as ``glob.glob(recursive=True)``
    matches: ``*`` stays within a segment, ``**`` spans any number of segments, and a
    wildcard does not match a name starting with '.'."""
    if not pattern:
        return not parts
    head, rest = pattern[0], pattern[1:]
    if head == "**":
        return any(match_segments(rest, parts[n:]) for n in range(len(parts) + 1)
                   if all(not p.startswith(".") for p in parts[:n]))
    if not parts:
        return False
    name = parts[0]
    if name.startswith(".") and not head.startswith("."):
        return False
    return fnmatch.fnmatchcase(name, head) and match_segments(rest, parts[1:])
