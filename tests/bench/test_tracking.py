"""The tracking benchmark: clips with known truth, the metrics, the report (small sizes)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from fusion_ray.bench.tracking import (
    Result,
    _hidden_within,
    build_clips,
    evaluate,
    load_detector,
    main,
    run_tracked_methods,
    summarise,
    to_markdown,
)
from fusion_ray.bench.tracking_clips import crossing_clip, group_clip, make_sprite, motion_clip
from fusion_ray.config import TrackingConfig
from fusion_ray.core.tracking.tracks import FrameFaces
from fusion_ray.imageio import read_image


def first_frames(clip, n):
    clip.frames, clip.truth, clip.visible, clip.hidden = clip.frames[:n], clip.truth[:n], clip.visible[:n], clip.hidden[:n]
    return clip


@pytest.fixture(scope="module")
def detector(scrfd_path):
    return load_detector(scrfd_path)


@pytest.fixture(scope="module")
def sprites(detector, images_dir):
    out = {}
    for name in ("obama", "biden"):
        photo = read_image(images_dir / f"{name}.jpg").frame
        out[name] = make_sprite(photo, detector.detect(photo)[0])
    return out


def test_true_landmarks_are_where_the_detector_finds_the_face(detector, sprites):
    clip = motion_clip(sprites["obama"], n_frames=30)
    checked = 0
    for f in range(0, 30, 3):
        if not clip.visible[f, 0]:
            continue
        faces = detector.detect(clip.frames[f])
        truth = clip.truth[f, 0]
        eye = np.linalg.norm(truth[1] - truth[0])
        assert faces and np.linalg.norm(faces[0].landmarks_5 - truth, axis=1).mean() < 0.1 * eye
        checked += 1
    assert checked >= 5
    assert clip.hidden[20, 0] and not clip.visible[20, 0]


def test_a_covered_face_is_not_visible(sprites):
    clip = crossing_clip(sprites["obama"], sprites["biden"], n_frames=40)
    middle = 20  # the front face (index 1) covers the back one (index 0)
    assert clip.visible[0].tolist() == [True, True] and clip.visible[middle].tolist() == [False, True]


@pytest.mark.parametrize("hidden,max_gap,expected", [
    ([0, 1, 1, 0, 1, 1, 1, 1, 0], 3, [0, 1, 1, 0, 0, 0, 0, 0, 0]),
    ([1, 0, 0], 1, [1, 0, 0]),
    ([0, 0], 3, [0, 0]),
])
def test_hidden_within(hidden, max_gap, expected):
    got = _hidden_within(np.asarray(hidden, bool)[:, None], max_gap)
    assert got[:, 0].astype(int).tolist() == expected


def test_evaluate_scores_perfect_and_empty_outputs(sprites):
    clip = motion_clip(sprites["obama"], n_frames=30)
    boxes = lambda t: np.concatenate([t.min(axis=0), t.max(axis=0)])[None]  # noqa: E731
    perfect = [FrameFaces(boxes(t[0]).astype(np.float32), t[:1].astype(np.float32), np.ones(1, np.float32),
                          np.zeros(1, np.int64)) for t in clip.truth]
    result = evaluate(clip, perfect, Result("move", "x", {}, 30, 0.0), 3)
    assert result.error == pytest.approx(0.0, abs=1e-5) and result.missed_visible == 0 and result.missed_hidden == 0
    assert result.jitter == pytest.approx(result.truth_jitter, abs=1e-5) and result.id_switches == 0
    empty = evaluate(clip, [FrameFaces.empty()] * 30, Result("move", "x", {}, 30, 0.0), 3)
    assert empty.missed_visible == int(clip.visible.sum()) and empty.missed_hidden == int(clip.hidden.sum())


def test_tracked_methods_report_counters_and_beat_per_frame_on_hidden_frames(detector, sprites):
    clip = first_frames(motion_clip(sprites["obama"]), 30)
    tracked, online = run_tracked_methods(detector, clip, TrackingConfig())
    assert tracked.method == "tracked" and online.method == "online"
    assert tracked.full >= 3 and tracked.roi > 0 and tracked.full + tracked.roi >= 30 - 1
    assert tracked.missed_hidden == 0 and tracked.hidden == 1   # frame 20 is hidden for one frame
    assert tracked.error < 0.1 and tracked.id_switches == 0 and tracked.tracks == 1


def test_the_group_clip_turns_crosses_and_hides_faces_the_detector_finds(detector, sprites):
    clip = group_clip(sprites["obama"], sprites["biden"], sprites["biden"], n_frames=150)
    assert clip.truth.shape == (150, 3, 5, 2) and clip.hidden[:, 0].sum() == 5
    eyes = np.linalg.norm(clip.truth[:, 2, 1] - clip.truth[:, 2, 0], axis=-1)
    assert eyes.min() < 0.65 * eyes.max()                    # the turning face narrows
    assert not clip.visible[:, 1].all() and clip.visible[:, 2].all()   # the crossing face goes behind
    for f in (0, 25, 125):
        faces = FrameFaces.from_faces(detector.detect(clip.frames[f]))
        assert len(faces) == 3, f
        for j in range(3):
            truth = clip.truth[f, j]
            dist = np.linalg.norm(faces.landmarks_5 - truth, axis=-1).mean(-1).min()
            assert dist < 0.15 * np.linalg.norm(truth[1] - truth[0]), (f, j)


def test_report_summary_and_markdown():
    rows = [{"clip": "c", "method": "per_frame", "settings": {}, "frames": 10, "det_ms": 30.0, "full": 10,
             "roi": 0, "jitter": 0.02, "truth_jitter": 0.001, "error": 0.02, "missed_visible": 0, "visible": 10,
             "missed_hidden": 2, "hidden": 2, "false_faces": 0, "id_switches": None, "tracks": None, "extra": {}}]
    settings = {"N": 10, "canvas": 192, "growth": 1.6, "hold": 0.05, "G": 3, "lookback": True, "keep_lost": 30,
                "smoothing": "window"}
    rows.append({**rows[0], "method": "tracked", "settings": settings, "det_ms": 9.0, "jitter": 0.005,
                 "missed_hidden": 0, "id_switches": 0, "tracks": 1})
    summary = {r["key"]: r for r in summarise(rows)}
    assert summary["per_frame"]["det_pct"] == pytest.approx(100.0)
    tracked = next(r for k, r in summary.items() if k.startswith("tracked"))
    assert tracked["det_pct"] == pytest.approx(30.0) and tracked["jitter_pct"] == pytest.approx(25.0)
    markdown = to_markdown({"machine": {"cpu_model": "x"}, "clips": {"c": "a clip"}, "results": rows})
    assert "| per_frame | 30.0 | 100% |" in markdown and "a clip" in markdown


def test_main_writes_the_report(tmp_path, assets_dir, monkeypatch, detector, images_dir):
    import fusion_ray.bench.tracking as bench

    clips = build_clips(detector, images_dir)
    short = [first_frames(clip, 12) for clip in clips]  # keep the test short
    monkeypatch.setattr(bench, "build_clips", lambda *_: short)
    assert main(["--assets", str(assets_dir), "--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "report.json").read_text())
    assert {r["method"] for r in report["results"]} == {"per_frame", "tracked", "online"}
    assert (tmp_path / "report.md").read_text().startswith("# Tracking benchmark")
