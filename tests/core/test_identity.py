"""Source identities for swappers given the source as an image (blendswap_256, uniface_256): the
identity carries the crop of the row's source template and size, cut where identities are built.
The source face is aligned as the targets are: on the 5 points made from a confident 68-point
landmarker's points (FaceFusion's rule), else on the detector's. On STAND-INs (labelled, not real
swaps) with the real SCRFD detector."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from fusion_ray.config import (
    EngineConfig,
    LandmarkerConfig,
    ModelsConfig,
    RuntimeConfig,
    SwapConfig,
)
from fusion_ray.core import identity
from fusion_ray.core.layout import embed_layout, source_crop_layout
from fusion_ray.core.modelset import ModelSet
from fusion_ray.fsutil import atomic_write_bytes
from fusion_ray.imageio import read_image
from fusion_ray.models.embedder import l2_normalise
from fusion_ray.models.hashes import write_hash_record
from fusion_ray.models.landmarker import Fan68Landmarker, Landmarks68
from fusion_ray.models.standins_quality import make_quality_standin, synthetic_face_68
from fusion_ray.ops.align import align_face
from fusion_ray.ops.landmarks import landmarks_68_to_5
from fusion_ray.runners.inline import Engine
from fusion_ray.types import Face
from tests.models.session_helpers import recording

CPU = RuntimeConfig(providers=["cpu"])


def _cfg(models_config: ModelsConfig, swapper: str) -> EngineConfig:
    return EngineConfig(models=models_config.model_copy(update={"swapper": swapper}), runtime=CPU)


@pytest.mark.parametrize(("name", "template", "size"), [("blendswap_256", "arcface_112_v2", 112),
                                                        ("uniface_256", "ffhq_512", 256)])
def test_a_crop_fed_row_gets_the_source_crop_of_its_template(rows_models_config, images_dir, name, template,  # type: ignore[no-untyped-def]
                                                             size) -> None:
    cfg = _cfg(rows_models_config, name)
    engine = Engine.load(cfg, cpu_budget=1)
    assert engine.models.embedder is None  # the source is an image: no embedder to load
    source = read_image(images_dir / "biden.jpg").frame
    prepared = engine.prepare_source([source])
    face = identity.largest_face(engine.detect(source))
    assert face is not None and prepared.crop is not None and prepared.latent is None
    expected, _ = align_face(source, face.landmarks_5, template, size)
    assert np.array_equal(prepared.crop, expected)
    backend = engine.backend
    session = recording(backend.model)  # type: ignore[attr-defined]
    engine.process_frame(read_image(images_dir / "obama.jpg").frame, prepared)
    np.testing.assert_allclose(session.fed("source"), (expected[None, ..., ::-1] / 255.0).transpose(0, 3, 1, 2),
                               atol=1e-6)  # the identity's crop, RGB / 255, NCHW


def test_an_identity_made_for_another_swapper_fails_its_frame_not_the_batch(rows_models_config, images_dir) -> None:  # type: ignore[no-untyped-def]
    hyperswap = _cfg(rows_models_config, "hyperswap_1a_256")
    assert source_crop_layout(hyperswap) is None
    embedded = Engine.load(hyperswap, cpu_budget=1).prepare_source(
        [read_image(images_dir / "biden.jpg").frame])
    assert embedded.crop is None and embedded.embedding is not None
    blendswap = _cfg(rows_models_config, "blendswap_256")
    engine = Engine.load(blendswap, cpu_budget=1)
    with pytest.raises(ValueError, match="blendswap_256 needs a source identity with a arcface_112_v2 crop"):
        engine.backend.check_identity(embedded)


def test_classic_keeps_its_swap_crop() -> None:
    layout = source_crop_layout(EngineConfig(swap=SwapConfig(swapper="classic")))
    assert layout is not None and (layout.template, layout.size) == ("arcface_128", 256)


class _FixedLandmarker(Fan68Landmarker):
    """68 points: the synthetic face filling each box, with a fixed score (no model file)."""

    def __init__(self, score: float) -> None:  # noqa: D107 - no session: detect is replaced
        self.score = score

    def detect(self, frame: np.ndarray, boxes: npt.ArrayLike, landmarks_5: npt.ArrayLike) -> Landmarks68:
        rows = np.asarray(boxes, np.float32).reshape(-1, 4)
        points = np.stack([box[:2] + synthetic_face_68() * (box[2:] - box[:2]) for box in rows]).astype(np.float32)
        return Landmarks68(points, np.full(len(rows), self.score, np.float32))


FRAME = np.zeros((200, 200, 3), np.uint8)
FACE = Face(np.array([40.0, 30.0, 160.0, 180.0]), np.array([[80, 90], [120, 90], [100, 115], [85, 140], [115, 140]]),
            0.9)
SYNTHETIC_5 = landmarks_68_to_5(FACE.bbox_xyxy[:2] + synthetic_face_68() * (FACE.bbox_xyxy[2:] - FACE.bbox_xyxy[:2]))


@pytest.mark.parametrize(("model", "score", "threshold", "expected"), [
    ("2dfan4", 0.9, 0.5, SYNTHETIC_5),  # confident: the 5 points made from the 68
    ("dlib_68", 0.9, 0.5, SYNTHETIC_5),
    ("2dfan4", 0.5, 0.5, FACE.landmarks_5),  # not over the threshold: the detector's
    ("2dfan4", 0.3, 0.5, FACE.landmarks_5),
    ("none", 0.9, 0.5, FACE.landmarks_5),  # no landmarker configured
])
def test_the_source_face_is_aligned_on_a_confident_landmarkers_points(model: str, score: float, threshold: float,
                                                                       expected: np.ndarray) -> None:
    cfg = EngineConfig(landmarker=LandmarkerConfig(model=model, score=threshold))  # type: ignore[arg-type]
    models = ModelSet(loaded={"landmarker": _FixedLandmarker(score)})
    face = identity.landmarked_face(models, cfg, FRAME, FACE)
    np.testing.assert_allclose(face.landmarks_5, expected, atol=1e-4)
    assert np.array_equal(face.bbox_xyxy, FACE.bbox_xyxy) and face.score == FACE.score


def test_without_a_loaded_landmarker_the_detectors_points_are_kept() -> None:
    cfg = EngineConfig(landmarker=LandmarkerConfig(model="2dfan4"))
    assert identity.landmarked_face(ModelSet(), cfg, FRAME, FACE) is FACE


@pytest.fixture(scope="module")
def fan_standin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("fan") / "2dfan4.onnx"
    atomic_write_bytes(path, make_quality_standin("2dfan4").SerializeToString())
    write_hash_record(path, "generated")
    return path


def test_the_source_is_embedded_on_the_points_the_landmarker_gives(models_config, fan_standin, images_dir) -> None:  # type: ignore[no-untyped-def]
    """prepare_source embeds the source face on the 68 -> 5 points of the (confident) 2dfan4
    stand-in, as FaceFusion does, not on the detector's 5."""
    paths = {**models_config.paths, "2dfan4": fan_standin}
    cfg = EngineConfig(models=models_config.model_copy(update={"paths": paths}), runtime=CPU,
                       landmarker=LandmarkerConfig(model="2dfan4"))
    engine = Engine.load(cfg, components=["detector", "embedder", "landmarker", "swapper"], cpu_budget=1)
    source = read_image(images_dir / "obama.jpg").frame
    face = identity.largest_face(engine.detect(source))
    assert face is not None
    found = engine.models.need_landmarker().detect(source, face.bbox_xyxy[None], face.landmarks_5[None])
    assert found.scores[0] > cfg.landmarker.score
    five = landmarks_68_to_5(found.points[0])
    assert np.abs(five - face.landmarks_5).max() > 2.0  # the stand-in's points are not the detector's

    def embedding_on(points: np.ndarray) -> np.ndarray:
        crop = align_face(source, points, embed_layout(cfg).template, embed_layout(cfg).size)[0]
        return l2_normalise(engine.models.need_embedder().embed_crops(crop[None]))[0]

    prepared = engine.prepare_source([source])
    assert prepared.embedding is not None
    np.testing.assert_allclose(prepared.embedding, embedding_on(five), atol=1e-5)
    assert not np.allclose(prepared.embedding, embedding_on(face.landmarks_5), atol=1e-3)
    # the reference is matched with target faces embedded before the landmark step: detector's points
    reference = l2_normalise(engine.prepare_reference(source)[None])[0]
    np.testing.assert_allclose(reference, embedding_on(face.landmarks_5), atol=1e-5)
