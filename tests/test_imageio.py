import io
import resource
import struct
import subprocess
import sys
import textwrap
import tracemalloc
import zlib

import cv2
import numpy as np
import pytest

from fusion_ray.errors import InputError, OutputExistsError
from fusion_ray.imageheader import ImageTooLargeError
from fusion_ray.imageio import (
    check_header,
    decode_image,
    encode_image,
    format_changes,
    read_image,
    read_jpeg_comments,
    read_png_text,
    to_bgr_uint8,
    write_bytes_atomic,
)


def _png(image):
    return cv2.imencode(".png", image)[1].tobytes()


def _chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def huge_png(width: int, height: int) -> bytes:
    """A valid black RGB PNG of width x height pixels, a few MB whatever its size, made in milliseconds.

    Each zero row is deflated after a full flush (which resets the compressor), so every row
    after the first compresses to the same bytes; the Adler-32 of n zero bytes is n << 16 | 1.
    """
    row = bytes(1 + 3 * width)  # filter byte + RGB
    comp = zlib.compressobj(9)
    first = comp.compress(row) + comp.flush(zlib.Z_FULL_FLUSH)
    again = comp.compress(row) + comp.flush(zlib.Z_FULL_FLUSH)
    adler = ((len(row) * height % 65521) << 16) | 1
    idat = first + again * (height - 1) + b"\x03\x00" + struct.pack(">I", adler)  # final empty block
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", ihdr) + _chunk(b"IDAT", idat) + _chunk(b"IEND", b"")


MEMORY_LIMIT = 2 << 30
"""Address-space limit of the huge-image tests: a decode of the huge PNG needs 3.2 GB."""


def limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def test_huge_png_is_a_valid_png():
    small = huge_png(37, 23)
    image = cv2.imdecode(np.frombuffer(small, np.uint8), cv2.IMREAD_UNCHANGED)
    assert image.shape == (23, 37, 3) and not image.any()
    assert len(huge_png(32768, 32767)) < 5_000_000


