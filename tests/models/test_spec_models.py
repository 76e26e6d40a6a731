"""Swappers, converters and enhancers driven by their registry rows, on their stand-ins."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from fusion_ray.errors import ModelError
from fusion_ray.models.enhancer import SpecEnhancer
from fusion_ray.models.registry import get_spec
from fusion_ray.models.registry_swappers import ENHANCER_SPECS, SWAPPER_SPECS
from fusion_ray.models.spec_models import (
    EmbeddingConverter,
    SpecSwapper,
    source_crop_blob,
)
from fusion_ray.models.standins import make_standin
from fusion_ray.ops.source_weight import balance_embedding

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


@pytest.mark.parametrize("name", [s.name for s in ENHANCER_SPECS if s.crop_size <= 512])
def test_enhancers_feed_weight_where_the_model_has_it_and_blend(name: str) -> None:
    enhancer = SpecEnhancer(_session(name), get_spec(name))
    assert enhancer.has_weight == get_spec(name).weight_input
    rng = np.random.default_rng(2)
    size = enhancer.crop_size
    crops = rng.integers(0, 256, (2, size, size, 3), dtype=np.uint8)
    # the stand-in returns its input: the round trip through (x / 255 - 0.5) / 0.5 and back is exact
    assert np.abs(enhancer.enhance(crops, 1.0, weight=0.7).astype(int) - crops).max() <= 1
    assert np.abs(enhancer.enhance(crops, 0.8).astype(int) - crops).max() <= 1
