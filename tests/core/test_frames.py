"""FrameChain: a batch of frames through the whole chain equals the engine frame by frame."""

import numpy as np
import pytest

from fusion_ray.config import (
    DetectorConfig,
    EngineConfig,
    EnhanceConfig,
    RuntimeConfig,
    SelectionConfig,
    SwapConfig,
)
from fusion_ray.core import chain
from fusion_ray.core.frames import FrameChain, FrameJob, FrameRequest
from fusion_ray.imageio import read_image
from fusion_ray.live.follow import StreamFollower
from fusion_ray.runners.inline import Engine


@pytest.fixture(scope="module")
def engine(models_config):
    cfg = EngineConfig(models=models_config, runtime=RuntimeConfig(providers=["cpu"]), swap=SwapConfig(swapper="classic"))
    return Engine.load(cfg, components=["detector"], cpu_budget=1)


@pytest.fixture(scope="module")
def photos(images_dir):
    return {name: read_image(images_dir / f"{name}.jpg").frame for name in ("obama", "biden", "obama_and_biden")}


def test_a_batch_of_frames_equals_the_engine_frame_by_frame(engine, photos):
    frames = FrameChain(engine.cfg, engine.models)
    obama, biden = engine.prepare_source([photos["obama"]]), engine.prepare_source([photos["biden"]])
    jobs = [FrameJob(FrameRequest(photos["biden"], chain.Selection("all")), "o", obama),
            FrameJob(FrameRequest(photos["obama_and_biden"], chain.Selection("largest")), "b", biden),
            FrameJob(FrameRequest(photos["obama_and_biden"], chain.Selection("all")), "o", obama)]
    timings: dict[str, float] = {}
    done = frames.run(jobs, timings)
    assert set(timings) >= {"detect", "select", "align", "swap", "mask", "paste"} and "track" not in timings
    assert all(timings[s] > 0 for s in ("detect", "select", "align", "swap", "mask", "paste"))
    for job, result, identity in zip(jobs, done, (obama, biden, obama), strict=True):
        cfg = engine.cfg.model_copy(update={"selection": SelectionConfig(mode=job.request.selection.mode)})
        expected = Engine(cfg, engine.models).process_frame(job.request.frame, identity)
        assert result.error == "" and np.array_equal(result.frame, expected.frame)
        assert (result.faces_detected, result.faces_swapped) == (expected.faces_detected, expected.faces_swapped)
    assert [d.faces_swapped for d in done][:2] == [1, 1] and done[2].faces_swapped >= 2  # batched: 4+ faces


def test_each_frame_has_its_own_enhancement_and_detector_canvas(models_config, photos):
    """Per-frame rows of the declared chain: a batch mixing enhanced (two blends) and plain frames,
    and a smaller detector canvas, equals the engine configured for each frame."""
    cfg = EngineConfig(models=models_config, runtime=RuntimeConfig(providers=["cpu"]),
                       swap=SwapConfig(swapper="classic"))
    engine = Engine.load(cfg, components=["detector", "enhancer"], cpu_budget=1)
    obama = engine.prepare_source([photos["obama"]])
    jobs = [FrameJob(FrameRequest(photos["biden"], chain.Selection("all"), enhance_blend=0.5), "o", obama),
            FrameJob(FrameRequest(photos["obama_and_biden"], chain.Selection("all")), "o", obama),
            FrameJob(FrameRequest(photos["obama_and_biden"], chain.Selection("all"), enhance_blend=1.0), "o", obama),
            FrameJob(FrameRequest(photos["obama_and_biden"], chain.Selection("all"), detector_size=320), "o", obama)]
    done = FrameChain(engine.cfg, engine.models).run(jobs)
    for job, result in zip(jobs, done, strict=True):
        enhance = EnhanceConfig(enabled=job.request.enhance_blend is not None, blend=job.request.enhance_blend or 0.8)
        detector = DetectorConfig(size=job.request.detector_size or 640)
        models = engine.models if job.request.detector_size is None else Engine.load(  # (its detector's canvas)
            cfg.model_copy(update={"detector": detector}), components=["detector"], cpu_budget=1).models
        expected = Engine(cfg.model_copy(update={"enhance": enhance}), models).process_frame(job.request.frame, obama)
        assert result.error == "" and np.array_equal(result.frame, expected.frame)
        assert (result.faces_detected, result.faces_swapped) == (expected.faces_detected, expected.faces_swapped)
    assert not np.array_equal(done[1].frame, done[2].frame)  # the enhancer ran on one of them only


