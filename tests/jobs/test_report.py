"""The report folds slim output batches (no Ray): per-item counters, per-stage time, JSON fields."""

import json

import numpy as np

from fusion_ray.jobs.report import ItemResult, JobReport


def _batch(items, errors, segments=None, read_failed=None, faces=None):
    n = len(items)
    return {"item": np.asarray(items, np.int32), "segment": np.asarray(segments or [0] * n, np.int32),
            "index": np.arange(n), "error": np.asarray(errors, dtype=object),
            "read_failed": np.asarray(read_failed or [False] * n), "faces_swapped": np.asarray(faces or [1] * n),
            "busy_ms_detect": np.full(n, 500.0), "idle_ms_detect": np.full(n, 250.0)}


def test_frames_of_videos_are_counted_per_segment():
    report = JobReport([ItemResult("a.mp4", "o.mp4", kind="video"), ItemResult("b.png", "o.png", kind="image")])
    report.track_stages(["detect", "swap"])
    fold = report.fold(_batch([0, 0, 0, 1], ["", "swap: RuntimeError: boom", "", ""], segments=[0, 1, 1, 0]))
    assert fold.frames == 4 and fold.segment_frames == {(0, 0): 1, (0, 1): 2}  # images have no segments
    video, image = report.items
    assert (video.frames, video.frames_failed, video.faces_swapped, video.status) == (3, 1, 3, "pending")
    assert video.error == "swap: RuntimeError: boom"  # the first failed frame's message
    assert image.status == "done" and image.frames == 1
    assert report.stages["detect"].busy_s == 2.0 and report.stages["detect"].idle_ratio == 1 / 3
    assert report.stages["swap"].busy_s == 0.0  # not in this batch


def test_a_failed_image_and_a_read_failure_fail_their_items():
    report = JobReport([ItemResult("a.mp4", "o.mp4", kind="video"), ItemResult("b.png", "o.png", kind="image")])
    fold = report.fold(_batch([0, 0, 1], ["", "read: cannot decode", "paste: ValueError: x"],
                              read_failed=[False, True, False]))
    assert fold.frames == 2 and fold.segment_frames == {(0, 0): 1}  # the marked row is no frame
    video, image = report.items
    assert video.status == "failed" and video.error == "read: cannot decode" and video.frames == 1
    assert image.status == "failed" and image.error == "paste: ValueError: x"


def test_the_json_report_has_every_field(tmp_path):
    result = ItemResult("cut.mp4", "o.mp4", kind="video", status="done", frames=93, frames_missing=182,
                        missing_from_s=3.17)
    result.warn("cut.mp4 is truncated")
    report = JobReport([result], frames=93, wall_s=2.0)
    report.add_stand_ins(["inswapper_128"])
    report.write(tmp_path / "r.json")
    saved = json.loads((tmp_path / "r.json").read_text())
    assert saved["counts"] == {"done": 1} and saved["frames_per_s"] == 46.5
    assert saved["stand_in_models"] == ["inswapper_128"]
    assert saved["items"][0] == {"target": "cut.mp4", "output": "o.mp4", "kind": "video", "status": "done",
                                 "frames": 93, "frames_failed": 0, "frames_resumed": 0, "faces_swapped": 0, "error": "",
                                 "frames_missing": 182, "missing_from_s": 3.17,
                                 "warnings": ["cut.mp4 is truncated"], "det_full": 0, "det_roi": 0,
                                 "faces_interpolated": 0, "tracks": 0}


def test_the_json_report_names_the_precision_each_model_ran_at(tmp_path):
    report = JobReport([], frames=0, wall_s=1.0)
    report.add_precisions([("scrfd_2.5g", "int8"), ("inswapper_128", "fp32")])
    report.add_precisions([("gfpgan_1.4", "fp16")])
    report.write(tmp_path / "r.json")
    saved = json.loads((tmp_path / "r.json").read_text())
    assert saved["precision"] == {"gfpgan_1.4": "fp16", "inswapper_128": "fp32", "scrfd_2.5g": "int8"}


def test_a_failure_is_one_line_and_logged_below_warning(caplog):
    """The CLI prints each failed item once (its summary or its error line): the item's error is
    one line, whatever text the exception carries, and the log line is INFO, not a second copy."""
    import logging

    traceback_text = ("ray::FusedStage() (pid=1, ip=127.0.0.1)\nTraceback (most recent call last):\n"
                      '  File "x.py", line 1, in f\n    g()\n'
                      "fusion_ray.errors.ModelIntegrityError: model 'inswapper_128' does not match\n")
    results = [ItemResult("a.mp4", "o.mp4") for _ in range(3)]
    with caplog.at_level(logging.DEBUG, logger="fusion_ray"):
        results[0].fail(RuntimeError("first line\nsecond line"))
        results[1].fail(traceback_text)
        results[2].fail(OSError(28, "No space left on device"))
    assert [r.error for r in results] == [
        "RuntimeError: first line; second line",
        "ModelIntegrityError: model 'inswapper_128' does not match (in a Ray worker)",
        "OSError: [Errno 28] No space left on device"]
    assert all(r.status == "failed" for r in results)
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (logging.INFO, f"{r.target}: {r.error}") for r in results]


def test_each_steps_busy_time_is_summed_from_its_column_wherever_it_ran(tmp_path):
    report = JobReport([ItemResult("a.mp4", "o.mp4", kind="video")])
    batch = _batch([0, 0], ["", ""])
    batch.update({"step_ms_track": np.full(2, 100.0), "step_ms_detect": np.full(2, 50.0)})
    report.fold(batch)
    report.fold({**_batch([0], [""]), "step_ms_detect": np.full(1, 400.0), "step_ms_swap": np.full(1, 300.0)})
    assert report.steps == {"track": 0.2, "detect": 0.5, "swap": 0.3}
    report.write(tmp_path / "r.json")
    assert json.loads((tmp_path / "r.json").read_text())["steps"] == {
        "track": {"busy_s": 0.2}, "detect": {"busy_s": 0.5}, "swap": {"busy_s": 0.3}}


def test_each_local_line_has_its_busy_share_and_the_busiest_bounds():
    from fusion_ray.jobs.report import StageStats, bounding_line, line_shares

    stages = {"decode": StageStats(2.0, 1.0), "track": StageStats(6.0, 0.0), "detect": StageStats(3.0, 0.0),
              "compute": StageStats(3.0, 9.0), "encode": StageStats(1.0, 11.0)}
    lines = line_shares(stages)
    assert lines == {"track": {"busy_s": 8.0, "idle_s": 1.0, "busy_share": 0.889},
                     "compute": {"busy_s": 3.0, "idle_s": 9.0, "busy_share": 0.25},
                     "encode": {"busy_s": 1.0, "idle_s": 11.0, "busy_share": 0.083}}
    assert bounding_line(lines) == "track"
    del stages["track"]
    assert set(line_shares(stages)) == {"decode", "compute", "encode"}
    assert line_shares({"detect": StageStats(1.0, 1.0)}) == {} and bounding_line({}) is None   # the Ray runner
    report = JobReport([], wall_s=1.0, stages={"compute": StageStats(1.0, 1.0)})
    assert report.to_json()["lines"]["compute"]["busy_share"] == 0.5 and report.to_json()["bound"] == "compute"
