"""Read tasks called directly (no Ray): a unit that cannot be decoded yields one row marked
``read_failed``; an image's alpha plane travels with its frame."""

from fractions import Fraction

import cv2
import numpy as np
import pytest

from fusion_ray.errors import VideoError
from fusion_ray.jobs import reading
from fusion_ray.runners.ray import datasource
from fusion_ray.runners.ray.datasource import NO_ALPHA, ReadUnit, alpha_plane, read_unit
from fusion_ray.video import make_test_video, plan_segments


@pytest.fixture
def unit(tmp_path):
    clip = make_test_video(tmp_path / "clip.mp4", face_image=None, n_frames=6, fps=Fraction(25), size_wh=(64, 48),
                           audio=False)
    return ReadUnit(3, str(clip), "s0", plan_segments(clip, 100.0)[0], (48, 64))


def _rows(unit, block_frames=4):
    blocks = [b.to_pydict() for b in read_unit(unit, block_frames)]
    keys = ("item", "index", "error", "read_failed", "alpha")
    return [{k: b[k][i] for k in keys} for b in blocks for i in range(len(b["index"]))]


def test_a_unit_is_read_into_blocks(unit):
    rows = _rows(unit)
    assert [r["index"] for r in rows] == list(range(6)) and all(r["error"] == "" for r in rows)
    assert not any(r["read_failed"] for r in rows) and all(r["alpha"] == NO_ALPHA for r in rows)


@pytest.mark.parametrize("exc", [ValueError("unsupported pixel format 'yuv444p12le'"), RuntimeError("odd decoder"),
                                 VideoError("clip.mp4: corrupt")])
def test_any_decode_error_fails_only_the_unit(unit, monkeypatch, exc):
    def decode(path, segment, threads):
        yield from []
        raise exc

    monkeypatch.setattr(reading, "decode_segment", decode)  # the read tasks decode through it
    rows = _rows(unit)
    assert len(rows) == 1 and rows[0]["item"] == 3 and rows[0]["read_failed"] and rows[0]["index"] == 0
    assert rows[0]["error"].startswith("read: ") and str(exc) in rows[0]["error"]


def test_frames_before_the_error_are_kept(unit, monkeypatch):
    real = reading.decode_segment

    def decode(path, segment, threads):
        for n, frame in enumerate(real(path, segment, threads=threads)):
            if n == 5:
                raise ValueError("bad frame")
            yield frame

    monkeypatch.setattr(reading, "decode_segment", decode)  # the read tasks decode through it
    rows = _rows(unit)
    assert [r["index"] for r in rows] == [0, 1, 2, 3, 4, 5]  # the marked row: the first frame not read
    assert [r["read_failed"] for r in rows] == [False] * 5 + [True]
    assert rows[-1]["error"] == "read: ValueError: bad frame"


def test_an_image_is_read_once_with_its_alpha(tmp_path):
    bgra = np.zeros((30, 40, 4), np.uint8)
    bgra[..., :3] = 120
    bgra[..., 3] = np.arange(40, dtype=np.uint8)[None, :] * 6  # a gradient: the plane's layout shows
    cv2.imwrite(str(tmp_path / "a.png"), bgra)
    cv2.imwrite(str(tmp_path / "b.png"), bgra[..., :3])
    rows = [b.to_pydict() for u in ("a", "b") for b in read_unit(ReadUnit(0, str(tmp_path / f"{u}.png"), "s0",
                                                                            None, (30, 40)), 4)]
    with_alpha, without = rows[0], rows[1]
    frame = np.asarray(with_alpha["frame"][0])
    assert frame.shape == (30, 40, 3) and not with_alpha["read_failed"][0]
    assert np.array_equal(alpha_plane(with_alpha["alpha"][0], frame), bgra[..., 3])
    assert without["alpha"][0] == NO_ALPHA and alpha_plane(without["alpha"][0], frame) is None


def test_images_are_read_in_groups_by_bytes_and_a_bad_one_fails_alone(tmp_path):
    sizes = [(100, 100), (100, 100), (50, 40), (300, 200), (10, 10)]
    units = []
    for n, (h, w) in enumerate(sizes):
        cv2.imwrite(str(tmp_path / f"{n}.png"), np.full((h, w, 3), 10 * n, np.uint8))
        units.append(ReadUnit(n, str(tmp_path / f"{n}.png"), f"s{n % 2}", None, (h, w)))
    (tmp_path / "2.png").write_bytes(b"not a png")
    groups = datasource.image_groups(units, task_bytes=2 * 100 * 100 * 3)
    assert [[u.item for u in g] for g in groups] == [[0, 1], [2], [3], [4]]  # a large image is a task alone
    assert [[u.item for u in g] for g in datasource.image_groups(units, 1)] == [[n] for n in range(5)]

    blocks = [b.to_pydict() for b in datasource.read_images(units, block_frames=2)]
    assert [len(b["item"]) for b in blocks] == [2, 2, 1]
    rows = {int(i): (f, bool(failed), sid) for b in blocks
            for i, f, failed, sid in zip(b["item"], b["frame"], b["read_failed"], b["source_id"], strict=True)}
    assert [rows[n][1] for n in range(5)] == [False, False, True, False, False]
    assert [rows[n][2] for n in range(5)] == ["s0", "s1", "s0", "s1", "s0"]  # each row keeps its own item
    assert np.asarray(rows[3][0]).shape == (300, 200, 3) and int(np.asarray(rows[4][0])[0, 0, 0]) == 40