def test_a_huge_image_is_refused_from_its_header_under_a_memory_limit(tmp_path):
    path = tmp_path / "huge.png"
    path.write_bytes(huge_png(32768, 32767))
    code = textwrap.dedent(f"""
        from fusion_ray.errors import InputError
        from fusion_ray.imageio import read_image
        try:
            read_image({str(path)!r})
        except InputError as exc:
            print(type(exc).__name__, exc)
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          preexec_fn=limit_memory)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == (f"ImageTooLargeError {path} is 32768x32767 = 1073709056 pixels, "
                                   "over the limit of 100000000 pixels")


@pytest.mark.parametrize("image,dtype,channels,has_alpha", [
    (np.full((8, 9), 200, np.uint8), "uint8", 1, False),
    (np.full((8, 9, 3), 200, np.uint8), "uint8", 3, False),
    (np.full((8, 9, 4), 200, np.uint8), "uint8", 4, True),
    (np.full((8, 9, 3), 200 * 257, np.uint16), "uint16", 3, False),
    (np.full((8, 9), 200 * 257, np.uint16), "uint16", 1, False),
])
def test_decode_formats_to_bgr_uint8(image, dtype, channels, has_alpha):
    loaded = decode_image(_png(image))
    assert loaded.frame.shape == (8, 9, 3) and loaded.frame.dtype == np.uint8
    assert (loaded.frame == 200).all()
    assert loaded.source_dtype == dtype and loaded.source_channels == channels
    assert (loaded.alpha is not None) == has_alpha


@pytest.mark.parametrize("channels", [1, 2, 3, 4])
def test_16_bit_rounds_every_value_like_rint(channels):
    values = np.arange(65536, dtype=np.uint16).reshape(256, 256)
    image = np.repeat(values[..., None], channels, axis=2) if channels > 1 else values
    frame, alpha = to_bgr_uint8(image)
    expected = np.rint(values.astype(np.float64) / 257.0).astype(np.uint8)
    assert frame.dtype == np.uint8 and frame.shape == (256, 256, 3)
    assert all(np.array_equal(frame[..., c], expected) for c in range(3))
    assert (alpha is not None) == (channels in (2, 4))
    if alpha is not None:
        assert np.array_equal(alpha, expected)


def test_16_bit_conversion_has_no_float_temporaries():
    image = np.full((500, 600, 3), 1000, np.uint16)
    tracemalloc.start()
    try:
        frame, _ = to_bgr_uint8(image)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 2 * frame.nbytes  # the uint8 output and little else (float32 copies are 4x each)


@pytest.mark.parametrize("data,message", [
    (b"", "empty"),
    (b"hello, not an image", "not an image"),
    (_png(np.zeros((4, 4, 3), np.uint8))[:30], "malformed PNG header"),  # the header is read first
    (b"#?RADIANCE\n" + b"\x00" * 64, "not an image"),  # cv2 reads HDR, but no header reader knows it
])
def test_decode_rejects_non_images(data, message):
    with pytest.raises(InputError, match=message):
        decode_image(data)


def test_pixel_cap():
    with pytest.raises(InputError, match="over the limit"):
        decode_image(_png(np.zeros((100, 100, 3), np.uint8)), max_pixels=5000)


@pytest.mark.parametrize("ext", [".tif", ".ppm", ".png", ".jpg", ".webp", ".bmp"])
def test_the_pixel_cap_reads_every_accepted_format_from_its_header(ext):
    data = cv2.imencode(ext, np.zeros((100, 100, 3), np.uint8))[1].tobytes()
    assert decode_image(data, max_pixels=10_000).frame.shape == (100, 100, 3)
    with pytest.raises(ImageTooLargeError, match="100x100 = 10000 pixels, over the limit of 5000"):
        decode_image(data, max_pixels=5000)


def test_read_image_errors(tmp_path):
    with pytest.raises(InputError, match="file not found"):
        read_image(tmp_path / "missing.png")
    with pytest.raises(InputError, match="not a file"):
        read_image(tmp_path)


def test_png_metadata_and_alpha_round_trip():
    frame = np.full((6, 7, 3), 10, np.uint8)
    alpha = np.full((6, 7), 99, np.uint8)
    data = encode_image(frame, ".png", alpha=alpha, metadata={"Software": "fusion_ray", "Comment": "stand-in"})
    assert read_png_text(data) == {"Software": "fusion_ray", "Comment": "stand-in"}
    back = decode_image(data)
    assert np.array_equal(back.frame, frame) and np.array_equal(back.alpha, alpha)


def test_jpeg_comment():
    data = encode_image(np.zeros((8, 8, 3), np.uint8), ".jpg", metadata={"Software": "fusion_ray"})
    assert read_jpeg_comments(data) == ["Software=fusion_ray"]
    assert decode_image(data).frame.shape == (8, 8, 3)


def test_atomic_write_refuses_to_overwrite(tmp_path):
    out = tmp_path / "o.png"
    write_bytes_atomic(out, b"one")
    with pytest.raises(OutputExistsError):
        write_bytes_atomic(out, b"two")
    write_bytes_atomic(out, b"two", force=True)
    assert out.read_bytes() == b"two"
    assert [p.name for p in tmp_path.iterdir()] == ["o.png"]  # no temp files left


def test_format_changes_name_what_an_output_loses():
    assert format_changes(decode_image(_png(np.full((4, 4, 3), 9, np.uint8))), ".png") == []
    deep = decode_image(_png(np.full((4, 4, 4), 900, np.uint16)))
    assert format_changes(deep, ".png") == ["16-bit image written as 8-bit"]
    assert format_changes(deep, ".JPG") == ["16-bit image written as 8-bit", "alpha channel dropped: .jpg has none"]


def sideways_jpeg(upright_bgr: np.ndarray, orientation: int = 6, quality: int = 95) -> bytes:
    """A JPEG whose stored pixels are ``upright_bgr`` turned so that its EXIF ``orientation``
    (6: a camera held sideways) displays it upright again."""
    from PIL import Image, ImageOps

    exif = Image.Exif()
    exif[0x0112] = orientation
    # the transpose that undoes `orientation`'s display turn (6 shows the stored pixels turned clockwise)
    undo = {3: Image.Transpose.ROTATE_180, 6: Image.Transpose.ROTATE_90, 8: Image.Transpose.ROTATE_270}[orientation]
    stored = Image.fromarray(np.ascontiguousarray(upright_bgr[..., ::-1])).transpose(undo)
    buffer = io.BytesIO()
    stored.save(buffer, "JPEG", exif=exif, quality=quality)
    data = buffer.getvalue()
    shown = np.asarray(ImageOps.exif_transpose(Image.open(io.BytesIO(data))))
    assert shown.shape == upright_bgr.shape  # what a viewer shows is upright
    return data


@pytest.mark.parametrize("orientation", range(1, 9))
def test_the_exif_orientation_is_applied_on_read_as_viewers_do(orientation):
    from PIL import Image, ImageOps

    stored = np.random.default_rng(orientation).integers(0, 255, (30, 50, 4), np.uint8)
    exif = Image.Exif()
    exif[0x0112] = orientation
    buffer = io.BytesIO()
    Image.fromarray(stored, "RGBA").save(buffer, "PNG", exif=exif)  # lossless: pixels compare exactly
    data = buffer.getvalue()
    shown = np.asarray(ImageOps.exif_transpose(Image.open(io.BytesIO(data))))
    loaded = decode_image(data)
    assert np.array_equal(loaded.frame, shown[..., 2::-1]) and np.array_equal(loaded.alpha, shown[..., 3])
    assert check_header(data).upright_hw == shown.shape[:2]
    assert loaded.orientation == orientation
    changes = format_changes(loaded, ".png")
    assert changes == ([] if orientation == 1 else
                       [f"EXIF orientation {orientation} applied: written upright, with no orientation tag"])


def test_a_sideways_jpeg_is_read_upright():
    upright = np.zeros((40, 60, 3), np.uint8)
    upright[:10] = 255  # a white band at the top
    loaded = decode_image(sideways_jpeg(upright))
    assert loaded.frame.shape == (40, 60, 3) and loaded.frame[:10].mean() > 240 and loaded.frame[20:].mean() < 15
