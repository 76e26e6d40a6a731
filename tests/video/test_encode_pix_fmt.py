"""Frame sizes and pixel formats: any size encodes and joins at its own size; the encoder's pixel
format follows the size and the source's format unless set; check_encodable() refuses what it cannot hold."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from fusion_ray.errors import VideoError
from fusion_ray.video import (
    EncodeOptions,
    check_encodable,
    decode_all,
    encode_segment,
    encoder_pix_fmt,
    join_segments,
    pix_fmt_change,
    probe,
)

from .helpers import psnr


@pytest.mark.parametrize("size_wh", [(1, 1), (641, 361), (4096, 2160), (360, 640), (320, 181)])
def test_any_frame_size_encodes_and_joins_at_its_own_size(size_wh: tuple[int, int], tmp_path: Path) -> None:
    width, height = size_wh
    ys, xs = np.mgrid[0:height, 0:width]
    frames = [np.dstack([(xs * 200 // width + 20 * i), (ys * 200 // height), np.full_like(xs, 90 + 30 * i)]
                        ).astype(np.uint8) for i in range(3)]  # smooth gradients: 4:2:0 keeps them well
    options = EncodeOptions(preset="ultrafast", crf=10)
    segments = []
    for k in range(2):
        segments.append(tmp_path / f"seg{k}.mp4")
        assert encode_segment(iter(frames), segments[-1], fps=Fraction(25), width=width, height=height,
                              options=options) == 3
    out = tmp_path / "out.mp4"
    join_segments(segments, out, fps=Fraction(25))
    info = probe(out)
    assert (info.width, info.height, info.frame_count) == (width, height, 6)
    assert info.pix_fmt == ("yuv420p" if width % 2 == 0 and height % 2 == 0 else "yuv444p")
    back = [f.frame for f in decode_all(out)]
    assert all(b.shape == (height, width, 3) for b in back)
    if width * height > 1:
        assert min(psnr(a, b) for a, b in zip(frames * 2, back, strict=True)) > 25.0


def test_encoder_pix_fmt_follows_the_size_unless_set() -> None:
    auto = EncodeOptions()
    assert auto.pix_fmt == "auto"
    assert encoder_pix_fmt(auto, 640, 360) == "yuv420p"
    assert encoder_pix_fmt(auto, 641, 360) == encoder_pix_fmt(auto, 640, 361) == "yuv444p"
    assert encoder_pix_fmt(EncodeOptions(pix_fmt="yuv444p"), 640, 360) == "yuv444p"


@pytest.mark.parametrize(("source", "size", "chosen", "change"), [
    ("yuv420p", (640, 360), "yuv420p", None),
    ("yuvj420p", (640, 360), "yuv420p", None),
    ("yuv444p", (640, 360), "yuv444p", None),                    # its full chroma is kept
    ("gbrp", (640, 360), "yuv444p", None),                       # RGB (e.g. lossless screen captures)
    ("yuv422p", (640, 360), "yuv420p", "yuv422p video written as yuv420p: 4:2:2 chroma becomes 4:2:0"),
    ("yuv420p10le", (640, 360), "yuv420p",
     "yuv420p10le video written as yuv420p: 10-bit samples become 8-bit"),
    ("yuv444p10le", (641, 361), "yuv444p",
     "yuv444p10le video written as yuv444p: 10-bit samples become 8-bit"),
    ("yuv420p", (641, 360), "yuv444p", None),
    ("gray", (640, 360), "yuv420p", None),
    ("not-a-format", (640, 360), "yuv420p", None),
])
def test_the_pixel_format_is_chosen_from_the_source(source, size, chosen, change) -> None:
    assert encoder_pix_fmt(EncodeOptions(), *size, source) == chosen
    assert check_encodable(*size, EncodeOptions(), source) == chosen
    assert pix_fmt_change(source, chosen) == change


def test_check_encodable_refuses_a_size_the_chosen_format_cannot_hold() -> None:
    assert check_encodable(641, 361, EncodeOptions()) == "yuv444p"
    assert check_encodable(4096, 2160, EncodeOptions()) == "yuv420p"
    with pytest.raises(VideoError, match=r"cannot encode 641x361 frames as yuv420p with libx264: .*even"):
        check_encodable(641, 361, EncodeOptions(pix_fmt="yuv420p"))
    with pytest.raises(VideoError, match="cannot encode 640x360 frames as nonsense"):
        check_encodable(640, 360, EncodeOptions(pix_fmt="nonsense"))
