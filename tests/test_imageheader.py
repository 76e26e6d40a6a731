"""The header reader's alpha and bit-depth fields (Pillow's plugins, no decoding)."""

from __future__ import annotations

import io

import cv2
import numpy as np
import pytest
from PIL import Image

from fusion_ray.imageheader import gif_canvas, read_image_header


def _cv(ext: str, shape: tuple[int, ...], dtype: type) -> bytes:
    ok, data = cv2.imencode(ext, np.zeros(shape, dtype))
    assert ok
    return data.tobytes()


def _pil_png(mode: str, **save: object) -> bytes:
    buffer = io.BytesIO()
    Image.new(mode, (4, 4)).save(buffer, "PNG", **save)
    return buffer.getvalue()


@pytest.mark.parametrize(("data", "alpha", "deep"), [
    (_cv(".png", (4, 4, 3), np.uint8), False, False),
    (_cv(".png", (4, 4), np.uint8), False, False),
    (_cv(".png", (4, 4, 3), np.uint16), False, True),   # 48-bit RGB: Pillow's mode says RGB
    (_cv(".png", (4, 4), np.uint16), False, True),
    (_cv(".png", (4, 4, 4), np.uint8), True, False),
    (_cv(".png", (4, 4, 4), np.uint16), True, True),
    (_pil_png("P", transparency=0), True, False),       # a tRNS chunk
    (_pil_png("RGB", transparency=(0, 0, 0)), True, False),
    (_cv(".jpg", (4, 4, 3), np.uint8), False, False),
    (_cv(".webp", (4, 4, 3), np.uint8), False, False),
    (_cv(".webp", (4, 4, 4), np.uint8), True, False),
], ids=["rgb8", "grey8", "rgb16", "grey16", "rgba8", "rgba16", "palette_trns", "rgb_trns", "jpeg", "webp",
        "webp_alpha"])
def test_alpha_and_deep_samples_come_from_the_header(data, alpha, deep):
    header = read_image_header(data)
    assert (header.alpha, header.deep) == (alpha, deep)
    assert header.may_lose_in_8_bit == (alpha or deep)


def test_a_gif_canvas_is_grown_by_its_later_frames():
    """Pillow grows a GIF's canvas for a frame past its screen: the canvas is read from every
    frame's descriptor, not only the screen (a 16x16 screen, then 9000x9000 frames)."""
    from tests.bombs import gif_bomb, small_gif

    assert gif_canvas(gif_bomb(4)) == (9000, 9000)
    assert gif_canvas(small_gif(size=(24, 16))) == (24, 16)
    assert gif_canvas(b"\x89PNG\r\n\x1a\n") is None
    assert gif_canvas(gif_bomb(4)[:40]) == (16, 16)  # truncated: the frames it holds


def _with_chunk_before_iend(png: bytes, name: bytes, payload: bytes) -> bytes:
    import zlib

    end = png.rindex(b"IEND") - 4
    chunk = len(payload).to_bytes(4, "big") + name + payload + zlib.crc32(name + payload).to_bytes(4, "big")
    return png[:end] + chunk + png[end:]


@pytest.mark.parametrize("orientation", [None, 6])
def test_a_png_header_is_read_without_decoding_its_pixels_even_with_its_exif_after_them(orientation, monkeypatch):
    from PIL import PngImagePlugin

    png = _cv(".png", (40, 30, 3), np.uint8)
    if orientation is not None:  # an eXIf chunk after the pixels, where cameras and editors may put it
        exif = Image.Exif()
        exif[0x0112] = orientation
        png = _with_chunk_before_iend(png, b"eXIf", exif.tobytes())

    decodes = []
    load = PngImagePlugin.PngImageFile.load

    def counted(self):  # type: ignore[no-untyped-def]
        decodes.append(1)
        return load(self)

    monkeypatch.setattr(PngImagePlugin.PngImageFile, "load", counted)
    header = read_image_header(png)
    assert (header.width, header.height, header.orientation) == (30, 40, orientation or 1)
    assert not decodes, "the header read decoded the pixels"


def _png_with(info: object) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (40, 30)).save(buffer, "PNG", pnginfo=info)
    return buffer.getvalue()


def test_a_png_orientation_in_xmp_or_in_a_raw_exif_profile_is_read_as_pillow_reads_it():
    from PIL import PngImagePlugin

    xmp = PngImagePlugin.PngInfo()
    xmp.add_itxt("XML:com.adobe.xmp", '<x:xmpmeta><rdf:Description tiff:Orientation="6"/></x:xmpmeta>')
    exif = Image.Exif()
    exif[0x0112] = 8
    raw = exif.tobytes()
    profile = PngImagePlugin.PngInfo()  # ImageMagick's way: the EXIF as hex in a text chunk
    profile.add_text("Raw profile type exif", f"\nexif\n{len(raw):8d}\n{raw.hex()}\n")
    assert read_image_header(_png_with(xmp)).orientation == 6
    assert read_image_header(_png_with(profile)).orientation == 8


def test_a_damaged_png_chunk_list_reads_as_no_exif():
    from fusion_ray.imageheader import png_chunk

    png = _png_with(None)
    huge = png[:8] + (2**32 - 1).to_bytes(4, "big") + png[12:]
    assert png_chunk(huge, b"eXIf") is None
    assert png_chunk(png[:20], b"eXIf") is None
    assert png_chunk(b"not a png", b"eXIf") is None
