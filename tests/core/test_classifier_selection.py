"""Selection by gender, race and age through the chain, with the real SCRFD and the fairface
STAND-IN (generated and labelled: its answers are made up, so the test checks that the chain keeps
exactly the faces the stand-in's answers keep, not that they are right)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from fusion_ray.config import EngineConfig, ModelsConfig, RuntimeConfig, SelectionConfig
from fusion_ray.imageio import read_image
from fusion_ray.models.face_classifier import FairFaceClassifier, kept_by_attributes
from fusion_ray.models.hashes import write_hash_record
from fusion_ray.models.standins import build_standin
from fusion_ray.runners.inline import Engine, required_components

CPU = RuntimeConfig(providers=["cpu"])


@pytest.fixture(scope="module")
def fairface(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = build_standin("fairface", tmp_path_factory.mktemp("fairface") / "fairface.onnx")
    write_hash_record(path, "generated")
    return path


@pytest.fixture(scope="module")
def models(models_config: ModelsConfig, fairface: Path) -> ModelsConfig:
    return models_config.model_copy(update={"paths": {**models_config.paths, "fairface": fairface}})


def test_the_classifier_is_loaded_only_when_a_filter_is_given() -> None:
    assert "classifier" not in required_components(EngineConfig())
    for given in ({"gender": "female"}, {"race": "asian"}, {"age_start": 20}, {"age_end": 30}):
        assert "classifier" in required_components(EngineConfig(selection=SelectionConfig(**given)))


@pytest.mark.parametrize("given", [{"gender": "female"}, {"gender": "male"}, {"race": "white"},
                                   {"age_start": 20, "age_end": 50}])
def test_the_chain_swaps_the_faces_the_classifier_keeps(models: ModelsConfig, fairface: Path, images_dir: Path,
                                                         given: dict[str, object]) -> None:
    target = read_image(images_dir / "obama_and_biden.jpg").frame
    plain = Engine.load(EngineConfig(models=models, runtime=CPU), cpu_budget=1)
    faces = plain.models.need_detector().detect(target)
    classifier = FairFaceClassifier(ort.InferenceSession(str(fairface), providers=["CPUExecutionProvider"]))
    expected = len(kept_by_attributes(classifier.classify_faces(target, [f.landmarks_5 for f in faces]),
                                      **given))  # type: ignore[arg-type]
    engine = Engine.load(EngineConfig(models=models, runtime=CPU, selection=SelectionConfig(**given)), cpu_budget=1)
    assert engine.models.classifier is not None and engine.models.classifier.stand_in
    identity = engine.prepare_source([read_image(images_dir / "obama.jpg").frame])
    result = engine.process_frame(target, identity)
    assert result.faces_swapped == expected
    assert np.array_equal(result.frame, target) == (expected == 0)


def test_a_video_filtered_by_the_classifier_is_detected_on_every_frame() -> None:
    assert EngineConfig().tracks_faces
    assert not EngineConfig(selection=SelectionConfig(gender="male")).tracks_faces
    assert not EngineConfig(tracking=False).tracks_faces
