"""The table of FaceFusion's options and every surface made from it agree: each row is a flag of
the command line, a field of ``POST /v1/swap``'s form in OpenAPI, a field of the live start
message and a key of a job manifest's ``options`` column, with the same choices; each cap is a
field of the service's ``limits``. The selection modes are one type on every surface."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, get_args

import pytest

from fusion_ray.cli import build_parser
from fusion_ray.cli.quality_options import add_quality_arguments
from fusion_ray.config import EngineConfig, SelectionConfig
from fusion_ray.core.facefusion_options import (
    FACEFUSION_OPTIONS,
    FaceFusionOptions,
    OptionsModel,
    apply_facefusion_options,
    options_model,
)
from fusion_ray.jobs.config import JobConfig
from fusion_ray.jobs.manifest import read_manifest
from fusion_ray.jobs.plan import with_overrides
from fusion_ray.live.localhost import live_page
from fusion_ray.live.protocol import StartMessage
from fusion_ray.options_table import MODEL_OPTIONS, OPTIONS, Cap, Option
from fusion_ray.serve.schemas import SwapOptions, swap_request_schema
from fusion_ray.serve.settings import LimitsSettings
from fusion_ray.types import SELECT_MODES, STREAM_SELECT_MODES

EXAMPLES: dict[str, Any] = {
    "face_mask_types": ["box", "occlusion", "area", "region"], "face_mask_blur": 0.5, "face_mask_padding": [5, 10],
    "face_mask_areas": ["mouth"], "face_mask_regions": ["skin", "nose"], "face_occluder_model": "xseg_2",
    "face_parser_model": "bisenet_resnet_18", "face_landmarker_model": "2dfan4", "face_landmarker_score": 0.7,
    "face_swapper_model": "inswapper_128_fp16", "face_swapper_pixel_boost": "256x256", "face_swapper_weight": 0.3,
    "face_enhancer_model": "codeformer", "face_enhancer_blend": 60, "face_enhancer_weight": 0.7, "mouth_mask": True,
    "face_selector_order": "large-small", "face_detector_angles": [0, 90], "face_selector_gender": "female",
    "face_selector_race": "asian", "face_selector_age_start": 20, "face_selector_age_end": 40,
}
"""A value of every option other than its default, all of them usable together."""


def _actions(command: list[str]) -> dict[str, argparse.Action]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {flag: action for action in sub.choices[command[0]]._actions for flag in action.option_strings}


def _enum(schema: dict[str, Any]) -> list[Any] | None:
    """The enum of a field's schema (of its items for a list), None when it has none."""
    for branch in schema.get("anyOf", [schema]):
        inner = branch.get("items", branch)
        if "enum" in inner:
            return list(inner["enum"])
    return None


def test_the_table_is_the_option_vocabulary() -> None:
    assert tuple(option.name for option in OPTIONS) == FACEFUSION_OPTIONS
    assert tuple(FaceFusionOptions.model_fields) == FACEFUSION_OPTIONS
    assert set(EXAMPLES) == set(FACEFUSION_OPTIONS), "every row needs an example here"


@pytest.mark.parametrize("command", ["swap", "job", "live"])
@pytest.mark.parametrize("option", OPTIONS, ids=lambda option: option.name)
def test_each_row_is_a_flag_with_its_choices(command: str, option: Option) -> None:
    action = _actions([command])[option.flag]
    assert action.dest == option.name and action.help and option.help in action.help
    if option.value is bool:
        assert action.nargs == 0
    elif option.choices:
        assert tuple(action.choices or ()) == option.choices
    assert (action.nargs == "+") == option.many


@pytest.mark.parametrize("option", OPTIONS, ids=lambda option: option.name)
def test_each_row_is_a_form_field_and_a_start_message_field(option: Option) -> None:
    form = swap_request_schema()["content"]["multipart/form-data"]["schema"]["properties"]
    start = StartMessage.model_json_schema()["properties"]
    for schema in (form[option.name], start[option.name]):
        assert option.help[1:] in schema["description"]
        if option.cap:
            assert f"limits.{option.cap}" in schema["description"]
        if option.model:  # any text: a request naming another model than the service's gets its own answer
            assert _enum(schema) is None and "only the service's" in schema["description"]
        elif option.choices:
            assert _enum(schema) == list(option.choices)
    assert option.name in SwapOptions.model_fields and option.name in StartMessage.model_fields


