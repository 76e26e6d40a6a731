"""The finaliser: how per-frame failures end up in a video's result when it is joined (the
join task's body, called here without Ray), and the cleanup after a dead writer (Ray)."""

import dataclasses
import time
from fractions import Fraction

import numpy as np
import pytest
import ray

from fusion_ray.config import EngineConfig
from fusion_ray.jobs.config import JobConfig, PipelineConfig
from fusion_ray.jobs.finalise import check_video, done_message, join_item
from fusion_ray.jobs.plan import JobItem, plan_job
from fusion_ray.jobs.report import JobReport
from fusion_ray.jobs.writer import SegmentWriter, VideoTarget
from fusion_ray.runners.ray.run import cleanup
from fusion_ray.video import EncodeOptions, make_test_video, probe


@pytest.fixture
def clip(tmp_path):
    """A 6-frame clip that stands for the one encoded segment of a video item."""
    return make_test_video(tmp_path / "clip.mp4", face_image=None, n_frames=6, fps=Fraction(25),
                           size_wh=(64, 48), audio=False)


@pytest.fixture
def engine_cfg(models_config):
    """The planner locates the models: stand-ins and the real detector."""
    return EngineConfig(models=models_config)


def _finished_video(clip, tmp_path, errors, engine_cfg):
    plan = plan_job([JobItem((clip,), clip, tmp_path / "out.mp4")], JobConfig(engine=engine_cfg, pipeline=PipelineConfig(
        segment_seconds=100.0))).items[0]
    result = plan.result()
    batch = {"item": np.zeros(len(errors), np.int32), "segment": np.zeros(len(errors), np.int32),
             "index": np.arange(len(errors)), "error": np.asarray(errors, dtype=object),
             "read_failed": np.zeros(len(errors), bool), "faces_swapped": np.zeros(len(errors), np.int64)}
    assert JobReport([result]).fold(batch).frames == len(errors)
    return plan, result, [clip for _ in plan.segments]


def join_video(plan, result, paths, comment):
    """What the driver does with a video whose segments are all written (the join in-process)."""
    problem = check_video(plan, result)
    if problem is not None:
        result.fail(problem)
        return
    join_item(plan, paths, comment)
    result.status, result.error = "done", done_message(result)


def test_a_video_whose_every_frame_failed_is_failed_and_not_written(clip, tmp_path, engine_cfg):
    plan, result, paths = _finished_video(clip, tmp_path, ["swap: RuntimeError: boom"] * 6, engine_cfg)
    join_video(plan, result, paths, "")
    assert result.status == "failed" and result.frames_failed == 6
    assert "every frame failed" in result.error and "boom" in result.error
    assert not plan.output.exists()  # else a re-run would skip it


def test_a_video_with_some_failed_frames_is_done_and_says_so(clip, tmp_path, engine_cfg):
    plan, result, paths = _finished_video(clip, tmp_path, ["", "swap: RuntimeError: boom", "", "", "", ""], engine_cfg)
    join_video(plan, result, paths, "")
    assert result.status == "done" and result.frames == 6 and result.frames_failed == 1
    assert "1 of 6 frame(s) failed" in result.error and "boom" in result.error
    assert probe(plan.output).frame_count == 6  # the failed frame was passed through, not dropped


def test_a_video_without_failed_frames_has_no_error(clip, tmp_path, engine_cfg):
    plan, result, paths = _finished_video(clip, tmp_path, [""] * 6, engine_cfg)
    # as the driver sends it: without the timestamps (the join task finds them again)
    join_video(dataclasses.replace(plan, frame_times=None), result, paths, "made by the test")
    assert result.status == "done" and result.error == "" and result.frames_failed == 0
    assert probe(plan.output).metadata.get("comment") == "made by the test"
    assert not plan.work_dir.parent.exists()  # the parts folder went with the join


def test_a_video_missing_frames_is_failed(clip, tmp_path, engine_cfg):
    plan, result, paths = _finished_video(clip, tmp_path, [""] * 5, engine_cfg)
    join_video(plan, result, paths, "")
    assert result.status == "failed" and result.error == "processed 5 of 6 frames"
    assert not plan.output.exists()


def test_the_expected_frame_count_is_the_segment_plans(clip, tmp_path, engine_cfg):
    """An edit list (a `-c copy` trim) hides frames the container still counts: the decoder
    delivers the plan's frames, and that is what a complete video is checked against."""
    plan, result, paths = _finished_video(clip, tmp_path, [""] * 6, engine_cfg)
    assert plan.video is not None
    plan = dataclasses.replace(plan, video=dataclasses.replace(plan.video, frame_count=plan.video.frame_count + 2))
    join_video(plan, result, paths, "")
    assert result.status == "done" and plan.output.exists()


@pytest.mark.usefixtures("ray_cluster")
def test_cleanup_aborts_open_segments_and_goes_on_past_a_dead_writer(tmp_path):
    target = VideoTarget(Fraction(25), 64, 48, str(tmp_path / "parts"))
    (tmp_path / "parts").mkdir()
    (tmp_path / "parts" / "segment_00000.mp4").write_bytes(b"finished")  # stays, for a re-run
    writer_cls = ray.remote(SegmentWriter).options(num_cpus=0.01)
    dead, alive = writer_cls.remote(EncodeOptions()), writer_cls.remote(EncodeOptions())
    frame = np.zeros((48, 64, 3), np.uint8)
    ray.get([dead.ready.remote(), alive.push.remote((0, 1), 10, 10, [10], [frame], target)])
    ray.kill(dead)
    cleanup([(0, 1)], [dead, alive])  # the dead writer's abort raises: logged, not fatal
    assert sorted(p.name for p in (tmp_path / "parts").iterdir()) == ["segment_00000.mp4"]  # no partial file
    # the live writer was stopped too (ray.kill is asynchronous: wait for it, bounded)
    for _ in range(100):
        try:
            ray.get(alive.ready.remote(), timeout=10)
        except ray.exceptions.RayActorError:
            break
        time.sleep(0.1)
    else:
        pytest.fail("the live writer was not killed by the cleanup")
