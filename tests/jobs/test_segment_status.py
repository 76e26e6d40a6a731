"""The segment tracker (no Ray): named states from the first frame to the written file."""

import pytest

from fusion_ray.jobs.segment_status import SegmentState, SegmentTracker
from fusion_ray.video.segments import Segment


def _segments(*counts):
    out, start = [], 0
    for index, count in enumerate(counts):
        out.append(Segment(index, start, count, start * 10, None))
        start += count
    return out


def test_a_segment_goes_from_pending_to_done():
    tracker = SegmentTracker({4: _segments(3, 2)})
    assert tracker.state((4, 0)) is SegmentState.PENDING
    assert tracker.receive({(4, 0): 2}) == []
    assert tracker.state((4, 0)) is SegmentState.RECEIVING
    assert tracker.receive({(4, 0): 1, (4, 1): 2}) == [(4, 0), (4, 1)]  # both whole: finish them
    assert tracker.state((4, 0)) is SegmentState.FINISHING
    assert tracker.progress(4) == "0 of 2 segments written"
    assert not tracker.written((4, 1), "b.mp4")
    assert tracker.written((4, 0), "a.mp4")  # the video's last segment: it is complete
    assert tracker.state((4, 0)) is SegmentState.DONE and tracker.complete(4)
    assert [p.name for p in tracker.paths(4)] == ["a.mp4", "b.mp4"]  # in segment order


def test_frames_after_a_segment_finishes_or_fails_are_ignored():
    tracker = SegmentTracker({0: _segments(2), 1: _segments(2)})
    assert tracker.receive({(0, 0): 2}) == [(0, 0)]
    assert tracker.receive({(0, 0): 1}) == []  # a finishing segment is never finished twice
    tracker.failed((1, 0))
    assert tracker.receive({(1, 0): 2}) == [] and tracker.state((1, 0)) is SegmentState.FAILED


def test_an_incomplete_video_has_no_paths():
    tracker = SegmentTracker({0: _segments(1, 1)})
    tracker.receive({(0, 0): 1})
    tracker.written((0, 0), "a.mp4")
    assert not tracker.complete(0) and tracker.progress(0) == "1 of 2 segments written"
    with pytest.raises(ValueError, match="1 of 2 segments written"):
        tracker.paths(0)
