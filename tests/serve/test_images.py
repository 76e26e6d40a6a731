"""Checking an uploaded image before decoding it: its header (format, size), the pixel cap, and
what is refused (415 not an image or animated, 422 broken)."""

from __future__ import annotations

import struct

import cv2
import numpy as np
import pytest

from fusion_ray.imageheader import read_image_header
from fusion_ray.serve.images import check_image
from fusion_ray.serve.limits import ApiError
from tests.serve.helpers import forged_png


@pytest.mark.parametrize("ext,fmt", [(".png", "png"), (".jpg", "jpeg"), (".webp", "webp"), (".bmp", "bmp")])
@pytest.mark.parametrize("width,height", [(37, 23), (640, 1)])
def test_header_size_matches_the_decoder(ext, fmt, width, height):
    image = np.random.default_rng(0).integers(0, 255, (height, width, 3), dtype=np.uint8)
    ok, data = cv2.imencode(ext, image)
    assert ok
    header = read_image_header(data.tobytes())
    assert (header.format, header.width, header.height) == (fmt, width, height)


def test_webp_lossless_header():
    image = np.zeros((19, 45, 3), np.uint8)
    ok, data = cv2.imencode(".webp", image, [cv2.IMWRITE_WEBP_QUALITY, 101])  # >100: lossless (VP8L)
    assert ok and data.tobytes()[12:16] == b"VP8L"
    header = read_image_header(data.tobytes())
    assert (header.format, header.width, header.height) == ("webp", 45, 19)


def test_jpeg_header_of_a_real_photo(images_dir):
    header = read_image_header((images_dir / "biden.jpg").read_bytes())
    assert (header.format, header.width, header.height) == ("jpeg", 970, 2204)


def test_pixel_cap_rejects_a_bomb_header_without_decoding():
    with pytest.raises(ApiError) as err:
        check_image(forged_png(100_000, 100_000), "target", max_pixels=24_000_000)
    assert err.value.status == 413 and "100000x100000" in err.value.detail


def core_bmp(width: int, height: int, pixels: bool = True) -> bytes:
    """A 24-bit BMP with the 12-byte OS/2 BITMAPCOREHEADER (16-bit width and height)."""
    body = b"\x00" * (((width * 3 + 3) & ~3) * height) if pixels else b""
    offset = 14 + 12
    return (b"BM" + struct.pack("<IHHI", offset + len(body), 0, 0, offset)
            + struct.pack("<IHHHH", 12, width, height, 1, 24) + body)


def test_os2_bmp_sizes_are_unsigned_like_the_decoder():
    data = core_bmp(0xFFFF, 1)
    decoded = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_UNCHANGED)
    assert decoded is not None and decoded.shape[:2] == (1, 0xFFFF)
    header = read_image_header(data)
    assert (header.format, header.width, header.height) == ("bmp", 0xFFFF, 1)
    with pytest.raises(ApiError) as err:
        check_image(core_bmp(0xFFFF, 0xFFFF, pixels=False), "target", max_pixels=24_000_000)
    assert err.value.status == 413 and "65535x65535" in err.value.detail


@pytest.mark.parametrize("data,status", [
    (b"hello, I am text", 415),
    (b"%PDF-1.7 ...", 415),
    (b"\x89PNG\r\n\x1a\n\x00\x00", 422),              # PNG without IHDR
    (b"\xff\xd8\xff\xe0\x00\x10JFIF\x00" + b"\x00" * 8, 422),  # JPEG without SOF
    (b"", 422),
])
def test_bad_images_get_415_or_422(data, status):
    with pytest.raises(ApiError) as err:
        check_image(data, "target", max_pixels=10**9)
    assert err.value.status == status
    assert set(err.value.body()) == {"error", "detail"}


@pytest.mark.parametrize("fmt", ["WEBP", "PNG"])
def test_an_animated_upload_is_415_not_its_first_frame(fmt):
    import io

    from PIL import Image

    frames = [Image.fromarray(np.full((8, 8, 3), level, np.uint8)) for level in (0, 128, 255)]
    buffer = io.BytesIO()
    frames[0].save(buffer, fmt, save_all=True, append_images=frames[1:], duration=50)
    with pytest.raises(ApiError) as err:
        check_image(buffer.getvalue(), "target image", max_pixels=10**6)
    assert err.value.status == 415
    assert f"target image is an animated {fmt} of 3 frames" in err.value.body()["detail"]
