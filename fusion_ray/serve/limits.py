"""Request limits: body cap, multipart parsing, image-header sniffing, in-flight limiting.

Everything here is plain Python (no Ray, no FastAPI) so it can be tested without a server.
Failures raise :class:`ApiError`, which the ingress turns into a JSON error body
``{"error": <code>, "detail": <message>}`` with the error's HTTP status.
"""

from __future__ import annotations

import asyncio
import re
import struct
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from email.message import Message

from fusion_ray.errors import FusionRayError

SUPPORTED_FORMATS = ("png", "jpeg", "webp", "bmp")
FILE_FIELDS = frozenset({"target", "source", "image"})
"""Multipart fields that carry images (POST /v1/swap: target, source; POST /v1/sources: image)."""


class ApiError(FusionRayError):
    """An error answered to the client: HTTP status, a short code and a message."""

    def __init__(self, status: int, code: str, detail: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(detail)
        self.status = status
        self.code = code
        self.detail = detail
        self.headers = dict(headers or {})

    def body(self) -> dict[str, str]:
        return {"error": self.code, "detail": self.detail}


# ---------------------------------------------------------------------- body
def check_content_length(header: str | None, limit: int) -> int | None:
    """The declared body length; 413 when it is over ``limit``, 400 when it is not a number."""
    if header is None:
        return None
    value = header.strip()
    if not value.isdigit():
        raise ApiError(400, "bad_request", f"Content-Length {header!r} is not a non-negative integer")
    length = int(value)
    if length > limit:
        raise ApiError(413, "body_too_large", f"request body of {length} bytes is over the limit of {limit} bytes")
    return length


async def read_capped(chunks: AsyncIterator[bytes], limit: int) -> bytes:
    """Read a streamed body, counting bytes as they arrive; 413 as soon as it passes ``limit``.

    The declared Content-Length is checked separately: a chunked body has none, and the
    count here is what bounds memory.
    """
    parts: list[bytes] = []
    total = 0
    async for chunk in chunks:
        total += len(chunk)
        if total > limit:
            raise ApiError(413, "body_too_large", f"request body is over the limit of {limit} bytes")
        if chunk:
            parts.append(chunk)
    return b"".join(parts)


async def read_capped_within(chunks: AsyncIterator[bytes], limit: int, timeout_s: float) -> bytes:
    """:func:`read_capped` with a deadline for the whole body: 408 when it has not all arrived in time.

    The body is read inside an in-flight slot; without a deadline a client sending it slowly
    (or not at all) would hold the slot for as long as it kept the connection open.
    """
    try:
        return await asyncio.wait_for(read_capped(chunks, limit), timeout_s)
    except asyncio.TimeoutError as exc:
        raise ApiError(408, "receive_timeout",
                       f"the request body did not arrive within {timeout_s:g} s") from exc


# ----------------------------------------------------------------- multipart
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
            raise ApiError(422, "invalid_field", f"field {name!r} was given {len(found)} times; expected once")
        return found[0] if found else None

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
                    raise ApiError(422, "invalid_field", f"field {part.name!r} is not UTF-8 text") from exc
        return out


_TOKEN = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")


def _parse_header_params(value: str) -> tuple[str, dict[str, str]]:
    message = Message()
    message["content-type"] = value
    params = {k.lower(): v for k, v in message.get_params(failobj=[], header="content-type")[1:]}
    return message.get_content_type(), params


def boundary_of(content_type: str | None) -> bytes:
    """The multipart boundary of a Content-Type header; 415 when the body is not multipart/form-data."""
    if not content_type:
        raise ApiError(415, "unsupported_media_type", "expected a multipart/form-data body (no Content-Type)")
    kind, params = _parse_header_params(content_type)
    if kind != "multipart/form-data":
        raise ApiError(415, "unsupported_media_type", f"expected a multipart/form-data body, got {kind!r}")
    boundary = params.get("boundary", "")
    if not 1 <= len(boundary) <= 200:
        raise ApiError(400, "malformed_multipart", "multipart/form-data without a valid boundary")
    return boundary.encode("latin-1")


def _disposition(value: str) -> tuple[str, str | None]:
    message = Message()
    message["content-disposition"] = value
    if message.get_content_disposition() != "form-data":
        raise ApiError(400, "malformed_multipart", f"part disposition {value!r} is not form-data")
    name = message.get_param("name", header="content-disposition")
    filename = message.get_filename()
    if not isinstance(name, str) or not name:
        raise ApiError(400, "malformed_multipart", "a part has no field name")
    return name, filename


def parse_multipart(body: bytes, content_type: str | None, *, max_parts: int = 32) -> Form:
    """Parse a multipart/form-data body held in memory (it is already capped in size)."""
    boundary = boundary_of(content_type)
    delimiter = b"--" + boundary
    start = body.find(delimiter)
    if start < 0:
        raise ApiError(400, "malformed_multipart", "multipart body without its boundary")
    form = Form()
    pos = start + len(delimiter)
    while True:
        if body[pos:pos + 2] == b"--":
            return form
        if body[pos:pos + 2] != b"\r\n":
            raise ApiError(400, "malformed_multipart", "boundary not followed by a line break")
        pos += 2
        head_end = body.find(b"\r\n\r\n", pos)
        if head_end < 0:
            raise ApiError(400, "malformed_multipart", "part headers are not terminated")
        headers: dict[str, str] = {}
        for line in body[pos:head_end].split(b"\r\n"):
            key, sep, value = line.decode("latin-1").partition(":")
            if not sep or not _TOKEN.match(key.strip()):
                raise ApiError(400, "malformed_multipart", f"bad part header line {line[:80]!r}")
            headers[key.strip().lower()] = value.strip()
        end = body.find(b"\r\n" + delimiter, head_end + 4)
        if end < 0:
            raise ApiError(400, "malformed_multipart", "multipart body is truncated (no closing boundary)")
        if "content-disposition" not in headers:
            raise ApiError(400, "malformed_multipart", "a part has no Content-Disposition")
        name, filename = _disposition(headers["content-disposition"])
        form.parts.append(Part(name, filename, headers.get("content-type"), body[head_end + 4:end]))
        if len(form.parts) > max_parts:
            raise ApiError(422, "too_many_parts", f"more than {max_parts} multipart fields")
        pos = end + 2 + len(delimiter)


# -------------------------------------------------------------- image header
@dataclass(frozen=True)
class ImageHeader:
    """An image's format and dimensions, read from its header without decoding pixels."""

    format: str
    width: int
    height: int

    @property
    def pixels(self) -> int:
        return self.width * self.height


_JPEG_SOF = {0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF}


def sniff_format(data: bytes) -> str | None:
    """The image format from the magic bytes, or None."""
    if data[:8] == b"\x89PNG\r\n\x1a\n":
        return "png"
    if data[:3] == b"\xff\xd8\xff":
        return "jpeg"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "webp"
    if data[:2] == b"BM":
        return "bmp"
    return None


def _malformed(name: str, fmt: str, why: str) -> ApiError:
    return ApiError(422, "invalid_image", f"{name}: malformed {fmt.upper()} header ({why})")


def read_image_header(data: bytes, name: str = "image") -> ImageHeader:
    """Format and dimensions from the header only (PNG IHDR, JPEG SOF, WebP VP8/VP8L/VP8X, BMP).

    415 for data that is not one of the supported formats, 422 for a malformed header.
    """
    fmt = sniff_format(data)
    if fmt is None:
        raise ApiError(415, "unsupported_media_type",
                       f"{name} is not an image in a supported format ({', '.join(SUPPORTED_FORMATS)})")
    if fmt == "png":
        if len(data) < 24 or data[12:16] != b"IHDR":
            raise _malformed(name, fmt, "no IHDR chunk")
        width, height = struct.unpack(">II", data[16:24])
    elif fmt == "jpeg":
        width, height = _jpeg_size(data, name)
    elif fmt == "webp":
        width, height = _webp_size(data, name)
    else:
        if len(data) < 26:
            raise _malformed(name, fmt, "truncated")
        header_size = struct.unpack("<I", data[14:18])[0]
        if header_size == 12:  # OS/2 BITMAPCOREHEADER: unsigned 16-bit, as OpenCV reads them
            width, height = struct.unpack("<HH", data[18:22])
        else:  # BITMAPINFOHEADER and later: signed 32-bit (a negative height is a top-down image)
            width, height = struct.unpack("<ii", data[18:26])
            width, height = abs(width), abs(height)
    if width <= 0 or height <= 0:
        raise _malformed(name, fmt, f"size {width}x{height}")
    return ImageHeader(fmt, int(width), int(height))


def _jpeg_size(data: bytes, name: str) -> tuple[int, int]:
    pos = 2
    n = len(data)
    while pos < n:
        if data[pos] != 0xFF:
            raise _malformed(name, "jpeg", f"expected a marker at byte {pos}")
        while pos < n and data[pos] == 0xFF:  # fill bytes
            pos += 1
        if pos >= n:
            break
        marker = data[pos]
        pos += 1
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:  # no length
            continue
        if marker in (0xD9, 0xDA):
            break
        if pos + 2 > n:
            break
        length = struct.unpack(">H", data[pos:pos + 2])[0]
        if length < 2:
            raise _malformed(name, "jpeg", "segment length below 2")
        if marker in _JPEG_SOF:
            if pos + 7 > n:
                break
            height, width = struct.unpack(">HH", data[pos + 3:pos + 7])
            return width, height
        pos += length
    raise _malformed(name, "jpeg", "no frame header (SOF) before the image data")


def _webp_size(data: bytes, name: str) -> tuple[int, int]:
    chunk = data[12:16]
    if chunk == b"VP8X" and len(data) >= 30:
        width = 1 + int.from_bytes(data[24:27], "little")
        height = 1 + int.from_bytes(data[27:30], "little")
        return width, height
    if chunk == b"VP8 " and len(data) >= 30 and data[23:26] == b"\x9d\x01\x2a":
        width, height = struct.unpack("<HH", data[26:30])
        return width & 0x3FFF, height & 0x3FFF
    if chunk == b"VP8L" and len(data) >= 25 and data[20] == 0x2F:
        bits = int.from_bytes(data[21:25], "little")
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    raise _malformed(name, "webp", "no VP8/VP8L/VP8X header")


def check_image(data: bytes, name: str, max_pixels: int) -> ImageHeader:
    """The image's header after the size checks: 415/422 as above, 413 over ``max_pixels``."""
    if not data:
        raise ApiError(422, "invalid_image", f"{name} is empty")
    header = read_image_header(data, name)
    if header.pixels > max_pixels:
        raise ApiError(413, "image_too_large",
                       f"{name} is {header.width}x{header.height} = {header.pixels} pixels, over the limit of "
                       f"{max_pixels} pixels")
    return header


# ------------------------------------------------------------------ in-flight
class Overloaded(ApiError):
    """The ingress is at its in-flight limit."""

    def __init__(self, limit: int, retry_after_s: int) -> None:
        super().__init__(503, "overloaded",
                         f"the service is at its limit of {limit} requests in flight; retry later",
                         {"Retry-After": str(retry_after_s)})


class InflightLimiter:
    """Admit at most ``limit`` requests at once; the next one is refused at once (no queue).

    Used from one event loop (the ingress replica's); no lock needed.
    """

    def __init__(self, limit: int, retry_after_s: int) -> None:
        self.limit = limit
        self.retry_after_s = retry_after_s
        self.inflight = 0
        self.peak = 0

    @contextmanager
    def slot(self) -> Iterator[None]:
        if self.inflight >= self.limit:
            raise Overloaded(self.limit, self.retry_after_s)
        self.inflight += 1
        self.peak = max(self.peak, self.inflight)
        try:
            yield
        finally:
            self.inflight -= 1


async def wait_for(awaitable, timeout_s: float, stage: str):  # type: ignore[no-untyped-def]
    """Await ``awaitable`` for at most ``timeout_s``; 504 naming the stage when it takes longer."""
    async def _await():  # type: ignore[no-untyped-def]
        return await awaitable

    try:
        return await asyncio.wait_for(_await(), timeout_s)
    except asyncio.TimeoutError as exc:
        cancel = getattr(awaitable, "cancel", None)
        if callable(cancel):
            cancel()
        raise ApiError(504, "stage_timeout", f"the {stage} stage did not answer within {timeout_s:g} s") from exc
