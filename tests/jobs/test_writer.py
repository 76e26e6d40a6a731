"""The segment writer and the encode stage, called directly (no Ray): re-ordering, completion, abort,
image outputs."""

from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from fusion_ray.jobs.parts import SegmentCounts
from fusion_ray.jobs.writer import (
    SegmentWriter,
    VideoTarget,
    segment_path,
    writer_for,
)
from fusion_ray.video import EncodeOptions, decode_all, probe


def _target(folder):
    return VideoTarget(Fraction(25), 96, 64, str(folder))


def _frame(i):
    frame = np.zeros((64, 96, 3), np.uint8)
    frame[:, : 4 * (i + 1)] = 200  # a bar whose width encodes the index
    return frame


def test_out_of_order_frames_are_encoded_in_order(tmp_path):
    writer = SegmentWriter(EncodeOptions(preset="ultrafast"))
    order = [3, 0, 1, 5, 2, 4, 7, 6]
    for i in order:
        writer.push((0, 0), 0, 8, [i], [_frame(i)], _target(tmp_path))
    path, written = writer.finish((0, 0))
    assert written == 8 and probe(path).frame_count == 8
    widths = [int((f.frame[32, :, 0] > 100).sum()) for f in decode_all(path)]
    assert widths == sorted(widths)


def test_segments_are_encoded_in_the_pixel_format_the_planner_chose(tmp_path):
    writer = SegmentWriter(EncodeOptions(preset="ultrafast"))
    target = VideoTarget(Fraction(25), 96, 64, str(tmp_path), pix_fmt="yuv444p")  # e.g. a 4:4:4 source
    writer.push((0, 0), 0, 2, [0, 1], [_frame(0), _frame(1)], target)
    path, _ = writer.finish((0, 0))
    assert probe(path).pix_fmt == "yuv444p"
    writer.push((1, 0), 0, 1, [0], [_frame(0)], _target(tmp_path))  # no choice: the options' (auto)
    assert probe(writer.finish((1, 0))[0]).pix_fmt == "yuv420p"


def test_repeated_frames_are_ignored_and_foreign_ones_rejected(tmp_path):
    """A block re-run after an actor died pushes its frames again: the segment is still whole."""
    writer = SegmentWriter(EncodeOptions(preset="ultrafast"))
    writer.push((0, 1), 10, 4, [11, 10], [_frame(1), _frame(0)], _target(tmp_path))
    assert writer.push((0, 1), 10, 4, [10, 11], [_frame(0), _frame(1)], _target(tmp_path)) == 0  # both already received
    with pytest.raises(ValueError, match="outside"):
        writer.push((0, 1), 10, 4, [14], [_frame(4)], _target(tmp_path))
    writer.push((0, 1), 10, 4, [12, 13], [_frame(2), _frame(3)], _target(tmp_path))
    path, written = writer.finish((0, 1))
    assert written == 4 and probe(path).frame_count == 4
    size = Path(path).stat().st_size
    assert writer.push((0, 1), 10, 4, [10], [_frame(0)], _target(tmp_path)) == 0  # late: the finished file is left alone
    assert Path(path).stat().st_size == size and (0, 1) not in writer.open


def test_incomplete_segment_cannot_finish_and_abort_cleans_up(tmp_path):
    writer = SegmentWriter(EncodeOptions())
    writer.push((0, 2), 0, 4, [0, 1], [_frame(0), _frame(1)], _target(tmp_path))
    with pytest.raises(RuntimeError, match="incomplete"):
        writer.finish((0, 2))
    writer.push((0, 3), 0, 4, [0], [_frame(0)], _target(tmp_path))
    writer.abort([(0, 3)])
    assert not segment_path(str(tmp_path), (0, 3)).exists()


def test_writer_choice_is_stable():
    assert writer_for((3, 7), 4) == writer_for((3, 7), 4)
    assert {writer_for((0, s), 3) for s in range(30)} == {0, 1, 2}
    # segments in flight at once (consecutive ones of a video, or one-segment videos) are spread
    assert [writer_for((0, s), 2) for s in range(4)] == [0, 1, 0, 1]
    assert [writer_for((n, 0), 3) for n in range(3)] == [0, 1, 2]


def test_a_segment_file_comes_with_its_frames_counts(tmp_path):
    """Written before the segment appears, so that a resumed segment counts as it was made."""
    writer = SegmentWriter(EncodeOptions(preset="ultrafast"))
    writer.push((0, 0), 0, 3, [0, 1], [_frame(0), _frame(1)], _target(tmp_path), ["", "swap: boom"], [1, 0])
    writer.push((0, 0), 0, 3, [1, 2], [_frame(1), _frame(2)], _target(tmp_path), ["swap: boom", ""], [0, 2])  # 1 repeats
    path, _ = writer.finish((0, 0))
    counts = SegmentCounts.from_json((tmp_path / "segment_00000.json").read_bytes())
    assert Path(path).is_file() and counts == SegmentCounts(frames_failed=1, faces_swapped=3, first_error="swap: boom")


def test_a_writer_removes_stale_spooled_segments_only(tmp_path):
    """A writer killed with its driver leaves the segment it was encoding for a bucket: the next
    writer on the node removes it once it has not grown for an hour, and leaves a live one."""
    import os
    import time

    stale, live = tmp_path / "segment.abc.mp4", tmp_path / "segment.def.mp4"
    stale.write_bytes(b"left by a kill -9")
    live.write_bytes(b"being encoded")
    old = time.time() - 2 * 3600
    os.utime(stale, (old, old))
    SegmentWriter(EncodeOptions(), spool_dir=tmp_path)
    assert not stale.exists() and live.exists()
