"""End to end with the real detector and stand-in models (labelled as such)."""

import logging

import cv2
import numpy as np
import pytest

from fusion_ray.config import (
    EngineConfig,
    EnhanceConfig,
    RuntimeConfig,
    SelectionConfig,
    SwapConfig,
)
from fusion_ray.errors import NoFaceError
from fusion_ray.imageio import read_image
from fusion_ray.ops.align import align_face
from fusion_ray.ops.paste import crop_roi
from fusion_ray.runners.inline import Engine, required_components

CPU = RuntimeConfig(providers=["cpu"])


def make_engine(models_config, **sections) -> Engine:
    cfg = EngineConfig(models=models_config, runtime=CPU, **sections)
    return Engine.load(cfg, cpu_budget=1)


@pytest.fixture(scope="module")
def images(images_dir):
    return {name: read_image(images_dir / f"{name}.jpg").frame for name in ("obama", "biden", "obama_and_biden")}


@pytest.fixture(scope="module")
def inswapper_engine(models_config):
    return make_engine(models_config)


def _outside_mask(engine: Engine, frame, faces):
    outside = np.ones(frame.shape[:2], bool)
    for face in faces:
        _, affine = align_face(frame, face.landmarks_5, engine.swap_layout.template, engine.swap_layout.size)
        roi = crop_roi(affine, engine.swap_layout.size, frame.shape[:2])
        outside[roi.y0:roi.y1, roi.x0:roi.x1] = False
    return outside


def test_required_components():
    assert required_components(EngineConfig()) == {"detector", "embedder", "swapper"}
    assert required_components(EngineConfig(swap=SwapConfig(swapper="classic"))) == {"detector", "swapper"}
    assert "enhancer" in required_components(EngineConfig(enhance=EnhanceConfig(enabled=True)))


def test_stand_ins_are_labelled(inswapper_engine, caplog):
    assert inswapper_engine.stand_in_models == ["arcface_w600k_r50", "inswapper_128"]
    assert inswapper_engine.model_info["scrfd_2.5g"].stand_in is False


def test_swap_changes_only_the_face_regions(inswapper_engine, images):
    identity = inswapper_engine.prepare_source([images["obama"]])
    target = images["obama_and_biden"]
    result = inswapper_engine.process_frame(target, identity)
    assert result.faces_detected == result.faces_swapped == 3
    outside = _outside_mask(inswapper_engine, target, inswapper_engine.detect(target))
    assert np.array_equal(result.frame[outside], target[outside])
    assert np.abs(result.frame.astype(int) - target.astype(int))[~outside].mean() > 1.0
    assert set(result.timings_ms) >= {"detect", "align", "swap", "paste"}


def test_two_sources_give_two_outputs(inswapper_engine, images):
    target = images["obama_and_biden"]
    a = inswapper_engine.process_frame(target, inswapper_engine.prepare_source([images["obama"]])).frame
    b = inswapper_engine.process_frame(target, inswapper_engine.prepare_source([images["biden"]])).frame
    assert np.abs(a.astype(int) - b.astype(int)).mean() > 0.05


def test_several_sources_average_into_one_identity(inswapper_engine, images):
    one = inswapper_engine.prepare_source([images["obama"]])
    two = inswapper_engine.prepare_source([images["obama"], images["biden"]])
    assert two.num_images == 2
    assert np.linalg.norm(two.embedding) == pytest.approx(1.0, abs=1e-5)
    assert not np.allclose(one.embedding, two.embedding)


def test_no_face_in_source_is_an_error(inswapper_engine):
    with pytest.raises(NoFaceError, match="no face found in source image blank"):
        inswapper_engine.prepare_source([np.full((200, 200, 3), 90, np.uint8)], ["blank"])


def test_no_face_in_target_returns_it_unchanged(inswapper_engine, images):
    identity = inswapper_engine.prepare_source([images["obama"]])
    blank = np.full((240, 320, 3), 30, np.uint8)
    result = inswapper_engine.process_frame(blank, identity)
    assert result.faces_detected == 0 and np.array_equal(result.frame, blank)


@pytest.mark.parametrize("mode,index,expected", [("largest", 0, 1), ("index", 1, 1), ("index", 5, 0)])
def test_selection_modes(models_config, images, mode, index, expected):
    engine = make_engine(models_config, selection=SelectionConfig(mode=mode, index=index))
    identity = engine.prepare_source([images["obama"]])
    assert engine.process_frame(images["obama_and_biden"], identity).faces_swapped == expected


def test_reference_selection_uses_embeddings(models_config, images, images_dir):
    engine = make_engine(models_config, selection=SelectionConfig(
        mode="reference", reference_path=images_dir / "biden.jpg", max_distance=0.05))
    reference = engine.prepare_reference(images["biden"])
    identity = engine.prepare_source([images["obama"]])
    # The reference image itself: its one face is at distance ~0.
    assert engine.process_frame(images["biden"], identity, reference).faces_swapped == 1
    # Another person's photo: no face close enough to the reference.
    assert engine.process_frame(images["obama"], identity, reference).faces_swapped == 0


def test_enhancer_runs_after_the_swap(models_config, images):
    engine = make_engine(models_config, enhance=EnhanceConfig(enabled=True, blend=1.0))
    plain = make_engine(models_config)
    identity = engine.prepare_source([images["obama"]])
    enhanced = engine.process_frame(images["biden"], identity)
    swapped = plain.process_frame(images["biden"], identity)
    assert "enhance" in enhanced.timings_ms
    assert not np.array_equal(enhanced.frame, swapped.frame)
    assert "gfpgan_1.4" in engine.stand_in_models


def _aligned(engine, frame):
    face = max(engine.detect(frame), key=lambda f: f.area)
    crop, _ = align_face(frame, face.landmarks_5, "arcface_128", 128)
    grey = cv2.cvtColor(crop, cv2.COLOR_BGR2GRAY).astype(np.float32)
    inner = grey[40:110, 30:98]
    return (inner - inner.mean()) / (inner.std() + 1e-6)


@pytest.mark.parametrize("poisson", [False, True])
def test_classic_swapper_moves_the_source_face_in(models_config, images, poisson):
    engine = make_engine(models_config, swap=SwapConfig(swapper="classic", poisson=poisson))
    assert engine.models.embedder is None and engine.models.inswapper is None  # model-free
    identity = engine.prepare_source([images["obama"]])
    result = engine.process_frame(images["biden"], identity)
    assert result.faces_swapped == 1
    out, src, tgt = _aligned(engine, result.frame), _aligned(engine, images["obama"]), _aligned(engine, images["biden"])
    to_source = float(np.mean((out - src) ** 2))
    to_target = float(np.mean((out - tgt) ** 2))
    print(f"classic poisson={poisson}: distance to source {to_source:.3f}, to target {to_target:.3f}")
    assert to_source < 0.6 * to_target


def test_engine_without_a_component_says_so(models_config, images):
    engine = Engine.load(EngineConfig(models=models_config, runtime=CPU), components=["detector"], cpu_budget=1)
    with pytest.raises(Exception, match="without its swapper"):
        _ = engine.backend


def test_stand_in_warning_is_logged(models_config, caplog):
    with caplog.at_level(logging.WARNING, logger="fusion_ray"):
        make_engine(models_config)
    assert any("STAND-IN" in r.getMessage() for r in caplog.records)
