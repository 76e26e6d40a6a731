"""FaceFusion's option names mapped onto EngineConfig, as the command line and a job manifest's
``options`` column use them."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from fusion_ray.config import EngineConfig
from fusion_ray.core.facefusion_options import (
    FACEFUSION_OPTIONS,
    NO_OPTIONS,
    FaceFusionOptions,
    apply_facefusion_options,
    configured,
    padding_fractions,
)
from fusion_ray.errors import ConfigError
from fusion_ray.imageio import read_image
from fusion_ray.jobs.plan import with_overrides
from fusion_ray.runners.inline import Engine
from fusion_ray.runners.job import JobItem, run_job
from tests.runners.conftest import job_config


def test_padding_follows_css_order() -> None:
    assert padding_fractions([10]) == (0.1, 0.1, 0.1, 0.1)
    assert padding_fractions([10, 20]) == (0.1, 0.2, 0.1, 0.2)
    assert padding_fractions([10, 20, 30]) == (0.1, 0.2, 0.3, 0.2)
    assert padding_fractions([10, 20, 30, 40]) == (0.1, 0.2, 0.3, 0.4)
    with pytest.raises(ConfigError, match="1 to 4"):
        padding_fractions([1, 2, 3, 4, 5])


def test_json_values_map_like_the_command_line() -> None:
    data = EngineConfig().model_dump()
    apply_facefusion_options({"face_mask_types": ["box", "area"], "face_mask_padding": [5], "mouth_mask": True,
                              "face_landmarker_model": "dlib_68", "face_swapper_pixel_boost": "512x512",
                              "face_enhancer_blend": 60}, data)
    cfg = EngineConfig.model_validate(data)
    assert cfg.masks.types == ["box", "area"] and cfg.masks.mouth_mask and cfg.swap.mask_padding == (0.05,) * 4
    assert cfg.landmarker.model == "dlib_68" and cfg.swap.pixel_boost == 512
    assert cfg.enhance.enabled and cfg.enhance.blend == 0.6
    with pytest.raises(ConfigError, match="unknown FaceFusion option"):
        apply_facefusion_options({"face_mask_colour": "red"}, EngineConfig().model_dump())


def test_request_options_have_facefusions_names_and_go_through_the_one_mapping() -> None:
    """FaceFusionOptions (the service's per-request options) are the mapping's options, with the
    command line's value syntax, and configure the engine as the command line does."""
    assert tuple(FaceFusionOptions.model_fields) == FACEFUSION_OPTIONS
    options = FaceFusionOptions.model_validate({"face_mask_types": "box area", "face_mask_padding": "5",
                                                "mouth_mask": True, "face_landmarker_model": "dlib_68",
                                                "face_swapper_pixel_boost": 512, "face_enhancer_blend": 60})
    data = EngineConfig().model_dump()
    apply_facefusion_options({"face_mask_types": ["box", "area"], "face_mask_padding": [5], "mouth_mask": True,
                              "face_landmarker_model": "dlib_68", "face_swapper_pixel_boost": "512x512",
                              "face_enhancer_blend": 60}, data)
    assert configured(EngineConfig(), options) == EngineConfig.model_validate(data)
    assert configured(EngineConfig(), NO_OPTIONS) == EngineConfig()
    assert hash(options) == hash(options.model_copy())  # frames are grouped by their options
    with pytest.raises(ConfigError, match="68 points"):
        configured(EngineConfig(), FaceFusionOptions(mouth_mask=True))


def test_every_swapper_and_enhancer_row_can_be_chosen_and_others_are_refused(scrfd_path: Path) -> None:
    from fusion_ray.models.registry import names_of_kind

    for swapper in names_of_kind("swapper"):
        data = EngineConfig().model_dump()
        apply_facefusion_options({"face_swapper_model": swapper}, data)
        assert EngineConfig.model_validate(data).models.swapper == swapper
    for enhancer in names_of_kind("enhancer"):
        data = EngineConfig().model_dump()
        apply_facefusion_options({"face_enhancer_model": enhancer}, data)
        cfg = EngineConfig.model_validate(data)
        assert cfg.models.enhancer == enhancer and cfg.enhance.enabled
    with pytest.raises(ConfigError, match="face_swapper_model 'xseg_1': not a registered swapper; expected one of "
                                          "inswapper_128, .*hyperswap_1a_256, .*uniface_256"):
        with_overrides(job_config(scrfd_path), json.dumps({"face_swapper_model": "xseg_1"}))
    with pytest.raises(ConfigError, match="face_enhancer_model 'gfpgan_2.0'.*gfpgan_1.4, codeformer"):
        apply_facefusion_options({"face_enhancer_model": "gfpgan_2.0"}, EngineConfig().model_dump())


def test_manifest_options_take_facefusion_names(scrfd_path: Path) -> None:
    cfg = job_config(scrfd_path)
    both = with_overrides(cfg, json.dumps({"face_mask_types": ["box", "area"], "face_landmarker_model": "dlib_68",
                                           "selection": {"mode": "largest"}}))
    assert both.engine.masks.types == ["box", "area"] and both.engine.landmarker.model == "dlib_68"
    assert both.engine.selection.mode == "largest"
    with pytest.raises(ConfigError, match="need 68 points"):
        with_overrides(cfg, json.dumps({"mouth_mask": True}))


def test_a_manifest_rows_mouth_mask_reaches_the_local_runner(scrfd_path: Path, images_dir: Path,
                                                             tmp_path: Path) -> None:
    pytest.importorskip("dlib")
    pytest.importorskip("face_recognition_models")
    options = json.dumps({"face_landmarker_model": "dlib_68", "mouth_mask": True})
    target, source = images_dir / "obama_and_biden.jpg", images_dir / "biden.jpg"
    items = [JobItem((source,), target, tmp_path / "mouth.png", options),
             JobItem((source,), target, tmp_path / "plain.png")]
    report = run_job(items, job_config(scrfd_path), output_root=tmp_path, runner="local")
    assert [i.status for i in report.items] == ["done", "done"], [i.error for i in report.items]
    cfg = with_overrides(job_config(scrfd_path), options).engine
    engine = Engine.load(cfg, cpu_budget=1)
    expected = engine.process_frame(read_image(target).frame, engine.prepare_source([read_image(source).frame]))
    assert np.array_equal(read_image(tmp_path / "mouth.png").frame, expected.frame)
    assert not np.array_equal(read_image(tmp_path / "plain.png").frame, expected.frame)
