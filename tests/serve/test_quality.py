"""What a request may ask with FaceFusion's options: the service's models, its caps, the models
each placement's parts load (fusion_ray/serve/quality.py), and the form and OpenAPI that carry the options. No Ray."""

from __future__ import annotations

import pytest
from urllib3 import encode_multipart_formdata

from fusion_ray.core.facefusion_options import FACEFUSION_OPTIONS, FaceFusionOptions
from fusion_ray.errors import ConfigError
from fusion_ray.serve.forms import parse_multipart
from fusion_ray.serve.limits import ApiError
from fusion_ray.serve.quality import (
    loaded_config,
    part_components,
    quality_components,
    request_quality,
)
from fusion_ray.serve.schemas import SwapOptions, SwapRequest, swap_request_schema
from fusion_ray.serve.settings import parse_settings
from tests.serve.helpers import forged_png


def settings(**args):
    return parse_settings({"auth": {"token_env": None}, **args})


def ask(options: dict, service=None, **kwargs):
    return request_quality(FaceFusionOptions.model_validate(options), service or settings(), enhancer=True, **kwargs)


@pytest.mark.parametrize(("options", "limits", "detail"), [
    ({"face_swapper_pixel_boost": "1024x1024"}, {"max_pixel_boost": 512},
     "face_swapper_pixel_boost 1024x1024 is over this service's cap limits.max_pixel_boost=512"),
    ({"face_swapper_pixel_boost": 512}, {}, "limits.max_pixel_boost=256"),  # the default cap
    ({"face_mask_types": "box occlusion"}, {}, "face_mask_types occlusion is over this service's cap "
     "limits.mask_models_allowed=[]"),
    ({"face_mask_types": ["region"]}, {"mask_models_allowed": ["occlusion"]}, "limits.mask_models_allowed=['occlusion']"),
    ({"face_enhancer_blend": 60}, {"enhancer_allowed": False}, "limits.enhancer_allowed=false"),
])
def test_a_request_over_a_cap_is_403_naming_the_cap(options, limits, detail):
    with pytest.raises(ApiError) as err:
        ask(options, settings(limits=limits))
    assert (err.value.status, err.value.code) == (403, "over_cap") and detail in err.value.detail


def test_the_enhance_field_is_capped_too():
    with pytest.raises(ApiError) as err:
        ask({}, settings(limits={"enhancer_allowed": False}), enhance=True)
    assert err.value.code == "over_cap"


def test_within_the_caps_the_options_pass_and_the_enhancer_blend_is_resolved():
    service = settings(limits={"max_pixel_boost": 512, "mask_models_allowed": ["occlusion", "region"]})
    got = ask({"face_swapper_pixel_boost": "512x512", "face_mask_types": ["box", "occlusion", "region"]}, service)
    assert got.enhance_blend is None and got.models == {"xseg_1", "bisenet_resnet_34"}
    assert ask({"face_enhancer_blend": 60}, service).enhance_blend == pytest.approx(0.6)
    assert ask({}, service, enhance=True).enhance_blend == service.engine.enhance.blend
    assert ask({}, service, enhance=True, blend=0.3).enhance_blend == 0.3
    with pytest.raises(ApiError) as err:
        ask({"face_enhancer_blend": 60}, service, blend=0.3)
    assert err.value.status == 422 and "not both" in err.value.detail


@pytest.mark.parametrize(("option", "value", "served"), [
    ("face_swapper_model", "hyperswap_1a_256", "'inswapper_128'"),
    ("face_enhancer_model", "codeformer", "'gfpgan_1.4'"),
    ("face_occluder_model", "xseg_2", "'xseg_1'"),
    ("face_parser_model", "bisenet_resnet_18", "'bisenet_resnet_34'"),
    ("face_landmarker_model", "2dfan4", "'none'"),
])
def test_a_model_other_than_the_services_is_422_naming_the_one_it_runs(option, value, served):
    with pytest.raises(ApiError) as err:
        ask({option: value})
    assert (err.value.status, err.value.code) == (422, "model_not_served")
    assert err.value.detail.startswith(f"{option} {value!r}") and f"this service runs {served}" in err.value.detail
    masks = {"face_occluder_model": "occlusion", "face_parser_model": "region"}  # a mask model needs its mask
    service = settings(engine={"masks": {"types": ["box", masks[option]]}},
                       limits={"mask_models_allowed": [masks[option]]}) if option in masks else None
    ask({option: served.strip("'")}, service)  # naming the service's own model is fine


