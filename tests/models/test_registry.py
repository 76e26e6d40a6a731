"""The model registry: constant data that every wrapper reads."""

from __future__ import annotations

import dataclasses

import pytest

from fusion_ray.errors import ModelError
from fusion_ray.models.registry import TEMPLATE_NAMES, ModelSpec, all_specs, get_spec

RELEASE = "https://github.com/facefusion/facefusion-assets/releases/download/models-3.0.0/"
EXPECTED_NAMES = {"scrfd_2.5g", "arcface_w600k_r50", "inswapper_128", "inswapper_128_fp16", "gfpgan_1.4"}


def test_registry_holds_the_standard_models_once() -> None:
    names = [spec.name for spec in all_specs()]
    assert len(names) == len(set(names))
    assert set(names) == EXPECTED_NAMES


@pytest.mark.parametrize("spec", all_specs(), ids=lambda s: s.name)
def test_spec_is_complete_and_consistent(spec: ModelSpec) -> None:
    assert spec.file_name == f"{spec.name}.onnx"
    assert spec.url == RELEASE + spec.file_name
    assert spec.hash_url == RELEASE + f"{spec.name}.hash"
    assert spec.hash_url.endswith(spec.hash_file_name)
    assert spec.kind in ("detector", "embedder", "swapper", "enhancer")
    if spec.kind == "detector":
        assert spec.template is None
    else:
        assert spec.template in TEMPLATE_NAMES
    assert spec.crop_size > 0
    assert len(spec.mean) == 3 and len(spec.std) == 3
    assert all(s > 0 for s in spec.std)
    assert spec.color_order in ("RGB", "BGR")
    assert spec.licence.strip() and spec.licence_url.startswith("https://")
    assert spec.approx_size_mb > 0
    assert spec.description.strip()


@pytest.mark.parametrize(
    ("name", "template", "crop", "mean", "std"),
    [
        ("scrfd_2.5g", None, 640, 127.5, 128.0),
        ("arcface_w600k_r50", "arcface_112_v2", 112, 127.5, 127.5),
        ("inswapper_128", "arcface_128", 128, 0.0, 255.0),
        ("inswapper_128_fp16", "arcface_128", 128, 0.0, 255.0),
        ("gfpgan_1.4", "ffhq_512", 512, 127.5, 127.5),
    ],
)
def test_preprocessing_facts(name: str, template: str | None, crop: int, mean: float, std: float) -> None:
    spec = get_spec(name)
    assert spec.template == template
    assert spec.crop_size == crop
    assert spec.mean == (mean,) * 3
    assert spec.std == (std,) * 3
    assert spec.color_order == "RGB"


def test_licences() -> None:
    for name in ("scrfd_2.5g", "arcface_w600k_r50", "inswapper_128", "inswapper_128_fp16"):
        assert "non-commercial" in get_spec(name).licence.lower()
    assert get_spec("gfpgan_1.4").licence == "Apache-2.0"


def test_unknown_name_lists_known_models() -> None:
    with pytest.raises(ModelError) as info:
        get_spec("inswapper_256")
    message = str(info.value)
    assert "inswapper_256" in message
    for name in EXPECTED_NAMES:
        assert name in message


def test_specs_are_frozen() -> None:
    spec = get_spec("inswapper_128")
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.crop_size = 256  # type: ignore[misc]
