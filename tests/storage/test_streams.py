"""PyAV demuxes a video in a bucket through ``Storage.open_input``: ranged reads, no download."""

from __future__ import annotations

import io
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import numpy as np
import pytest

from fusion_ray.storage import Location, Storage, StorageConfig
from fusion_ray.storage.streams import CountingReader
from fusion_ray.video.synthetic import make_test_video
from tests.s3_server import S3Server

FPS = Fraction(30)


@pytest.fixture(scope="module")
def clip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """15 s at 30 fps, a keyframe every second."""
    return make_test_video(tmp_path_factory.mktemp("clip") / "clip.mp4", face_image=None, n_frames=450,
                           fps=FPS, size_wh=(640, 360), audio=True, gop=30)


def _frames_after(source: Any, seconds: float, count: int) -> list[tuple[int, np.ndarray]]:
    container: Any
    with av.open(source) as container:
        stream = container.streams.video[0]
        container.seek(int(seconds / stream.time_base), stream=stream)
        frames = []
        for frame in container.decode(stream):
            frames.append((int(frame.pts), frame.to_ndarray(format="bgr24")))
            if len(frames) == count:
                return frames
    return frames


def test_pyav_seeks_into_a_video_in_the_bucket_by_ranged_reads(s3_server: S3Server, s3_bucket: str,
                                                                clip: Path) -> None:
    config = s3_server.config().model_copy(update={"read_ahead_bytes": 32 << 10})
    storage = Storage(config)
    loc = Location.parse(f"s3://{s3_bucket}/clips/clip.mp4")
    storage.publish(clip, loc)
    size = clip.stat().st_size
    assert size > 1 << 20

    with storage.open_input(loc) as file:
        raw = file.raw  # type: ignore[attr-defined]
        assert isinstance(raw, CountingReader)
        remote = _frames_after(file, 9.0, 5)
        transferred, requests = raw.bytes_read, raw.reads
    local = _frames_after(str(clip), 9.0, 5)

    assert [pts for pts, _ in remote] == [pts for pts, _ in local] and len(remote) == 5
    assert all(np.array_equal(a, b) for (_, a), (_, b) in zip(remote, local, strict=True))
    # The header, the probe's first packets and the GOP around 9 s: a fraction of the file.
    assert transferred < 0.3 * size, f"{transferred} of {size} bytes read"  # 0.2 measured
    assert "://" not in file.name  # a URI name makes FFmpeg read 2.7x the bytes (streams.py)
    assert requests < 20


def test_reads_are_grouped_by_the_read_ahead_buffer(s3_server: S3Server, s3_bucket: str) -> None:
    storage = Storage(s3_server.config().model_copy(update={"read_ahead_bytes": 1 << 20}))
    loc = Location.parse(f"s3://{s3_bucket}/data.bin")
    storage.write_bytes_atomic(loc, bytes(3 << 20))
    with storage.open_input(loc) as file:
        for _ in range(1000):
            file.read(1024)  # 1000 small reads of a demuxer ...
        assert file.raw.reads == 1  # type: ignore[attr-defined]  # ... are one ranged GET


def test_local_files_open_as_plain_files(tmp_path: Path) -> None:
    path = tmp_path / "a.bin"
    path.write_bytes(b"abc")
    with Storage(StorageConfig()).open_input(path) as file:
        assert isinstance(file, io.BufferedReader) and file.name == str(path) and file.read() == b"abc"