def test_a_failed_frame_fails_alone_and_comes_back_unchanged(engine, photos):
    frames = FrameChain(engine.cfg, engine.models)
    obama = engine.prepare_source([photos["obama"]])
    broken = np.zeros((0, 0, 3), np.uint8)
    done = frames.run([FrameJob(FrameRequest(broken, chain.Selection("all")), "o", obama),
                       FrameJob(FrameRequest(photos["biden"], chain.Selection("all")), "o", obama)])
    assert done[0].error.startswith("detect") and done[0].faces_swapped == 0
    assert done[1].error == "" and done[1].faces_swapped == 1


def test_a_follower_follows_the_faces_between_detections(engine, photos):
    frames = FrameChain(engine.cfg, engine.models)
    obama = engine.prepare_source([photos["obama"]])
    follower = StreamFollower(engine.cfg.tracking)
    first = frames.run([FrameJob(FrameRequest(photos["biden"], chain.Selection("all"), seq=0, follower=follower), "o", obama)])[0]
    assert first.follower is follower and follower.predictions(1, True)
    timings: dict[str, float] = {}
    second = frames.run([FrameJob(FrameRequest(photos["biden"], chain.Selection("all"), seq=1, follow=True,
                                  follower=follower), "o", obama)], timings)[0]
    assert timings["track"] > 0 and timings["swap"] > 0 and timings["paste"] > 0  # each step's busy ms
    assert second.error == "" and second.faces_swapped == 1 and follower.crops  # re-detected on a crop
    assert np.abs(second.landmarks - first.landmarks).max() < 3.0


def test_a_job_and_its_follower_cross_a_process_boundary(engine, photos):
    """The fused Serve placement pickles each job (with a live stream's follower) to its replica and
    the updated follower back: the copy follows the faces as the original would."""
    from ray import cloudpickle

    frames = FrameChain(engine.cfg, engine.models)
    obama = engine.prepare_source([photos["obama"]])
    job = FrameJob(FrameRequest(photos["biden"], chain.Selection("all"), seq=0,
                   follower=StreamFollower(engine.cfg.tracking)), "o", obama)
    done = cloudpickle.loads(cloudpickle.dumps(frames.run([cloudpickle.loads(cloudpickle.dumps(job))])[0]))
    assert isinstance(done.follower, StreamFollower) and done.follower is not job.request.follower
    assert done.follower.predictions(1, True) and not job.request.follower.predictions(1, True)


def test_each_frame_has_its_own_facefusion_options(engine, photos):
    """A batch mixing request options (box padding and blur, area masks on dlib's 68 points, the
    landmarker score) equals the engine configured with the same options by the one mapping
    (fusion_ray.core.facefusion_options), frame by frame; frames with the same options run together."""
    pytest.importorskip("dlib", reason="the dlib_68 landmarker needs the [landmarks] extra")
    from fusion_ray.core.facefusion_options import FaceFusionOptions, configured

    cfg = engine.cfg.model_copy(update={"landmarker": engine.cfg.landmarker.model_copy(update={"model": "dlib_68"})})
    models = Engine.load(cfg, components=["detector", "landmarker"], cpu_budget=1).models
    obama = engine.prepare_source([photos["obama"]])
    padded = FaceFusionOptions(face_mask_padding=(20, 0, 0, 0), face_mask_blur=0.6)
    area = FaceFusionOptions.model_validate({"face_mask_types": "box area", "face_mask_areas": ["lower-face"],
                                             "face_landmarker_score": 0.2})
    options = [padded, FaceFusionOptions(), area, padded]
    targets = [photos["biden"], photos["biden"], photos["obama_and_biden"], photos["obama_and_biden"]]
    jobs = [FrameJob(FrameRequest(t, chain.Selection("all"), options=o), "o", obama)
            for t, o in zip(targets, options, strict=True)]
    done = FrameChain(cfg, models).run(jobs)
    for job, result in zip(jobs, done, strict=True):
        expected = Engine(configured(cfg, job.request.options), models).process_frame(job.request.frame, obama)
        assert result.error == "" and np.array_equal(result.frame, expected.frame)
        assert result.faces_swapped == expected.faces_swapped > 0
    assert not np.array_equal(done[0].frame, done[1].frame)  # the options changed the pixels


