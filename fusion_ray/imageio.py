"""Reading and writing still images: alpha, greyscale and 16-bit inputs, atomic writes, metadata.

Frames come out as BGR uint8 (the engine's format); alpha is kept aside and re-attached on
write when the output format supports it.
"""

from __future__ import annotations

import dataclasses
import io
import struct
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np
from PIL import Image

from fusion_ray.errors import InputError, OutputExistsError
from fusion_ray.fsutil import atomic_write_bytes, check_input_file, check_writable_dir
from fusion_ray.imageheader import (
    ImageHeader,
    ImageTooLargeError,
    UnsupportedImageError,
    check_image_header,
    gif_canvas,
    header_of,
)
from fusion_ray.types import Frame

DEFAULT_MAX_PIXELS = 100_000_000
"""Largest image accepted (100 MP): a guard against decompression bombs."""
ALPHA_FORMATS = {".png", ".webp", ".tif", ".tiff"}


@dataclass(frozen=True)
class LoadedImage:
    """A decoded image: the BGR uint8 frame, its alpha channel if any, and what it was."""

    frame: Frame
    alpha: np.ndarray | None
    source_dtype: str
    source_channels: int
    orientation: int = 1
    """The EXIF orientation applied on read (1: none): ``frame`` is upright."""


def to_bgr_uint8(image: np.ndarray) -> tuple[Frame, np.ndarray | None]:
    """Convert any decoded image (grey, BGR, BGRA; uint8, uint16, float) to BGR uint8 plus alpha."""
    if image.dtype == np.uint16:
        # round(x / 257) straight to uint8, without float temporaries (those peaked near 40 bytes
        # per pixel on large 16-bit images); identical to np.rint(x / 257) for every uint16 value.
        image = cv2.convertScaleAbs(image, alpha=1 / 257.0)
    elif image.dtype in (np.float32, np.float64):
        image = np.clip(np.rint(image * 255.0), 0, 255).astype(np.uint8)
    elif image.dtype != np.uint8:
        raise InputError(f"unsupported pixel type {image.dtype}")
    if image.ndim == 3 and image.shape[2] == 1:
        image = image[..., 0]
    alpha = None
    if image.ndim == 2:
        frame = cv2.cvtColor(image, cv2.COLOR_GRAY2BGR)
    elif image.ndim == 3 and image.shape[2] == 3:
        frame = image
    elif image.ndim == 3 and image.shape[2] == 4:
        frame, alpha = np.ascontiguousarray(image[..., :3]), np.ascontiguousarray(image[..., 3])
    elif image.ndim == 3 and image.shape[2] == 2:  # grey + alpha
        frame, alpha = cv2.cvtColor(image[..., 0], cv2.COLOR_GRAY2BGR), np.ascontiguousarray(image[..., 1])
    else:
        raise InputError(f"unsupported image layout {image.shape}")
    return np.ascontiguousarray(frame), alpha


def _other_format_header(data: bytes, name: str) -> ImageHeader | None:
    """Size from the header of a format the shared reader does not cover (TIFF, PPM, GIF...).

    Asks Pillow's format plugins directly, as imageheader does: ``Image.open`` would apply
    Pillow's global decompression-bomb limit instead of the caller's.
    """
    Image.init()
    prefix = data[:16]
    for fmt in Image.ID:
        factory, accept = Image.OPEN[fmt]
        if accept is not None and not accept(prefix):
            continue
        try:
            image = factory(io.BytesIO(data), "")
        except Exception:  # noqa: BLE001 - not this format (Pillow's own open does the same)
            continue
        width, height = image.size
        if width > 0 and height > 0:
            header = header_of(fmt.lower(), image, data)
            canvas = gif_canvas(data) if fmt == "GIF" else None
            return header if canvas is None else dataclasses.replace(header, width=canvas[0], height=canvas[1])
    return None


def check_header(data: bytes, name: str = "image", max_pixels: int = DEFAULT_MAX_PIXELS) -> ImageHeader:
    """The image's header, read without decoding pixels; InputError when it is not an image or too large.

    PNG, JPEG, WebP and BMP go through the service's reader (:mod:`fusion_ray.imageheader`);
    other formats Pillow can read a header of are checked the same way; data whose size
    cannot be read from a header is refused (it is never decoded to find out).
    """
    if not data:
        raise InputError(f"{name} is empty")
    try:
        return check_frames_size(check_image_header(data, name, max_pixels), name, max_pixels)
    except UnsupportedImageError:
        canvas = gif_canvas(data)  # before Pillow reads a frame: its own bomb guard would refuse it unnamed
        if canvas is not None and canvas[0] * canvas[1] > max_pixels:
            raise ImageTooLargeError(f"{name} is a GIF whose frames make a canvas of {canvas[0]}x{canvas[1]} = "
                                     f"{canvas[0] * canvas[1]} pixels, over the limit of {max_pixels} pixels") from None
        header = _other_format_header(data, name)
    if header is None:
        raise InputError(f"{name} is not an image (or not a format this build can read)")
    if header.pixels > max_pixels:
        raise ImageTooLargeError(f"{name} is {header.width}x{header.height} = {header.pixels} pixels, "
                                 f"over the limit of {max_pixels} pixels")
    return check_frames_size(header, name, max_pixels)


