"""Tracking in the read task (no Ray): frames in order and all of them, a bounded buffer,
faces filled in where the face is hidden, and a sticky ``index`` selection. Real SCRFD."""

from __future__ import annotations

import numpy as np
import pytest

from fusion_ray.config import EngineConfig, RuntimeConfig, SelectionConfig
from fusion_ray.core.tracking.stream import lookahead
from fusion_ray.imageio import read_image
from fusion_ray.jobs.track_read import READ_STAGE, SegmentReader, TrackedRead
from fusion_ray.ops.select import select_faces
from fusion_ray.runners.ray.datasource import FRAME_COLUMNS, TRACK_COLUMNS, ReadUnit, read_unit
from fusion_ray.video import decode_segment, make_test_video, plan_segments

from .track_clips import FPS, entering_clip, hidden_clip, sprites, write_clip

HIDDEN = [12, 13]


@pytest.fixture(scope="module")
def faces(images_dir, scrfd_path):
    return sprites(images_dir, scrfd_path)


@pytest.fixture(scope="module")
def engine(models_config):
    return EngineConfig(models=models_config, runtime=RuntimeConfig(providers=["cpu"]))


def _unit(path, segment_seconds=100.0):
    segments = plan_segments(path, segment_seconds)
    return [ReadUnit(7, str(path), "s0", s, (360, 640), float(FPS)) for s in segments]


def test_the_read_task_keeps_order_and_count_and_a_bounded_buffer(faces, engine, tmp_path):
    clip = hidden_clip(faces["obama"], 40, HIDDEN)
    path = write_clip(clip, tmp_path / "hidden.mp4")
    read = TrackedRead(engine)
    (unit,) = _unit(path)
    blocks = [b.to_pydict() for b in read_unit(unit, 6, read)]
    stage = {f"busy_ms_{READ_STAGE}", f"idle_ms_{READ_STAGE}", "step_ms_track"}  # the read's detection, for the report
    assert all(set(b) == {*FRAME_COLUMNS, *TRACK_COLUMNS, *stage} for b in blocks)
    assert all(len(b["index"]) <= 6 for b in blocks)
    rows = [{k: b[k][i] for k in b} for b in blocks for i in range(len(b["index"]))]
    assert all(r[f"busy_ms_{READ_STAGE}"] > 0 for r in rows if r["det_full"])
    assert [r["index"] for r in rows] == list(range(40)) and not any(r["read_failed"] for r in rows)
    assert all(r["tracked"] for r in rows)
    # one face, kept on the hidden frames (interpolated there), one track
    assert [len(r["face_bbox"]) for r in rows] == [1] * 40
    assert [r["faces_interpolated"] for r in rows] == [int(i in HIDDEN) for i in range(40)]
    assert sum(r["tracks_new"] for r in rows) == 1 and {int(r["face_track"][0]) for r in rows} == {0}
    full = [r["index"] for r in rows if r["det_full"]]
    assert full[0] == 0 and all(b - a <= engine.tracking.full_every for a, b in zip(full, full[1:], strict=False))
    assert sum(r["det_roi"] for r in rows) >= 40 - 2 * len(full)  # crops in between
    # the interpolated face lies where the face is (under the box), within a third of an eye distance
    for i in HIDDEN:
        truth = clip.truth[i, 0]
        eye = float(np.linalg.norm(truth[1] - truth[0]))
        assert np.linalg.norm(np.asarray(rows[i]["face_landmarks"][0]) - truth, axis=1).mean() < eye / 3

    reader = SegmentReader(read.load_models(), read, fps=float(FPS), frame_hw=(360, 640))
    out = [f.index for f in reader.frames(decode_segment(path, unit.segment, threads=1))]
    assert out == list(range(40))
    assert reader.peak_buffered == lookahead(engine.tracking, lookback=True) + 1  # L frames, never more


def test_tracking_starts_again_in_each_segment(engine, images_dir, tmp_path):
    obama = read_image(images_dir / "obama.jpg").frame
    path = make_test_video(tmp_path / "gop.mp4", face_image=obama, n_frames=30, fps=FPS, audio=False, gop=10)
    units = _unit(path, segment_seconds=0.01)
    assert len(units) == 3
    rows = [b.to_pydict() for u in units for b in read_unit(u, 16, TrackedRead(engine))]
    full = {int(i) for b in rows for i, d in zip(b["index"], b["det_full"], strict=True) if d}
    assert {u.segment.start_frame for u in units if u.segment} <= full  # each segment begins with a full detection
    assert sum(int(t) for b in rows for t in b["tracks_new"]) == 3  # one track per segment
    assert [int(i) for b in rows for i in b["index"]] == list(range(30))


def test_index_selection_keeps_its_person_when_a_second_face_enters(faces, models_config, tmp_path):
    clip = entering_clip(faces["obama"], faces["biden"], 30, enter=8)
    path = write_clip(clip, tmp_path / "enter.mp4")
    cfg = EngineConfig(models=models_config, runtime=RuntimeConfig(providers=["cpu"]),
                       selection=SelectionConfig(mode="index", index=0))
    read = TrackedRead(cfg)
    (unit,) = _unit(path)
    reader = SegmentReader(read.load_models(), read, fps=float(FPS), frame_hw=(360, 640))
    frames = list(reader.frames(decode_segment(path, unit.segment, threads=1)))
    assert max(f.faces_found for f in frames) == 2  # the second face did come in
    chosen_x = [float(f.faces.bbox_xyxy[0, 0]) for f in frames if len(f.faces)]
    assert len(chosen_x) == 30 and min(chosen_x) > 320  # always the face on the right (Obama)
    assert {int(f.faces.track_id[0]) for f in frames} == {0}
    # per-frame selection (tracking off) switches to the newcomer: what the tracker prevents
    detector = read.load_models().need_detector()
    per_frame = [select_faces(detector.detect(f), "index", index=0) for f in clip.frames[20:]]
    assert all(float(p[0].bbox_xyxy[0]) < 320 for p in per_frame)
