"""Tracking in a real Ray Data job (2 cores, real SCRFD, the classic swapper: a real swap):
a face hidden under a box for two frames is still swapped there with tracking, and not with
tracking off; the job report counts what the tracker did. The box is filled with noise: the
classic swapper takes the target's colour statistics, so on a black box it pastes a black
face, which a pixel comparison cannot tell from no swap."""

from __future__ import annotations

import numpy as np
import pytest

from fusion_ray.config import EngineConfig, RuntimeConfig, SwapConfig
from fusion_ray.jobs.config import JobConfig, PipelineConfig
from fusion_ray.runners.job import JobItem, run_job
from fusion_ray.video import EncodeOptions, decode_all
from tests.jobs.track_clips import hidden_clip, sprites, write_clip

pytestmark = pytest.mark.usefixtures("ray_cluster")

HIDDEN = (12, 13)
FRAMES = 36


@pytest.fixture(scope="module")
def clip(images_dir, scrfd_path, tmp_path_factory):
    clip = hidden_clip(sprites(images_dir, scrfd_path)["obama"], FRAMES, list(HIDDEN), textured=True)
    path = write_clip(clip, tmp_path_factory.mktemp("clip") / "hidden.mp4")
    clip.decoded = [f.frame.astype(np.float32) for f in decode_all(path)]
    return clip, path


def _swap(clip_path, images_dir, models_config, tmp_path, tracking, runner="ray"):
    """The clip (and, with tracking, an image in the same job: images are detected, not tracked)."""
    engine = EngineConfig(models=models_config, runtime=RuntimeConfig(providers=["cpu"]),
                          swap=SwapConfig(swapper="classic"), tracking=tracking)
    pipeline = PipelineConfig(block_frames=8, progress_bars=False, no_progress_timeout_s=120,
                              encode_options=EncodeOptions(preset="ultrafast", crf=12))
    out = tmp_path / f"out_{tracking}.mp4"
    source = (images_dir / "biden.jpg",)
    items = [JobItem(source, clip_path, out)]
    if tracking:
        items.append(JobItem(source, images_dir / "obama.jpg", tmp_path / "still.png"))
    report = run_job(items, JobConfig(engine=engine, pipeline=pipeline), runner=runner)
    if tracking:  # the read's detection and tracking is in the stage table (it was missing)
        assert report.stages["track"].busy_s > report.stages["detect"].busy_s > 0
        # every step of the chain where it ran (the read task tracks), with its busy time; no mask
        # step but the configured box mask
        assert set(report.steps) == {"track", "detect", "select", "align", "swap", "mask", "paste"}
        assert all(busy > 0 for busy in report.steps.values()), report.steps
        image = report.items[1]
        assert (image.status, image.faces_swapped, image.det_full, image.tracks) == ("done", 1, 0, 0)
        assert (tmp_path / "still.png").is_file()
    return report.items[0], [f.frame.astype(np.float32) for f in decode_all(out)]


def _face_change(clip, frames, i):
    """Mean change in the face's box (from the true landmarks) between the decoded input clip
    (``clip.decoded``) and the output, frame i."""
    points = clip.truth[i, 0]
    (x1, y1), (x2, y2) = points.min(axis=0).astype(int), points.max(axis=0).astype(int)
    region = (slice(y1, y2), slice(x1, x2))
    return float(np.abs(frames[i][region] - clip.decoded[i][region]).mean())


@pytest.mark.parametrize("runner", ["ray", "local"])
def test_a_hidden_face_is_swapped_with_tracking_and_not_without(runner, clip, images_dir, models_config, tmp_path):
    clip, path = clip
    on, on_frames = _swap(path, images_dir, models_config, tmp_path, True, runner)
    off, off_frames = _swap(path, images_dir, models_config, tmp_path, False, runner)
    assert on.status == off.status == "done" and len(on_frames) == len(off_frames) == FRAMES
    for i in HIDDEN:
        assert _face_change(clip, on_frames, i) > 20, f"frame {i}: tracking fills the hidden face in"
        assert _face_change(clip, off_frames, i) < 3, f"frame {i}: per-frame detection finds nothing"
    for i in (5, 20, 30):  # visible: both swap it
        assert _face_change(clip, on_frames, i) > 10 and _face_change(clip, off_frames, i) > 10
    assert on.faces_swapped == FRAMES and off.faces_swapped == FRAMES - len(HIDDEN)
    assert on.faces_interpolated == len(HIDDEN) and on.tracks == 1
    assert 0 < on.det_full < FRAMES // 2 and on.det_roi > FRAMES // 2
    assert (off.det_full, off.det_roi, off.faces_interpolated, off.tracks) == (0, 0, 0, 0)