def check_frames_size(header: ImageHeader, name: str, max_pixels: int) -> ImageHeader:
    """``header`` when its frames together (each the canvas decoded) are at most ``max_pixels``:
    an animation is refused from its header, before any model loads or frame decodes."""
    total = header.pixels * header.frames
    if header.frames > 1 and total > max_pixels:
        raise ImageTooLargeError(f"{name} has {header.frames} frames of {header.width}x{header.height} = {total} "
                                 f"pixels, over the limit of {max_pixels} pixels")
    return header


def decode_image(data: bytes, name: str = "image", max_pixels: int = DEFAULT_MAX_PIXELS) -> LoadedImage:
    """Decode image bytes; InputError when they are not a supported image or too large.

    The size is checked from the header (:func:`check_header`) before any pixel is decoded.
    """
    header = check_header(data, name, max_pixels)
    if header.frames > 1:  # a source, a reference, a detect input: never its first frame silently
        raise InputError(f"{name} is an animated {header.format.upper()} of {header.frames} frames; one picture is "
                         "needed here (a still image)")
    buffer = np.frombuffer(data, np.uint8)
    try:
        image = cv2.imdecode(buffer, cv2.IMREAD_UNCHANGED)
    except cv2.error as exc:
        raise InputError(f"{name} is not a readable image: {exc.msg if hasattr(exc, 'msg') else exc}") from exc
    if image is None:
        raise InputError(f"{name} is not an image (or not a format this build can read)")
    if image.shape[0] * image.shape[1] > max_pixels:
        raise InputError(f"{name} has {image.shape[1]}x{image.shape[0]} pixels, over the limit of {max_pixels}")
    channels = 1 if image.ndim == 2 else int(image.shape[2])
    frame, alpha = to_bgr_uint8(upright(image, header.orientation))  # faces are found upright
    return LoadedImage(frame, alpha, str(image.dtype), channels, header.orientation)


def upright(image: np.ndarray, orientation: int) -> np.ndarray:
    """The stored pixels turned as their EXIF ``orientation`` (1 to 8) says they display: 2 and
    4 mirror, 3 turns half way, 6 and 8 a quarter (clockwise, anticlockwise), 5 and 7 mirror
    across a diagonal. (OpenCV's ``IMREAD_UNCHANGED`` ignores the tag.)"""
    turned = {
        1: image, 2: image[:, ::-1], 3: image[::-1, ::-1], 4: image[::-1],
        5: image.swapaxes(0, 1), 6: image.swapaxes(0, 1)[:, ::-1],
        7: image.swapaxes(0, 1)[::-1, ::-1], 8: image.swapaxes(0, 1)[::-1],
    }[orientation if 1 <= orientation <= 8 else 1]
    return np.ascontiguousarray(turned)


def read_file(path: Path) -> bytes:
    """A local input's bytes; InputError naming what is wrong with it."""
    check_input_file(path)  # missing, a link loop, a folder, a pipe (never opened), empty, unreadable
    try:
        return path.read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror or exc}") from exc


def read_image(path: Path, max_pixels: int = DEFAULT_MAX_PIXELS) -> LoadedImage:
    """Read an image file; InputError naming the file when it is missing or not an image."""
    path = Path(path)
    return decode_image(read_file(path), str(path), max_pixels)


def check_image_file(path: Path, max_pixels: int = DEFAULT_MAX_PIXELS) -> ImageHeader:
    """An image file's header (:func:`check_header`): refuse a bad or huge image before any work."""
    path = Path(path)
    return check_header(read_file(path), str(path), max_pixels)


FORMAT_CHANGES_KEY = "fusion_ray.format_changes"
"""Output metadata key listing what writing the image changed (16-bit to 8-bit, alpha dropped)."""


