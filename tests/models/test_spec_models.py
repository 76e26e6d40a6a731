"""Swappers and converters driven by their registry rows, on their STAND-INs (labelled, not real)."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from fusion_ray.errors import ModelError
from fusion_ray.models.registry import get_spec
from fusion_ray.models.registry_swappers import SWAPPER_SPECS
from fusion_ray.models.spec_models import (
    EmbeddingConverter,
    SpecSwapper,
    source_crop_blob,
)
from fusion_ray.models.standins import make_standin
from fusion_ray.ops.source_weight import balance_embedding
from tests.models.session_helpers import recording

SWAPPERS = [s.name for s in SWAPPER_SPECS if s.kind == "swapper"]


def _session(name: str) -> ort.InferenceSession:
    return ort.InferenceSession(make_standin(name).SerializeToString(), providers=["CPUExecutionProvider"])


def _swapper(name: str) -> SpecSwapper:
    spec = get_spec(name)
    converter = EmbeddingConverter(_session(spec.converter), get_spec(spec.converter)) if spec.converter else None
    return SpecSwapper(_session(name), spec, converter)


def _sources(swapper: SpecSwapper, n: int, rng: np.random.Generator) -> np.ndarray:
    if swapper.spec.source_form == "crop":
        size = swapper.spec.source_size
        return swapper.source_rows(source_crops=rng.integers(0, 100, (n, size, size, 3), dtype=np.uint8))
    return swapper.source_rows(rng.standard_normal((n, 512)).astype(np.float32))


@pytest.mark.parametrize("name", SWAPPERS)
def test_swap_round_trips_the_rows_normalisation_and_output_range(name: str) -> None:
    swapper = _swapper(name)
    assert swapper.stand_in and swapper.crop_size == swapper.spec.crop_size
    rng = np.random.default_rng(0)
    size = swapper.crop_size
    crops = rng.integers(0, 256, (2, size, size, 3), dtype=np.uint8)
    swapped = swapper.swap(crops, _sources(swapper, 2, rng))
    assert swapped.shape == crops.shape and swapped.dtype == np.uint8
    # the stand-in returns the target's own pixels plus a source pattern of at most 10% of the range:
    # a wrong mean/std, colour order or output range would move pixels much further
    difference = np.abs(swapped.astype(int) - crops.astype(int))
    assert difference.max() <= 27 and difference.mean() > 1.0


def test_embedding_sources_are_normalised_converted_and_balanced() -> None:
    rng = np.random.default_rng(1)
    embeddings = rng.standard_normal((3, 512)).astype(np.float32) * 20
    hyperswap = _swapper("hyperswap_1a_256")
    np.testing.assert_allclose(np.linalg.norm(hyperswap.source_rows(embeddings), axis=1), 1.0, rtol=1e-5)
    simswap, ghost = _swapper("simswap_256"), _swapper("ghost_2_256")
    converted = simswap.converter.convert(embeddings)  # type: ignore[union-attr]
    np.testing.assert_allclose(simswap.source_rows(embeddings), converted / np.linalg.norm(converted, axis=1,
                                                                                          keepdims=True), rtol=1e-5)
    raw = ghost.converter.convert(embeddings)  # type: ignore[union-attr]
    np.testing.assert_allclose(ghost.source_rows(embeddings), raw, rtol=1e-5)  # ghost: not normalised
    targets = rng.standard_normal((3, 512)).astype(np.float32)
    balanced = hyperswap.source_rows(embeddings, target_embeddings=targets, weight=0.0)
    np.testing.assert_allclose(balanced, balance_embedding(hyperswap.source_rows(embeddings), targets, 0.0), rtol=1e-5)


def test_crop_sources_are_rgb_over_255() -> None:
    crops = np.zeros((1, 112, 112, 3), np.uint8)
    crops[..., 2] = 255  # red in BGR
    blob = _swapper("blendswap_256").source_rows(source_crops=crops)
    assert blob.shape == (1, 3, 112, 112) and blob[0, :, 0, 0].tolist() == [1.0, 0.0, 0.0]
    with pytest.raises(ValueError, match="112"):
        source_crop_blob(np.zeros((1, 256, 256, 3), np.uint8), 112)
    with pytest.raises(ValueError, match="crop"):
        _swapper("uniface_256").source_rows(np.zeros((1, 512), np.float32))


def test_a_converted_swapper_needs_its_converter() -> None:
    with pytest.raises(ModelError, match="crossface_simswap"):
        SpecSwapper(_session("simswap_256"), get_spec("simswap_256"))
    with pytest.raises(ModelError, match="inswapper"):
        SpecSwapper(_session("hyperswap_1a_256"), get_spec("inswapper_128"))


# FaceFusion 3.8.1's face_swapper model set, read for facts, written here
# apart from the registry so that a wrong row fails: template, size, mean and std in [0, 1] units,
# and whether the output is de-normalised (x * std + mean) or already in [0, 1].
HALF = (0.5, 0.5, 0.5)
ZERO, ONE = (0.0, 0.0, 0.0), (1.0, 1.0, 1.0)
IMAGENET = ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
FACEFUSION_SWAPPERS = {
    "hyperswap_1a_256": ("arcface_128", 256, HALF, HALF, True),
    "hyperswap_1b_256": ("arcface_128", 256, HALF, HALF, True),
    "hyperswap_1c_256": ("arcface_128", 256, HALF, HALF, True),
    "simswap_256": ("arcface_112_v1", 256, *IMAGENET, False),
    "simswap_unofficial_512": ("arcface_112_v1", 512, ZERO, ONE, False),
    "ghost_1_256": ("arcface_112_v1", 256, HALF, HALF, True),
    "ghost_2_256": ("arcface_112_v1", 256, HALF, HALF, True),
    "ghost_3_256": ("arcface_112_v1", 256, HALF, HALF, True),
    "hififace_unofficial_256": ("mtcnn_512", 256, HALF, HALF, True),
    "blendswap_256": ("ffhq_512", 256, ZERO, ONE, False),
    "uniface_256": ("ffhq_512", 256, HALF, HALF, True),
}


def test_the_table_covers_every_swapper_row() -> None:
    assert sorted(FACEFUSION_SWAPPERS) == sorted(SWAPPERS)


@pytest.mark.parametrize("name", SWAPPERS)
def test_the_session_gets_facefusions_target_blob_and_its_output_maps_back_to_pixels(name: str) -> None:
    template, size, mean, std, denormalised = FACEFUSION_SWAPPERS[name]
    swapper = _swapper(name)
    assert (swapper.template, swapper.crop_size) == (template, size)
    session = recording(swapper)
    rng = np.random.default_rng(3)
    crops = rng.integers(0, 256, (2, size, size, 3), dtype=np.uint8)
    swapped = swapper.swap(crops, _sources(swapper, 2, rng))
    rgb = crops[..., ::-1].astype(np.float64) / 255.0
    expected = ((rgb - np.array(mean)) / np.array(std)).transpose(0, 3, 1, 2)  # NCHW, RGB
    np.testing.assert_allclose(session.fed("target"), expected, atol=1e-5)
    raw = session.returned().astype(np.float64)
    unit = raw * np.array(std)[None, :, None, None] + np.array(mean)[None, :, None, None] if denormalised else raw
    pixels = np.rint(np.clip(unit, 0.0, 1.0) * 255.0).transpose(0, 2, 3, 1)[..., ::-1]  # RGB back to BGR
    assert np.abs(swapped.astype(int) - pixels.astype(int)).max() <= 1


@pytest.mark.parametrize("name", ["blendswap_256", "uniface_256"])
def test_a_crop_fed_swapper_gets_the_source_crop_as_rgb_over_255(name: str) -> None:
    swapper = _swapper(name)
    session = recording(swapper)
    size = swapper.spec.source_size
    assert (swapper.spec.source_template, size) == {"blendswap_256": ("arcface_112_v2", 112),
                                                    "uniface_256": ("ffhq_512", 256)}[name]
    rng = np.random.default_rng(4)
    source_crops = rng.integers(0, 256, (2, size, size, 3), dtype=np.uint8)
    crops = rng.integers(0, 256, (2, 256, 256, 3), dtype=np.uint8)
    swapper.swap(crops, swapper.source_rows(source_crops=source_crops))
    expected = (source_crops[..., ::-1] / 255.0).transpose(0, 3, 1, 2)
    np.testing.assert_allclose(session.fed("source"), expected, atol=1e-6)