def test_each_row_is_a_manifest_option_setting_its_config_field(tmp_path: Path) -> None:
    manifest = tmp_path / "m.csv"
    manifest.write_text('source,target,output,options\ns.jpg,t.png,o.png,"' +
                        json.dumps(EXAMPLES).replace('"', '""') + '"\n')
    item, = read_manifest(manifest, tmp_path / "out")
    cfg = with_overrides(JobConfig(), item.options).engine.model_dump()
    default = EngineConfig().model_dump()
    for option in OPTIONS:
        section, key = option.sets.split(".")
        assert cfg[section][key] != default[section][key], option.name


def test_each_cap_is_a_limits_field_naming_its_options() -> None:
    capped = {option.cap for option in OPTIONS if option.cap}
    assert capped == set(get_args(Cap))
    for option in OPTIONS:
        if option.cap:
            assert option.name in (LimitsSettings.model_fields[option.cap].description or "")


def test_each_model_option_names_a_kind_and_offers_its_models() -> None:
    assert MODEL_OPTIONS == {"face_occluder_model": "occluder", "face_parser_model": "parser",
                             "face_landmarker_model": "landmarker", "face_swapper_model": "swapper",
                             "face_enhancer_model": "enhancer"}
    for option in OPTIONS:
        if option.model:
            assert EXAMPLES[option.name] in option.choices


def test_the_selection_modes_are_one_type_on_every_surface() -> None:
    assert SELECT_MODES == ("all", "largest", "index", "reference") and SELECT_MODES[:3] == STREAM_SELECT_MODES
    assert get_args(SelectionConfig.model_fields["mode"].annotation) == SELECT_MODES
    assert tuple(_actions(["swap"])["--select"].choices or ()) == SELECT_MODES
    assert tuple(_actions(["live"])["--faces"].choices or ()) == STREAM_SELECT_MODES
    form = swap_request_schema()["content"]["multipart/form-data"]["schema"]["properties"]
    assert _enum(form["select"]) == list(STREAM_SELECT_MODES)
    assert _enum(StartMessage.model_json_schema()["properties"]["select"]) == list(STREAM_SELECT_MODES)
    assert "".join(f"<option>{mode}</option>" for mode in STREAM_SELECT_MODES) in live_page()


def test_a_new_row_is_a_flag_a_checked_field_and_a_config_setting() -> None:
    """Adding an option is adding a row: a throwaway row (FaceFusion's detector score) becomes a
    flag, a field with its bounds and description, and the config field it names."""
    row = Option("face_detector_score", "detector.score_threshold", float, "faces under this score are dropped",
                 "0.5", bounds=(0.0, 1.0))
    rows = (*OPTIONS, row)
    parser = argparse.ArgumentParser()
    add_quality_arguments(parser, rows)
    assert parser.parse_args(["--face-detector-score", "0.7"]).face_detector_score == 0.7
    with pytest.raises(SystemExit):
        parser.parse_args(["--face-detector-score", "1.5"])
    model = options_model("WithDetectorScore", OptionsModel, rows)
    field = model.model_json_schema()["properties"]["face_detector_score"]
    assert field["description"] == "Faces under this score are dropped." and field["anyOf"][0]["maximum"] == 1.0
    assert model.model_validate({"face_detector_score": "0.7"}).value("face_detector_score") == 0.7
    with pytest.raises(ValueError, match="expected a number"):
        model.model_validate({"face_detector_score": True})
    data = EngineConfig().model_dump()
    apply_facefusion_options({"face_detector_score": 0.7}, data, rows)
    assert EngineConfig.model_validate(data).detector.score_threshold == 0.7
