"""Read tasks called directly (no Ray): a unit that cannot be decoded yields one failure row."""

from fractions import Fraction

import pytest

from fusion_ray.errors import VideoError
from fusion_ray.pipeline import datasource
from fusion_ray.pipeline.datasource import ReadUnit, read_unit
from fusion_ray.video import make_test_video, plan_segments


@pytest.fixture
def unit(tmp_path):
    clip = make_test_video(tmp_path / "clip.mp4", face_image=None, n_frames=6, fps=Fraction(25), size_wh=(64, 48),
                           audio=False)
    return ReadUnit(3, str(clip), "s0", plan_segments(clip, 100.0)[0], (48, 64))


def _rows(unit, block_frames=4):
    blocks = [b.to_pydict() for b in read_unit(unit, block_frames)]
    return [{k: b[k][i] for k in ("item", "index", "error")} for b in blocks for i in range(len(b["index"]))]


def test_a_unit_is_read_into_blocks(unit):
    rows = _rows(unit)
    assert [r["index"] for r in rows] == list(range(6)) and all(r["error"] == "" for r in rows)


@pytest.mark.parametrize("exc", [ValueError("unsupported pixel format 'yuv444p12le'"), RuntimeError("odd decoder"),
                                 VideoError("clip.mp4: corrupt")])
def test_any_decode_error_fails_only_the_unit(unit, monkeypatch, exc):
    def decode(path, segment, threads):
        yield from []
        raise exc

    monkeypatch.setattr(datasource, "decode_segment", decode)
    rows = _rows(unit)
    assert len(rows) == 1 and rows[0]["item"] == 3 and rows[0]["index"] == -1
    assert rows[0]["error"].startswith("read: ") and str(exc) in rows[0]["error"]


def test_frames_before_the_error_are_kept(unit, monkeypatch):
    real = datasource.decode_segment

    def decode(path, segment, threads):
        for n, frame in enumerate(real(path, segment, threads=threads)):
            if n == 5:
                raise ValueError("bad frame")
            yield frame

    monkeypatch.setattr(datasource, "decode_segment", decode)
    rows = _rows(unit)
    assert [r["index"] for r in rows] == [0, 1, 2, 3, 4, -1]
    assert rows[-1]["error"] == "read: ValueError: bad frame"
