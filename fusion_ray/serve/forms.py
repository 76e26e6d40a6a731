"""multipart/form-data bodies, parsed with python-multipart as the bytes arrive.

:func:`read_form` feeds a streamed body to python-multipart's ``MultipartParser`` chunk by
chunk, under the byte cap (413 as soon as the count passes it) and the receive deadline
(408). :func:`parse_multipart` parses a body already in memory. Failures raise
:class:`~fusion_ray.serve.limits.ApiError`; no Ray, no FastAPI.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from python_multipart.exceptions import MultipartParseError
from python_multipart.multipart import MultipartParser, MultipartState, parse_options_header

from fusion_ray.serve.limits import ApiError, clip

FILE_FIELDS = frozenset({"target", "source", "image"})
"""Multipart fields that carry images (POST /v1/swap: target, source; POST /v1/sources: image)."""


@dataclass(frozen=True)
class Part:
    """One multipart/form-data field."""

    name: str
    filename: str | None
    content_type: str | None
    data: bytes


@dataclass
class Form:
    """The parsed fields of a multipart/form-data body, in order."""

    parts: list[Part] = field(default_factory=list)

    def files(self, name: str) -> list[Part]:
        return [p for p in self.parts if p.name == name]

    def file(self, name: str) -> Part | None:
        found = self.files(name)
        if len(found) > 1:
            raise ApiError(422, "invalid_field", f"field {clip(name)!r} was given {len(found)} times; expected once")
        return found[0] if found else None

    def names(self) -> set[str]:
        return {p.name for p in self.parts}

    def texts(self, name: str) -> list[str]:
        """Every value of a text field given once or repeated (a list option), in order."""
        return [part.data.decode("utf-8", "replace").strip() for part in self.parts
                if part.name == name and part.filename is None and part.name not in FILE_FIELDS]

    def text_fields(self) -> dict[str, str]:
        """Fields without a filename, as text (a repeated field keeps its last value).

        The image fields (:data:`FILE_FIELDS`) are never text, with or without a filename:
        ``curl -F 'target=<img.png'`` sends the image without one.
        """
        out: dict[str, str] = {}
        for part in self.parts:
            if part.filename is None and part.name not in FILE_FIELDS:
                try:
                    out[part.name] = part.data.decode("utf-8").strip()
                except UnicodeDecodeError as exc:
                    raise ApiError(422, "invalid_field", f"field {clip(part.name)!r} is not UTF-8 text") from exc
        return out


def _malformed(why: str) -> ApiError:
    return ApiError(400, "malformed_multipart", why)


def boundary_of(content_type: str | None) -> bytes:
    """The multipart boundary of a Content-Type header; 415 when the body is not multipart/form-data."""
    if not content_type:
        raise ApiError(415, "unsupported_media_type", "expected a multipart/form-data body (no Content-Type)")
    kind, params = parse_options_header(content_type)
    if kind != b"multipart/form-data":
        raise ApiError(415, "unsupported_media_type",
                       f"expected a multipart/form-data body, got {clip(kind.decode('latin-1'))!r}")
    boundary = params.get(b"boundary", b"")
    if not 1 <= len(boundary) <= 200:
        raise _malformed("multipart/form-data without a valid boundary")
    return boundary


class FormParser:
    """python-multipart's streaming parser, collecting parts into a :class:`Form` (at most ``max_parts``)."""

    def __init__(self, content_type: str | None, max_parts: int) -> None:
        self.form = Form()
        self.max_parts = max_parts
        self._headers: dict[str, str] = {}
        self._field: list[bytes] = []
        self._value: list[bytes] = []
        self._data: list[bytes] = []
        self._parser = MultipartParser(boundary_of(content_type), callbacks={  # type: ignore[arg-type]
            "on_part_begin": self._part_begin, "on_part_data": self._part_data, "on_part_end": self._part_end,
            "on_header_field": lambda d, s, e: self._field.append(d[s:e]),
            "on_header_value": lambda d, s, e: self._value.append(d[s:e]),
            "on_header_end": self._header_end,
        })

    def feed(self, chunk: bytes) -> None:
        try:
            self._parser.write(chunk)
        except MultipartParseError as exc:
            raise _malformed(f"malformed multipart body ({exc})") from exc

    def finish(self) -> Form:
        """The form once the whole body is in; 400 when the closing boundary never came."""
        if self._parser.state != MultipartState.END:
            if not self.form.parts and self._parser.state <= MultipartState.START_BOUNDARY:
                raise _malformed("multipart body without its boundary")
            raise _malformed("multipart body is truncated (no closing boundary)")
        return self.form

    # ------------------------------------------------------------ callbacks
    def _part_begin(self) -> None:
        self._headers, self._data = {}, []
        if len(self.form.parts) >= self.max_parts:
            raise ApiError(422, "too_many_parts", f"more than {self.max_parts} multipart fields")

    def _part_data(self, data: bytes, start: int, end: int) -> None:
        self._data.append(data[start:end])

    def _header_end(self) -> None:
        name = b"".join(self._field).decode("latin-1").strip().lower()
        self._headers[name] = b"".join(self._value).decode("latin-1").strip()
        self._field, self._value = [], []

    def _part_end(self) -> None:
        disposition = self._headers.get("content-disposition")
        if disposition is None:
            raise _malformed("a part has no Content-Disposition")
        kind, params = parse_options_header(disposition)
        if kind != b"form-data":
            raise _malformed(f"part disposition {clip(disposition)!r} is not form-data")
        name = params.get(b"name", b"").decode("utf-8", "replace")
        if not name:
            raise _malformed("a part has no field name")
        filename = params.get(b"filename")
        self.form.parts.append(Part(name, None if filename is None else filename.decode("utf-8", "replace"),
                                    self._headers.get("content-type"), b"".join(self._data)))


def parse_multipart(body: bytes, content_type: str | None, *, max_parts: int = 32) -> Form:
    """Parse a multipart/form-data body held in memory."""
    parser = FormParser(content_type, max_parts)
    parser.feed(body)
    return parser.finish()


async def _feed_capped(parser: FormParser, chunks: AsyncIterator[bytes], limit: int) -> Form:
    total = 0
    failure: ApiError | None = None
    async for chunk in chunks:
        total += len(chunk)
        if total > limit:
            raise ApiError(413, "body_too_large", f"request body is over the limit of {limit} bytes")
        if chunk and failure is None:
            try:
                parser.feed(chunk)
            except ApiError as exc:  # counted on, not parsed: a body over the cap is a 413 whatever it holds
                failure = exc
    if failure is not None:
        raise failure
    return parser.finish()


async def read_form(chunks: AsyncIterator[bytes], content_type: str | None, *, max_bytes: int,
                    timeout_s: float, max_parts: int) -> Form:
    """Parse a streamed body as it arrives: 415/400 for a body that is not multipart, 413 as soon
    as more than ``max_bytes`` arrived (a chunked body declares no length), 408 when the whole body
    has not arrived within ``timeout_s`` (a stalled upload would otherwise hold its slot)."""
    parser = FormParser(content_type, max_parts)  # 415 before reading a body we cannot use
    try:
        return await asyncio.wait_for(_feed_capped(parser, chunks, max_bytes), timeout_s)
    except TimeoutError as exc:
        raise ApiError(408, "receive_timeout", f"the request body did not arrive within {timeout_s:g} s") from exc
