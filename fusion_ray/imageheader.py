"""An image's format and size from its header, without decoding pixels (Pillow's format plugins).

One reader for every surface: the image command checks a file's pixel count before decoding
it, and the service checks uploads before they reach the decoder. Pillow's own
``Image.open`` refuses very large images outright (its decompression-bomb guard, a global
setting), so this module asks the format plugins it registers for the header directly and
applies the caller's pixel cap itself.
"""

from __future__ import annotations

import io
from dataclasses import dataclass

from PIL import Image, ImageFile

from fusion_ray.errors import InputError

SUPPORTED_FORMATS = ("png", "jpeg", "webp", "bmp")
_PIL_NAMES = {"png": "PNG", "jpeg": "JPEG", "webp": "WEBP", "bmp": "BMP"}


class UnsupportedImageError(InputError):
    """The bytes are not an image in one of :data:`SUPPORTED_FORMATS` (HTTP 415)."""


class MalformedImageError(InputError):
    """The bytes start like a supported image but its header cannot be read (HTTP 422)."""


class ImageTooLargeError(InputError):
    """The header declares more pixels than allowed (HTTP 413)."""


@dataclass(frozen=True)
class ImageHeader:
    """An image's format, dimensions and Pillow mode, read from its header; ``alpha`` and
    ``deep`` (more than 8 bits per sample) as far as the header tells them."""

    format: str
    width: int
    height: int
    mode: str = ""
    alpha: bool = False
    deep: bool = False
    orientation: int = 1
    """The EXIF orientation (1 to 8; 1 is upright): how the stored pixels turn to display."""
    frames: int = 1
    """Frames of an animated image (GIF, WebP, APNG); 1 for a still one."""

    @property
    def upright_hw(self) -> tuple[int, int]:
        """(height, width) once the EXIF orientation is applied (5 to 8 swap the sides)."""
        return (self.width, self.height) if self.orientation >= 5 else (self.height, self.width)

    @property
    def pixels(self) -> int:
        return self.width * self.height

    @property
    def may_lose_in_8_bit(self) -> bool:
        """Whether writing the image as 8-bit BGR may lose something (alpha, extra bits)."""
        return self.alpha or self.deep


def header_of(fmt: str, image: ImageFile.ImageFile, data: bytes) -> ImageHeader:
    """The header fields of an image Pillow has opened (not decoded); ``data``: the file's bytes
    (where a PNG's EXIF is looked for)."""
    width, height = image.size
    mode = str(image.mode)
    alpha = "A" in mode or "a" in mode or "transparency" in image.info
    raw_modes = [t.args[0] if isinstance(t.args, tuple) else t.args for t in image.tile]
    deep = mode.startswith(("I", "F")) or any(isinstance(r, str) and "16" in r.split(";")[-1] for r in raw_modes)
    return ImageHeader(fmt, int(width), int(height), mode, alpha, deep, exif_orientation(image, data),
                       frame_count(image))


def frame_count(image: Image.Image) -> int:
    """Frames of an animated image from its container (PNG acTL, WebP ANIM); a GIF is scanned."""
    try:
        return max(1, int(getattr(image, "n_frames", 1)))
    except Exception:  # noqa: BLE001 - a damaged later frame: read as a still image, as before
        return 1


ORIENTATION_TAG = 0x0112


def exif_orientation(image: Image.Image, data: bytes) -> int:
    """The image's EXIF orientation tag, 1 (upright) when it has none or a value out of range.

    A PNG may keep its EXIF (an ``eXIf`` chunk) after its pixels, where Pillow's PNG ``getexif``
    decodes the whole image to find it (as long as the decode itself): that chunk is found by
    walking the chunks of ``data`` (the file's bytes); otherwise Pillow's own sources read when the
    file was opened (an ``eXIf`` before the pixels, ImageMagick's raw EXIF profile, XMP's
    ``tiff:Orientation``) answer, without a decode."""
    try:
        raw = png_chunk(data, b"eXIf") if image.format == "PNG" and "exif" not in image.info else None
        if raw is not None:
            exif = Image.Exif()
            exif.load(raw)
            value = exif.get(ORIENTATION_TAG, 1)
        elif image.format == "PNG":
            value = Image.Image.getexif(image).get(ORIENTATION_TAG, 1)  # the base class's: no decode
        else:
            value = image.getexif().get(ORIENTATION_TAG, 1)
    except Exception:  # noqa: BLE001 - a malformed EXIF block is ignored, as viewers do
        return 1
    return value if isinstance(value, int) and 1 <= value <= 8 else 1


PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def png_chunk(data: bytes, kind: bytes) -> bytes | None:
    """The payload of a PNG's first chunk of ``kind``, found by the chunks' lengths without
    reading their contents; None when there is none before ``IEND`` or the data ends."""
    if not data.startswith(PNG_SIGNATURE):
        return None
    pos = len(PNG_SIGNATURE)
    while pos + 8 <= len(data):
        length = int.from_bytes(data[pos:pos + 4], "big")
        name = data[pos + 4:pos + 8]
        if name == kind:
            return data[pos + 8:pos + 8 + length]
        if name == b"IEND":
            return None
        pos += 12 + length  # length, name, payload, CRC
    return None


def gif_canvas(data: bytes) -> tuple[int, int] | None:
    """The canvas a GIF decodes to: its screen, grown to hold every frame (Pillow grows it for a
    frame that reaches past the screen), read from the blocks without decoding a pixel. None
    when ``data`` is not a GIF; a truncated stream gives the canvas of the frames it holds."""
    if data[:6] not in (b"GIF87a", b"GIF89a") or len(data) < 13:
        return None
    width, height = int.from_bytes(data[6:8], "little"), int.from_bytes(data[8:10], "little")
    pos = 13 + (3 << ((data[10] & 7) + 1) if data[10] & 0x80 else 0)
    while pos < len(data):
        block = data[pos]
        if block == 0x21:  # an extension: label, then sub-blocks
            pos = _skip_sub_blocks(data, pos + 2)
        elif block == 0x2C:  # an image: left, top, width, height, flags, [colour table], LZW size, data
            if pos + 10 > len(data):
                break
            left, top, w, h = (int.from_bytes(data[pos + i:pos + i + 2], "little") for i in (1, 3, 5, 7))
            width, height = max(width, left + w), max(height, top + h)
            flags = data[pos + 9]
            pos = _skip_sub_blocks(data, pos + 10 + (3 << ((flags & 7) + 1) if flags & 0x80 else 0) + 1)
        else:  # the trailer (0x3B) or bytes no decoder reads further
            break
    return width, height


def _skip_sub_blocks(data: bytes, pos: int) -> int:
    """The position after the sub-blocks starting at ``pos`` (each a size byte, then that many bytes)."""
    while pos < len(data) and data[pos]:
        pos += data[pos] + 1
    return pos + 1


def read_image_header(data: bytes, name: str = "image") -> ImageHeader:
    """Format and dimensions from the header only; typed errors for other data."""
    if not data:
        raise MalformedImageError(f"{name} is empty")
    Image.init()
    prefix = data[:16]
    for fmt in SUPPORTED_FORMATS:
        factory, accept = Image.OPEN[_PIL_NAMES[fmt]]
        if accept is not None and not accept(prefix):
            continue
        try:
            image = factory(io.BytesIO(data), "")
        except (SyntaxError, OSError, ValueError, EOFError, IndexError) as exc:
            raise MalformedImageError(f"{name}: malformed {fmt.upper()} header ({exc})") from exc
        width, height = image.size
        if width <= 0 or height <= 0:
            raise MalformedImageError(f"{name}: malformed {fmt.upper()} header (size {width}x{height})")
        return header_of(fmt, image, data)
    raise UnsupportedImageError(
        f"{name} is not an image in a supported format ({', '.join(SUPPORTED_FORMATS)})")


def check_image_header(data: bytes, name: str, max_pixels: int) -> ImageHeader:
    """The header after the size check: :class:`ImageTooLargeError` over ``max_pixels``."""
    header = read_image_header(data, name)
    if header.pixels > max_pixels:
        raise ImageTooLargeError(
            f"{name} is {header.width}x{header.height} = {header.pixels} pixels, over the limit of "
            f"{max_pixels} pixels")
    return header
