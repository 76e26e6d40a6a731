"""The face classifier capability (FaceFusion's fairface): its row, its categories, the selector's
filters, and the wrapper on the STAND-IN (generated, labelled; it classifies nothing)."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import onnxruntime as ort
import pytest

from fusion_ray.models.face_classifier import (
    AGE_RANGES,
    FAIRFACE,
    FaceAttributes,
    FairFaceClassifier,
    age_of,
    classifier_crop,
    gender_of,
    kept_by_attributes,
    make_fairface_standin,
    race_of,
)
from fusion_ray.models.registry import get_spec, optional_specs
from fusion_ray.models.standins import build_standin, read_stand_in_label


def test_the_row_is_facefusions_fairface() -> None:
    spec = get_spec("fairface")
    assert spec is FAIRFACE and spec in optional_specs() and not spec.default_set
    assert spec.url.endswith("/models-3.0.0/fairface.onnx") and spec.hash_url.endswith("/models-3.0.0/fairface.hash")
    assert (spec.kind, spec.template, spec.crop_size, spec.color_order) == ("classifier", "arcface_112_v2", 224, "RGB")
    np.testing.assert_allclose(np.asarray(spec.mean) / 255, [0.485, 0.456, 0.406])
    np.testing.assert_allclose(np.asarray(spec.std) / 255, [0.229, 0.224, 0.225])


def test_ids_are_facefusions_categories() -> None:
    assert [gender_of(i) for i in (0, 1)] == ["male", "female"]
    assert [race_of(i) for i in range(7)] == ["white", "black", "latino", "asian", "asian", "indian", "arabic"]
    assert [age_of(i) for i in range(9)] == list(AGE_RANGES)
    assert age_of(8) == (70, 100) and age_of(12) == (70, 100)


FACES = [FaceAttributes("male", (20, 29), "white"), FaceAttributes("female", (30, 39), "asian"),
         FaceAttributes("female", (0, 2), "black")]


def test_the_selector_filters_are_facefusions() -> None:
    assert kept_by_attributes(FACES) == [0, 1, 2]
    assert kept_by_attributes(FACES, gender="female") == [1, 2]
    assert kept_by_attributes(FACES, race="asian") == [1]
    assert kept_by_attributes(FACES, gender="female", race="white") == []
    assert kept_by_attributes(FACES, age_start=25, age_end=35) == [0, 1]
    assert kept_by_attributes(FACES, age_start=2, age_end=20) == []  # range(0, 2) holds 0 and 1 only
    assert kept_by_attributes(FACES, age_end=3) == [2]
    with pytest.raises(ValueError, match="gender"):
        kept_by_attributes(FACES, gender="other")


def test_the_stand_in_has_the_real_shapes_and_ranges_and_is_labelled(tmp_path: Path) -> None:
    path = build_standin("fairface", tmp_path / "fairface.onnx")
    label = read_stand_in_label(path)
    assert label is not None and label["stand_in"] == "true" and label["stand_in_of"] == "fairface"
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (model_input,) = session.get_inputs()
    assert model_input.name == "input" and model_input.shape[1:] == [3, 224, 224]
    assert [o.name for o in session.get_outputs()] == ["race_id", "gender_id", "age_id"]
    rng = np.random.default_rng(0)
    crops = rng.integers(0, 256, (16, 224, 224, 3), dtype=np.uint8)
    classifier = FairFaceClassifier(session)
    assert classifier.stand_in
    found = classifier.classify(crops)
    assert len(found) == 16 and classifier.classify(crops[:0]) == []
    assert found == classifier.classify(crops)  # deterministic
    assert all(f.gender in ("male", "female") and f.age in AGE_RANGES for f in found)
    assert make_fairface_standin().SerializeToString() == make_fairface_standin().SerializeToString()


def test_the_crop_is_the_face_aligned_to_arcface_112_v2_at_224(images_dir: Path, tmp_path: Path) -> None:
    frame = np.asarray(cv2.imread(str(images_dir / "obama.jpg")), np.uint8)
    points = np.asarray([[380, 450], [520, 450], [450, 530], [395, 610], [505, 610]], np.float32)
    crop = classifier_crop(frame, points)
    assert crop.shape == (224, 224, 3) and crop.dtype == np.uint8
    path = build_standin("fairface", tmp_path / "fairface.onnx")
    classifier = FairFaceClassifier(ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]))
    assert classifier.classify_faces(frame, [points, points]) == classifier.classify(np.stack([crop, crop]))
