"""Stage classes called directly on dict batches, without Ray."""

import time

import numpy as np
import pytest

from fusion_ray.config import EngineConfig, EnhanceConfig, RuntimeConfig, SwapConfig
from fusion_ray.core.facebatch import FACE_COLUMNS
from fusion_ray.core.steps import Chain
from fusion_ray.imageio import read_image
from fusion_ray.jobs.stages import ChainStage, Stage, StageInputError, chain_stages, stage_names
from fusion_ray.runners.inline import Engine

CPU = RuntimeConfig(providers=["cpu"])


@pytest.fixture(scope="module")
def frames(images_dir):
    obama = read_image(images_dir / "obama.jpg").frame
    blank = np.full_like(obama, 40)
    return np.stack([obama, blank, obama])


def run_chain(cfg, frames, identity, extra=None):
    batch = {"frame": frames, "index": np.arange(len(frames))}
    batch.update(extra or {})
    for stage in chain_stages(cfg, {"default": identity}, cpu_budget=1):
        batch = stage(batch)
    return batch


@pytest.mark.parametrize("swapper,enhance", [("inswapper", False), ("classic", False), ("inswapper", True)])
def test_chain_matches_the_engine(models_config, images_dir, frames, swapper, enhance):
    cfg = EngineConfig(models=models_config, runtime=CPU, swap=SwapConfig(swapper=swapper),
                       enhance=EnhanceConfig(enabled=enhance))
    engine = Engine.load(cfg, cpu_budget=1)
    identity = engine.prepare_source([read_image(images_dir / "biden.jpg").frame])
    out = run_chain(cfg, frames, identity)
    assert out["faces_detected"].tolist() == [1, 0, 1]
    assert list(out["error"]) == ["", "", ""]
    for i, frame in enumerate(frames):
        expected = engine.process_frame(frame, identity).frame
        assert np.array_equal(out["frame"][i], expected), f"row {i}"
    assert np.array_equal(out["frame"][1], frames[1])  # no face: unchanged
    for name in stage_names(cfg):
        assert f"busy_ms_{name}" in out and f"idle_ms_{name}" in out
    steps = Chain.of(cfg).names  # each step's busy time, though several share a stage
    assert sorted(c for c in out if c.startswith("step_ms_")) == sorted(f"step_ms_{s}" for s in steps)
    assert all(out[f"step_ms_{s}"].sum() > 0 for s in steps)
    assert "crops" not in out and "enhance_crops" not in out  # intermediates are dropped
    assert not set(FACE_COLUMNS) & set(out)  # the faces retire with the last paste
    assert stage_names(cfg) == (["detect", "swap", "paste", "enhance", "paste_enhanced"] if enhance
                                else ["detect", "swap", "paste"])


@pytest.mark.parametrize("swapper", ["inswapper_128", "hyperswap_1a_256"])
def test_the_swapper_weight_runs_in_the_stages(rows_models_config, images_dir, frames, swapper):
    """--face-swapper-weight adds the target_embed step (the embedder): a stage holding it is not a
    reference selection missing its embedding. On STAND-INs (labelled, not real swaps)."""
    cfg = EngineConfig(models=rows_models_config.model_copy(update={"swapper": swapper}), runtime=CPU,
                       swap=SwapConfig(weight=0.2))
    engine = Engine.load(cfg, cpu_budget=1)
    identity = engine.prepare_source([read_image(images_dir / "biden.jpg").frame])
    out = run_chain(cfg, frames, identity)
    assert list(out["error"]) == ["", "", ""]
    for i, frame in enumerate(frames):
        assert np.array_equal(out["frame"][i], engine.process_frame(frame, identity).frame), f"row {i}"


def test_bad_frame_is_passed_through_and_marked(models_config, images_dir, frames):
    cfg = EngineConfig(models=models_config, runtime=CPU)
    engine = Engine.load(cfg, cpu_budget=1)
    identity = engine.prepare_source([read_image(images_dir / "biden.jpg").frame])
    bad = np.empty(3, dtype=object)
    bad[0], bad[1], bad[2] = frames[0], np.zeros((10, 10), np.uint8), frames[2]
    out = run_chain(cfg, bad, identity)
    assert out["error"][0] == "" and out["error"][2] == ""
    assert "detect" in out["error"][1]
    assert np.array_equal(out["frame"][1], bad[1])
    assert len(out["frame"]) == 3


def test_unknown_source_id_marks_only_its_rows(models_config, images_dir, frames):
    cfg = EngineConfig(models=models_config, runtime=CPU)
    engine = Engine.load(cfg, cpu_budget=1)
    identity = engine.prepare_source([read_image(images_dir / "biden.jpg").frame])
    out = run_chain(cfg, frames, identity, {"source_id": np.array(["default", "default", "nope"], dtype=object)})
    assert out["error"][0] == "" and "unknown source_id" in out["error"][2]
    assert np.array_equal(out["frame"][2], frames[2])


def test_missing_column_is_a_wiring_error(models_config):
    stage = ChainStage(EngineConfig(models=models_config, runtime=CPU), "paste")
    with pytest.raises(StageInputError, match="lacks column"):
        stage({"frame": np.zeros((1, 8, 8, 3), np.uint8)})


