"""Every enhancer row through the one enhancer class, on its STAND-IN (labelled, not a real model):
the blob the session gets, the weight input, the output mapped back to pixels and the blend."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from fusion_ray.errors import ModelError
from fusion_ray.models.enhancer import SpecEnhancer, blend_crops
from fusion_ray.models.registry import get_spec, names_of_kind
from fusion_ray.models.standins import make_standin
from tests.models.session_helpers import recording

# FaceFusion 3.8.1's face_enhancer model set, apart from the registry: the
# template and size of each row, and which rows have the 'weight' input.
FACEFUSION_ENHANCERS = {
    "codeformer": ("ffhq_512", 512, True),
    "gpen_bfr_256": ("arcface_128", 256, False),
    "gpen_bfr_512": ("ffhq_512", 512, False),
    "gpen_bfr_1024": ("ffhq_512", 1024, False),
    "gpen_bfr_2048": ("ffhq_512", 2048, False),
    "restoreformer_plus_plus": ("ffhq_512", 512, False),
    "gfpgan_1.2": ("ffhq_512", 512, False),
    "gfpgan_1.3": ("ffhq_512", 512, False),
    "gfpgan_1.4": ("ffhq_512", 512, False),
}


def _enhancer(name: str, weight: float = 0.5) -> SpecEnhancer:
    session = ort.InferenceSession(make_standin(name).SerializeToString(), providers=["CPUExecutionProvider"])
    return SpecEnhancer(session, get_spec(name), weight)


def test_the_table_covers_every_enhancer_row() -> None:
    assert sorted(FACEFUSION_ENHANCERS) == sorted(names_of_kind("enhancer"))


@pytest.mark.parametrize("name", sorted(FACEFUSION_ENHANCERS))
def test_the_session_gets_facefusions_blob_and_weight_and_the_output_maps_back(name: str) -> None:
    template, size, has_weight = FACEFUSION_ENHANCERS[name]
    enhancer = _enhancer(name, weight=0.75)
    assert (enhancer.template, enhancer.crop_size, enhancer.has_weight) == (template, size, has_weight)
    assert enhancer.stand_in
    session = recording(enhancer)
    rng = np.random.default_rng(5)
    n = 1 if size > 512 else 2  # one crop of the large rows keeps the test fast
    crops = rng.integers(0, 256, (n, size, size, 3), dtype=np.uint8)
    enhanced = enhancer.enhance(crops, 1.0)
    expected = ((crops[..., ::-1] / 255.0 - 0.5) / 0.5).transpose(0, 3, 1, 2)  # RGB, NCHW, [-1, 1]
    np.testing.assert_allclose(session.fed("input"), expected, atol=1e-5)
    for feeds, _ in session.calls:
        if has_weight:
            assert feeds["weight"].dtype == np.float64 and feeds["weight"].tolist() == [0.75]
        else:
            assert "weight" not in feeds
    raw = session.returned().astype(np.float64)
    pixels = np.rint((np.clip(raw, -1.0, 1.0) + 1.0) / 2.0 * 255.0).transpose(0, 2, 3, 1)[..., ::-1]
    assert np.abs(enhanced.astype(int) - pixels.astype(int)).max() <= 1


def test_a_weight_per_call_and_the_blend() -> None:
    enhancer = _enhancer("codeformer")
    session = recording(enhancer)
    crops = np.random.default_rng(6).integers(0, 256, (1, 512, 512, 3), dtype=np.uint8)
    full = enhancer.enhance(crops, 1.0, weight=0.2)
    assert session.calls[-1][0]["weight"].tolist() == [0.2]
    assert np.array_equal(enhancer.enhance(crops, 0.8, weight=0.2), blend_crops(crops, full, 0.8))  # 80% over
    assert not np.array_equal(enhancer.enhance(crops, 1.0), full)  # the stand-in's output moves with the weight
    assert session.calls[-1][0]["weight"].tolist() == [0.5]  # the one given at construction


def test_only_enhancer_rows_are_taken() -> None:
    session = ort.InferenceSession(make_standin("gpen_bfr_512").SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    with pytest.raises(ModelError, match="expected an enhancer"):
        SpecEnhancer(session, get_spec("hyperswap_1a_256"))