def test_options_that_make_an_invalid_config_fail_their_frame_only(engine, photos):
    from fusion_ray.core.facefusion_options import FaceFusionOptions

    obama = engine.prepare_source([photos["obama"]])
    boost = FaceFusionOptions(face_swapper_pixel_boost="256x256")  # the classic swapper has no pixel boost
    done = FrameChain(engine.cfg, engine.models).run([
        FrameJob(FrameRequest(photos["biden"], chain.Selection("all"), options=boost), "o", obama),
        FrameJob(FrameRequest(photos["biden"], chain.Selection("all")), "o", obama)])
    assert "pixel boost" in done[0].error and done[0].faces_swapped == 0
    assert np.array_equal(done[0].frame, photos["biden"])
    assert done[1].error == "" and done[1].faces_swapped == 1


def test_a_frames_enhancer_weight_reaches_the_enhancer(rows_models_config, photos):
    """face_enhancer_weight per request: the codeformer STAND-IN (labelled, not a real model; its
    output moves with its weight input) enhances with the request's weight, in the fused chain
    and in the engine configured with it (the inline path), not the weight it was loaded with."""
    from fusion_ray.core.facefusion_options import FaceFusionOptions, configured

    cfg = EngineConfig(models=rows_models_config.model_copy(update={"enhancer": "codeformer"}),
                       runtime=RuntimeConfig(providers=["cpu"]), swap=SwapConfig(swapper="classic"))
    engine = Engine.load(cfg, components=["detector", "enhancer"], cpu_budget=1)
    obama = engine.prepare_source([photos["obama"]])
    heavy = FaceFusionOptions(face_enhancer_weight=0.9)
    jobs = [FrameJob(FrameRequest(photos["biden"], chain.Selection("all"), enhance_blend=1.0, options=o), "o", obama)
            for o in (FaceFusionOptions(), heavy)]
    plain, weighted = FrameChain(cfg, engine.models).run(jobs)
    assert plain.error == weighted.error == "" and plain.faces_swapped == weighted.faces_swapped == 1
    assert not np.array_equal(plain.frame, weighted.frame)  # the weight changed the enhanced face
    enhanced = configured(cfg, heavy).model_copy(update={"enhance": EnhanceConfig(enabled=True, blend=1.0, weight=0.9)})
    inline = Engine(enhanced, engine.models).process_frame(photos["biden"], obama)
    assert np.array_equal(inline.frame, weighted.frame)


def test_a_frames_detector_angles_are_its_options(engine, photos):
    """FaceFusion's --face-detector-angles per request: a photo turned a quarter clockwise is found
    upright only on the frame whose options turn it back."""
    import cv2

    from fusion_ray.core.facefusion_options import FaceFusionOptions

    frames = FrameChain(engine.cfg, engine.models)
    obama = engine.prepare_source([photos["obama"]])
    turned = np.ascontiguousarray(cv2.rotate(photos["biden"], cv2.ROTATE_90_CLOCKWISE))
    angles = FaceFusionOptions.model_validate({"face_detector_angles": "0 90"})
    plain, with_angles = frames.run([FrameJob(FrameRequest(turned, chain.Selection("all")), "o", obama),
                                     FrameJob(FrameRequest(turned, chain.Selection("all"), options=angles), "o", obama)])
    from fusion_ray.ops.rotate import map_points, turn_matrix

    upright = engine.models.need_detector().detect(photos["biden"])[0]
    height, width = photos["biden"].shape[:2]
    onto, _ = turn_matrix(-90, (width, height))
    size = float(upright.bbox_xyxy[2] - upright.bbox_xyxy[0])
    assert with_angles.error == "" and with_angles.faces_swapped == 1
    assert np.linalg.norm(with_angles.landmarks[0] - map_points(upright.landmarks_5, onto), axis=1).max() < 0.03 * size
    assert not np.array_equal(with_angles.frame, plain.frame)