def test_fused_stage_equals_the_chain(models_config, images_dir, frames):
    from fusion_ray.jobs.config import PipelineConfig
    from fusion_ray.runners.ray.build import FusedStage, stage_specs

    cfg = EngineConfig(models=models_config, runtime=CPU, enhance=EnhanceConfig(enabled=True))
    engine = Engine.load(cfg, cpu_budget=1)
    identity = engine.prepare_source([read_image(images_dir / "biden.jpg").frame])
    fused = FusedStage(stage_specs(cfg, PipelineConfig(), {"default": identity}, None, None))
    out = fused({"frame": frames, "index": np.arange(len(frames))})
    chained = run_chain(cfg, frames, identity)
    for i in range(len(frames)):
        assert np.array_equal(out["frame"][i], chained["frame"][i])
    assert [s.name for s in fused.stages] == stage_names(cfg)
    assert out["idle_ms_fused"].shape == (3,) and not out["idle_ms_detect"].any()  # the pool waits, not its stages


def test_fused_stage_reports_the_pools_waiting_not_its_stages_work():
    from fusion_ray.jobs.config import FUSED_POOL, StageResources
    from fusion_ray.runners.ray.build import FusedStage, StageSpec

    class Slow(Stage):
        name = "slow"

        def process(self, batch, errors):
            time.sleep(0.2)
            return {}

    class Quick(Stage):
        name = "quick"

        def process(self, batch, errors):
            return {}

    specs = [StageSpec(Quick, (), {}, StageResources()), StageSpec(Slow, (), {}, StageResources())]
    fused = FusedStage(specs)
    batch = {"frame": np.zeros((2, 4, 4, 3), np.uint8)}
    fused(batch)
    time.sleep(0.1)  # the actor waits for its next input
    out = fused(batch)
    waited = out[f"idle_ms_{FUSED_POOL}"].sum()
    assert 90 <= waited < 280  # the 0.1 s wait; counting the slow stage's 0.2 s would give 300+
    assert out[f"busy_ms_{FUSED_POOL}"].sum() >= out["busy_ms_slow"].sum() >= 190
    assert not out["idle_ms_quick"].any() and not out["idle_ms_slow"].any()


def test_a_tracked_detect_stage_cuts_the_read_tasks_faces_and_detects_images(models_config, images_dir, frames):
    """With tracking, a row marked ``tracked`` brings its faces (the read task's); an image row
    (not tracked) is detected by the stage as without tracking. The read columns retire."""
    from fusion_ray.core.facebatch import per_row
    from fusion_ray.core.layout import align_crops, swap_layout
    from fusion_ray.errors import FusionRayError

    cfg = EngineConfig(models=models_config, runtime=CPU)
    detector = Engine.load(cfg, cpu_budget=1).models.need_detector()
    read_face = detector.detect(frames[0])[0]
    moved = read_face.landmarks_5 + np.float32(3.0)  # not what the stage would detect: it must not detect
    batch = {"frame": per_row([frames[0], frames[2]]), "tracked": np.asarray([True, False]),
             "faces_found": np.asarray([2, 0], np.int32),
             "face_bbox": per_row([read_face.bbox_xyxy[None], np.zeros((0, 4), np.float32)]),
             "face_landmarks": per_row([moved[None], np.zeros((0, 5, 2), np.float32)]),
             "face_score": per_row([np.asarray([0.9], np.float32), np.zeros(0, np.float32)]),
             "face_track": per_row([np.asarray([4]), np.zeros(0, np.int64)])}
    out = ChainStage(cfg, "detect", cpu_budget=1, tracked=True, images=True)(batch)
    assert out["faces_detected"].tolist() == [2, 1] and out["faces_selected"].tolist() == [1, 1]
    assert "tracked" not in out and "faces_found" not in out
    layout = swap_layout(cfg)
    assert np.array_equal(out["face_crop"][0], align_crops(frames[0], moved[None], layout)[0])
    untracked = ChainStage(cfg, "detect", cpu_budget=1)({"frame": frames[2:]})
    assert np.array_equal(out["face_crop"][1], untracked["face_crop"][0])
    assert out["face_track"][0].tolist() == [4] and out["face_track"][1].tolist() == [-1]

    video_only = ChainStage(cfg, "detect", cpu_budget=1, tracked=True, images=False)
    assert video_only.models.detector is None  # a video-only job's detect stage loads no model
    assert video_only({**batch, "tracked": np.asarray([True, True])})["faces_selected"].tolist() == [1, 0]
    with pytest.raises(FusionRayError, match="without its detector"):
        video_only(batch)


def test_a_new_gpu_step_becomes_its_own_stage_with_the_gpu_pools_resources(monkeypatch):
    """A per-face step added in core/steps.py that wants a GPU (an occlusion model, say) gets its
    own pool between detect and swap; no stage is written for it."""
    from fusion_ray.core import steps
    from fusion_ray.jobs.config import PipelineConfig
    from fusion_ray.runners.ray.build import stage_specs

    occlusion = steps.Step("occlusion", "target_mask", lambda tools, rows, batch: batch, ("crops",), ("masks",),
                           wants_gpu=True)
    monkeypatch.setattr(steps, "STEPS", (*steps.STEPS, occlusion))
    cfg = EngineConfig(runtime=RuntimeConfig(providers=["cuda"]))
    assert stage_names(cfg) == ["detect", "occlusion", "swap", "paste"]
    pipeline = PipelineConfig(fuse="never")
    specs = {spec.name: spec for spec in stage_specs(cfg, pipeline, {}, None, None, gpus_available=True)}
    assert specs["occlusion"].resources == pipeline.swap and specs["occlusion"].gets_gpu
    assert not specs["paste"].gets_gpu