def test_options_the_service_cannot_run_are_422():
    with pytest.raises(ApiError) as err:
        ask({"face_mask_types": ["box", "area"]})
    assert err.value.code == "invalid_option" and "face_landmarker_model 'none'" in err.value.detail
    classic = settings(engine={"swap": {"swapper": "classic"}})
    with pytest.raises(ApiError) as err:
        ask({"face_swapper_pixel_boost": "256x256"}, classic)
    assert err.value.code == "invalid_option" and "classic swapper" in err.value.detail
    with pytest.raises(ApiError) as err:
        request_quality(FaceFusionOptions(face_enhancer_blend=50), settings(), enhancer=False)
    assert err.value.code == "enhance_unavailable"


def test_a_classic_service_takes_its_own_swapper_named():
    classic = settings(engine={"swap": {"swapper": "classic"}})
    assert ask({"face_swapper_model": "classic"}, classic).options.face_swapper_model == "classic"
    with pytest.raises(ApiError) as err:
        ask({"face_swapper_model": "classic"})
    assert err.value.code == "model_not_served" and "this service runs 'inswapper_128'" in err.value.detail


@pytest.mark.parametrize(("engine", "options", "words"), [
    ({"swap": {"swapper": "classic"}}, {"face_swapper_weight": 0.8}, "runs the classic swapper"),
    ({"models": {"swapper": "uniface_256"}}, {"face_swapper_weight": 0.2}, "uniface_256, which is given the source as an image"),
    ({"models": {"swapper": "blendswap_256"}}, {"face_swapper_weight": 1.0}, "blendswap_256"),
    ({}, {"face_landmarker_score": 0.3}, "face_landmarker_model 'none'"),
])
def test_an_option_the_service_would_not_use_is_422_naming_why(engine, options, words):
    service = settings(engine=engine)
    with pytest.raises(ApiError) as err:
        ask(options, service)
    assert err.value.code == "invalid_option" and words in err.value.detail and "unused" in err.value.detail
    ask({"face_swapper_weight": 0.5}, service)  # FaceFusion's default changes nothing: accepted


@pytest.mark.parametrize(("options", "words"), [
    ({"face_occluder_model": "xseg_1"}, "face_occluder_model is for the occlusion mask"),
    ({"face_parser_model": "bisenet_resnet_34"}, "face_parser_model is for the region mask"),
    ({"face_mask_regions": "skin"}, "face_mask_regions is for the region mask"),
    ({"face_mask_areas": "mouth"}, "face_mask_areas is for the area mask"),
    ({"face_enhancer_weight": 0.9}, "the faces are not enhanced"),
    ({"face_enhancer_weight": 0.9, "face_enhancer_blend": 50}, "gfpgan_1.4 has none"),
])
def test_an_option_for_a_step_that_does_not_run_is_422(options, words):
    """The service answered these with the plain request's bytes; the rule is every surface's
    (fusion_ray.core.facefusion_options.unused_options)."""
    with pytest.raises(ApiError) as err:
        ask(options)
    assert (err.value.status, err.value.code) == (422, "invalid_option") and words in err.value.detail


def test_the_weight_and_the_score_are_taken_where_they_are_used():
    ask({"face_swapper_weight": 0.8})  # inswapper_128 (an embedding-fed swapper)
    ask({"face_landmarker_score": 0.3}, settings(engine={"landmarker": {"model": "dlib_68"}}))


@pytest.mark.parametrize("placement", ["fused", "split"])
def test_every_placement_starts_with_a_region_mask_and_a_swapper_weight_in_its_engine(placement):
    """The split placement runs every step of the chain (its parts cut by phase): a service whose own
    engine runs the region mask (after the swap) and the swapper weight (the targets' embeddings)
    starts in either placement."""
    from fusion_ray.serve.app import build_app

    build_app({"auth": {"token_env": None}, "placement": placement, "limits": {"mask_models_allowed": ["region"]},
               "engine": {"masks": {"types": ["box", "region"]}, "swap": {"weight": 0.8}}})


