import tracemalloc

import cv2
import numpy as np
import pytest

from fusion_ray.errors import InputError, OutputExistsError
from fusion_ray.imageio import (
    decode_image,
    encode_image,
    read_image,
    read_jpeg_comments,
    read_png_text,
    to_bgr_uint8,
    write_bytes_atomic,
)


def _png(image):
    return cv2.imencode(".png", image)[1].tobytes()


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
    (_png(np.zeros((4, 4, 3), np.uint8))[:30], "not an image"),
])
def test_decode_rejects_non_images(data, message):
    with pytest.raises(InputError, match=message):
        decode_image(data)


def test_pixel_cap():
    with pytest.raises(InputError, match="over the limit"):
        decode_image(_png(np.zeros((100, 100, 3), np.uint8)), max_pixels=5000)


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
