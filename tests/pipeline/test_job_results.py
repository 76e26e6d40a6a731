"""How per-frame failures end up in an item's result (the driver's bookkeeping, no Ray)."""

from fractions import Fraction

import numpy as np
import pytest

from fusion_ray.pipeline.job import ItemResult, JobItem, JobReport, _account, _join, _Video
from fusion_ray.video import make_test_video, probe
from fusion_ray.video.segments import plan_segments


@pytest.fixture
def clip(tmp_path):
    """A 6-frame clip that stands for the one encoded segment of a video item."""
    return make_test_video(tmp_path / "clip.mp4", face_image=None, n_frames=6, fps=Fraction(25),
                           size_wh=(64, 48), audio=False)


def _finished_video(clip, tmp_path, errors):
    info = probe(clip)
    segments = plan_segments(clip, 100.0)
    video = _Video(0, info, segments, tmp_path, {s.index for s in segments}, {s.index: str(clip) for s in segments})
    result = ItemResult(str(clip), str(tmp_path / "out.mp4"), kind="video")
    batch = {"item": np.zeros(len(errors), np.int32), "segment": np.zeros(len(errors), np.int32),
             "index": np.arange(len(errors)), "error": np.asarray(errors, dtype=object),
             "faces_swapped": np.zeros(len(errors), np.int64)}
    assert _account(batch, [result], JobReport([result]), [], {}) == len(errors)
    return video, result


def test_a_video_whose_every_frame_failed_is_failed_and_not_written(clip, tmp_path):
    video, result = _finished_video(clip, tmp_path, ["swap: RuntimeError: boom"] * 6)
    output = tmp_path / "out.mp4"
    _join(video, JobItem((clip,), clip, output), result, {})
    assert result.status == "failed" and result.frames_failed == 6
    assert "every frame failed" in result.error and "boom" in result.error
    assert not output.exists()  # else a re-run would skip it


def test_a_video_with_some_failed_frames_is_done_and_says_so(clip, tmp_path):
    video, result = _finished_video(clip, tmp_path, ["", "swap: RuntimeError: boom", "", "", "", ""])
    output = tmp_path / "out.mp4"
    _join(video, JobItem((clip,), clip, output), result, {})
    assert result.status == "done" and result.frames == 6 and result.frames_failed == 1
    assert "1 of 6 frame(s) failed" in result.error and "boom" in result.error
    assert probe(output).frame_count == 6  # the failed frame was passed through, not dropped


def test_a_video_without_failed_frames_has_no_error(clip, tmp_path):
    video, result = _finished_video(clip, tmp_path, [""] * 6)
    _join(video, JobItem((clip,), clip, tmp_path / "out.mp4"), result, {})
    assert result.status == "done" and result.error == "" and result.frames_failed == 0


def test_the_expected_frame_count_is_the_segment_plans(clip, tmp_path):
    """An edit list (a `-c copy` trim) hides frames the container still counts: the decoder
    delivers the plan's frames, and that is what a complete video is checked against."""
    import dataclasses

    video, result = _finished_video(clip, tmp_path, [""] * 6)
    video.info = dataclasses.replace(video.info, frame_count=video.info.frame_count + 2)
    output = tmp_path / "out.mp4"
    _join(video, JobItem((clip,), clip, output), result, {})
    assert result.status == "done" and output.exists()