def test_each_split_part_loads_the_models_of_its_steps_for_what_requests_may_ask():
    from fusion_ray.serve.deployments import part_bounds

    service = settings(engine={"landmarker": {"model": "dlib_68"}},
                       limits={"mask_models_allowed": ["occlusion", "region"]})
    loads = {name: part_components(service, *part_bounds(name)) for name in ("detect", "swap", "paste", "enhance")}
    # the detector: the targets' embeddings for a request's swapper weight (inswapper takes one)
    assert loads == {"detect": ["detector", "landmarker", "embedder", "occluder"], "swap": ["swapper", "parser"],
                     "paste": [], "enhance": ["enhancer"]}
    classic = settings(engine={"swap": {"swapper": "classic"}})
    assert "embedder" not in part_components(classic, *part_bounds("detect"))  # no weight to balance


def test_the_services_defaults_must_be_within_its_caps():
    with pytest.raises(ConfigError, match="engine.swap.pixel_boost"):
        settings(engine={"swap": {"pixel_boost": 512}})
    with pytest.raises(ConfigError, match="mask_models_allowed"):
        settings(engine={"masks": {"types": ["box", "region"]}})
    settings(engine={"masks": {"types": ["box", "region"]}}, limits={"mask_models_allowed": ["region"]})


def test_the_service_loads_the_mask_models_requests_may_ask_for():
    service = settings(engine={"landmarker": {"model": "dlib_68"}}, limits={"mask_models_allowed": ["region"]})
    assert loaded_config(service).masks.types == ["box", "region"]
    assert quality_components(service) == ["landmarker", "parser"]
    assert quality_components(settings()) == []


# ------------------------------------------------------------ the form and OpenAPI
def _form(fields):
    body, ctype = encode_multipart_formdata([("target", ("t.png", forged_png(4, 3), "image/png")),
                                             ("source_id", "s"), *fields])
    return SwapRequest.from_form(parse_multipart(body, ctype), max_pixels=100).options.facefusion


def test_the_form_takes_facefusions_value_syntax():
    repeated = _form([("face_mask_types", "box"), ("face_mask_types", "area"), ("face_swapper_pixel_boost", "512"),
                      ("face_mask_padding", "10 20"), ("mouth_mask", "true"), ("face_enhancer_blend", "60")])
    words = _form([("face_mask_types", "box area"), ("face_swapper_pixel_boost", "512x512"),
                   ("face_mask_padding", "10,20"), ("mouth_mask", "1"), ("face_enhancer_blend", "60")])
    assert repeated == words
    assert repeated.given() == {"face_mask_types": ["box", "area"], "face_mask_padding": [10, 20],
                                "face_swapper_pixel_boost": "512x512", "face_enhancer_blend": 60, "mouth_mask": True}


@pytest.mark.parametrize(("field", "value"), [
    ("face_mask_types", "box mouth"), ("face_swapper_pixel_boost", "500x500"), ("face_mask_padding", "101"),
    ("face_mask_padding", "1 2 3 4 5"), ("face_mask_blur", "2"), ("face_enhancer_blend", "101"),
    ("face_swapper_weight", "-0.1"), ("face_mask_regions", "ears"), ("face_landmarker_score", "x"),
])
def test_a_bad_value_is_422_naming_the_field(field, value):
    with pytest.raises(ApiError) as err:
        _form([(field, value)])
    assert (err.value.status, err.value.code) == (422, "invalid_option") and field in err.value.detail


def test_openapi_lists_the_facefusion_fields_with_descriptions():
    properties = swap_request_schema()["content"]["multipart/form-data"]["schema"]["properties"]
    assert set(FACEFUSION_OPTIONS) <= set(properties) and set(FACEFUSION_OPTIONS) <= set(SwapOptions.model_fields)
    for name in FACEFUSION_OPTIONS:
        assert properties[name]["description"], name
    assert properties["face_mask_types"]["anyOf"][0]["items"]["enum"] == ["box", "occlusion", "area", "region"]
    assert "1024x1024" in properties["face_swapper_pixel_boost"]["anyOf"][0]["enum"]


def test_selection_by_gender_race_or_age_needs_the_services_classifier():
    with pytest.raises(ApiError, match="face classifier"):
        ask({"face_selector_gender": "female"})
    service = settings(engine={"selection": {"age_start": 0}})
    assert ask({"face_selector_race": "asian"}, service).options.value("face_selector_race") == "asian"
    assert ask({"face_selector_order": "best-worst", "face_detector_angles": "0 180"}).options.given() == {
        "face_selector_order": "best-worst", "face_detector_angles": [0, 180]}