def format_changes(image: LoadedImage, output_suffix: str) -> list[str]:
    """What writing ``image`` (swapped as BGR uint8) to ``output_suffix``'s format loses."""
    changes = []
    if image.orientation != 1:
        changes.append(f"EXIF orientation {image.orientation} applied: written upright, with no orientation tag")
    if image.source_dtype == "uint16":
        changes.append("16-bit image written as 8-bit")
    elif image.source_dtype.startswith("float"):
        changes.append(f"floating-point ({image.source_dtype}) image written as 8-bit")
    suffix = output_suffix.lower()
    if image.alpha is not None and suffix not in ALPHA_FORMATS:
        changes.append(f"alpha channel dropped: {suffix} has none")
    return changes


def check_writable_image_path(path: Path, force: bool) -> None:
    """Fail early (before any work) when the output exists or its format cannot be written."""
    path = Path(path)
    if path.exists() and not force:
        raise OutputExistsError(f"output exists: {path} (use --force to overwrite)")
    check_image_suffix(path.suffix)
    check_writable_dir(path.parent)


def check_image_suffix(suffix: str) -> None:
    """InputError unless an image can be written with this extension (e.g. not ``.mp4``)."""
    if not suffix or not cv2.haveImageWriter(f"image{suffix}"):
        raise InputError(f"cannot write images with extension {suffix!r}: use .png, .jpg or .webp")


def encode_image(frame: Frame, suffix: str, *, alpha: np.ndarray | None = None,
                 metadata: Mapping[str, str] | None = None, jpeg_quality: int = 95) -> bytes:
    """Encode a frame to ``suffix``'s format, re-attaching alpha where the format keeps it.

    PNG outputs get ``tEXt`` chunks and JPEG outputs a ``COM`` segment with ``metadata``.
    """
    suffix = suffix.lower()
    image = frame
    if alpha is not None and suffix in ALPHA_FORMATS:
        image = np.dstack([frame, alpha])
    params: list[int] = []
    if suffix in (".jpg", ".jpeg"):
        params = [cv2.IMWRITE_JPEG_QUALITY, jpeg_quality]
    ok, encoded = cv2.imencode(suffix, image, params)
    if not ok:
        raise InputError(f"cannot encode an image as {suffix}")
    data = encoded.tobytes()
    if metadata:
        if suffix == ".png":
            data = add_png_text(data, metadata)
        elif suffix in (".jpg", ".jpeg"):
            data = add_jpeg_comment(data, "; ".join(f"{k}={v}" for k, v in metadata.items()))
    return data


def add_png_text(png: bytes, metadata: Mapping[str, str]) -> bytes:
    """Insert ``tEXt`` chunks (Latin-1 keys and values) right after the IHDR chunk."""
    if png[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG stream")
    ihdr_end = 8 + 8 + struct.unpack(">I", png[8:12])[0] + 4
    chunks = b""
    for key, value in metadata.items():
        body = key.encode("latin-1")[:79] + b"\x00" + value.encode("latin-1", "replace")
        chunks += struct.pack(">I", len(body)) + b"tEXt" + body + struct.pack(">I", zlib.crc32(b"tEXt" + body))
    return png[:ihdr_end] + chunks + png[ihdr_end:]


def read_png_text(png: bytes) -> dict[str, str]:
    """The text chunks of a PNG stream (Pillow's reader)."""
    with Image.open(io.BytesIO(png), formats=["PNG"]) as image:
        return {str(key): str(value) for key, value in image.text.items()}  # type: ignore[attr-defined]


def add_jpeg_comment(jpeg: bytes, comment: str) -> bytes:
    """Insert a ``COM`` segment after SOI (and after a JFIF APP0 segment when present)."""
    if jpeg[:2] != b"\xff\xd8":
        raise ValueError("not a JPEG stream")
    pos = 2
    if jpeg[2:4] == b"\xff\xe0":
        pos = 4 + struct.unpack(">H", jpeg[4:6])[0]
    body = comment.encode("utf-8")[:65000]
    segment = b"\xff\xfe" + struct.pack(">H", len(body) + 2) + body
    return jpeg[:pos] + segment + jpeg[pos:]


def read_jpeg_comments(jpeg: bytes) -> list[str]:
    """The ``COM`` segments of a JPEG stream (Pillow's reader)."""
    with Image.open(io.BytesIO(jpeg), formats=["JPEG"]) as image:
        return [body.decode("utf-8", "replace") for marker, body in image.applist  # type: ignore[attr-defined]
                if marker == "COM"]


def write_bytes_atomic(path: Path, data: bytes, *, force: bool = False) -> None:
    """Write to a temporary file beside ``path`` and rename it into place (no partial outputs)."""
    path = Path(path)
    if path.exists() and not force:
        raise OutputExistsError(f"output exists: {path} (use --force to overwrite)")
    try:
        atomic_write_bytes(path, data)
    except OSError as exc:
        raise InputError(f"cannot write {path}: {exc.strerror or exc}") from exc
