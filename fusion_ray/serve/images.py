"""Uploaded images: header checks (the shared :mod:`fusion_ray.imageheader` reader) and decoding.

The one place where image errors become HTTP answers: not an image in a supported format,
or an animated one (its other frames would be lost), 415, a malformed header or undecodable
pixels 422, more pixels than ``limits.max_pixels`` 413 (read from the header, before any
pixel is decoded).
"""

from __future__ import annotations

from fusion_ray.errors import InputError
from fusion_ray.imageheader import (
    ImageHeader,
    ImageTooLargeError,
    UnsupportedImageError,
    check_image_header,
)
from fusion_ray.imageio import LoadedImage, decode_image
from fusion_ray.serve.limits import ApiError

__all__ = ["ImageHeader", "api_error", "check_image", "decode"]


def api_error(exc: InputError) -> ApiError:
    """The HTTP answer to an image error of :mod:`fusion_ray.imageheader`."""
    if isinstance(exc, UnsupportedImageError):
        return ApiError(415, "unsupported_media_type", str(exc))
    if isinstance(exc, ImageTooLargeError):
        return ApiError(413, "image_too_large", str(exc))
    return ApiError(422, "invalid_image", str(exc))  # MalformedImageError, or another input error


def check_image(data: bytes, name: str, max_pixels: int) -> ImageHeader:
    """The image's header after the size check (415/422/413 as above); nothing is decoded."""
    try:
        header = check_image_header(data, name, max_pixels)
    except InputError as exc:
        raise api_error(exc) from exc
    if header.frames > 1:  # its other frames would be lost, silently
        raise ApiError(415, "unsupported_media_type",
                       f"{name} is an animated {header.format.upper()} of {header.frames} frames: the service swaps "
                       "still images (fusion-ray swap and job swap every frame)")
    return header


def decode(data: bytes, header: ImageHeader, name: str, max_pixels: int) -> LoadedImage:
    """Decode an image whose header passed :func:`check_image`; 422 when its pixels cannot be decoded."""
    try:
        return decode_image(data, name, max_pixels)
    except InputError as exc:
        raise ApiError(422, "invalid_image", f"{name} ({header.format}) could not be decoded: {exc}") from exc
