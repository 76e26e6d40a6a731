"""Sequence numbers drawn into frames survive real H.264 and VP8 encodes at 640x360 (PyAV)."""

from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pytest

from fusion_ray.bench.live import make_clip
from fusion_ray.errors import InputError
from fusion_ray.imageio import read_image
from fusion_ray.live.stamp import read_stamp, stamp

SEQS = [0, 1, 2, 255, 256, 4097, 30000, 65535, 65536 + 7, 12345, 54321, 43690]


@pytest.fixture(scope="module")
def clip(images_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> list[np.ndarray]:
    face = read_image(images_dir / "obama.jpg").frame
    return make_clip(face, tmp_path_factory.mktemp("stamp") / "clip.mp4", n_frames=len(SEQS))


def _through_codec(frames: list[np.ndarray], codec: str, bit_rate: int) -> list[np.ndarray]:
    """Encode then decode ``frames`` with ``codec`` (WebRTC-like: low latency, low bitrate)."""
    encoder = av.CodecContext.create(codec, "w")
    encoder.width, encoder.height = frames[0].shape[1], frames[0].shape[0]
    encoder.pix_fmt = "yuv420p"
    encoder.bit_rate = bit_rate
    encoder.time_base = Fraction(1, 30)
    encoder.framerate = Fraction(30)
    encoder.options = {"tune": "zerolatency"} if codec == "libx264" else {"deadline": "realtime", "cpu-used": "8"}
    decoder = av.CodecContext.create("h264" if codec == "libx264" else "vp8", "r")
    packets = []
    for i, image in enumerate(frames):
        frame = av.VideoFrame.from_ndarray(image, format="bgr24")
        frame.pts = i
        packets.extend(encoder.encode(frame))
    packets.extend(encoder.encode(None))
    return [f.to_ndarray(format="bgr24") for p in packets for f in decoder.decode(p)]


@pytest.mark.parametrize(("codec", "bit_rate"), [("libx264", 500_000), ("libvpx", 250_000)])
def test_stamps_survive_a_webrtc_bitrate_encode(clip: list[np.ndarray], codec: str, bit_rate: int) -> None:
    stamped = [stamp(frame.copy(), seq) for frame, seq in zip(clip, SEQS, strict=True)]
    decoded = _through_codec(stamped, codec, bit_rate)
    assert len(decoded) == len(SEQS)
    assert [read_stamp(frame) for frame in decoded] == [seq % 65536 for seq in SEQS]


def test_an_unstamped_or_small_frame_reads_none(clip: list[np.ndarray]) -> None:
    assert read_stamp(clip[0]) is None
    assert read_stamp(np.zeros((360, 640, 3), np.uint8)) is None
    assert read_stamp(np.zeros((20, 100, 3), np.uint8)) is None
    with pytest.raises(InputError):
        stamp(np.zeros((20, 100, 3), np.uint8), 1)


def test_stamp_reads_on_gray_frames_too() -> None:
    frame = stamp(np.full((360, 640, 3), 128, np.uint8), 777)
    assert read_stamp(frame) == 777 and read_stamp(frame[:, :, 0]) == 777
