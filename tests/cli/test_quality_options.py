"""FaceFusion's option names and values on ``swap`` and ``job``, mapped onto EngineConfig."""

from __future__ import annotations

import pytest

from fusion_ray.cli import build_parser
from fusion_ray.cli.common import engine_config_from_args
from fusion_ray.config import EngineConfig
from fusion_ray.errors import ConfigError

SWAP = ["swap", "-s", "a.jpg", "-t", "t.jpg", "-o", "o.jpg"]


def _cfg(argv: list[str]) -> EngineConfig:
    return engine_config_from_args(build_parser().parse_args(argv))


def test_defaults_are_facefusions() -> None:
    cfg = _cfg(SWAP)
    assert cfg.masks.types == ["box"] and cfg.swap.mask_blur == 0.3 and cfg.swap.mask_padding == (0, 0, 0, 0)
    assert cfg.masks.areas == ["upper-face", "lower-face", "mouth"] and len(cfg.masks.regions) == 10
    assert (cfg.masks.occluder_model, cfg.masks.parser_model) == ("xseg_1", "bisenet_resnet_34")
    assert (cfg.landmarker.model, cfg.landmarker.score) == ("none", 0.5)
    assert (cfg.swap.weight, cfg.enhance.blend, cfg.enhance.weight, cfg.masks.mouth_mask) == (0.5, 0.8, 0.5, False)
    assert cfg.models.swapper == "inswapper_128" and cfg.swap.pixel_boost is None


@pytest.mark.parametrize("command", [SWAP, ["job", "--manifest", "m.csv"]])
def test_facefusion_options_on_swap_and_job(command: list[str]) -> None:
    cfg = _cfg([*command, "--face-mask-types", "box", "area", "occlusion", "region", "--face-mask-blur", "0.5",
                "--face-mask-padding", "10", "20", "--face-mask-areas", "lower-face",
                "--face-mask-regions", "skin", "nose", "--face-occluder-model", "xseg_2",
                "--face-parser-model", "bisenet_resnet_18", "--face-landmarker-model", "dlib_68",
                "--face-landmarker-score", "0.7", "--face-swapper-model", "inswapper_128_fp16",
                "--face-swapper-weight", "0.25", "--face-enhancer-model", "codeformer",
                "--face-enhancer-blend", "60", "--face-enhancer-weight", "0.75", "--mouth-mask"])
    assert cfg.masks.types == ["box", "area", "occlusion", "region"] and cfg.swap.mask_blur == 0.5
    assert cfg.swap.mask_padding == (0.1, 0.2, 0.1, 0.2)
    assert cfg.masks.areas == ["lower-face"] and cfg.masks.regions == ["skin", "nose"]
    assert (cfg.masks.occluder_model, cfg.masks.parser_model) == ("xseg_2", "bisenet_resnet_18")
    assert (cfg.landmarker.model, cfg.landmarker.score) == ("dlib_68", 0.7)
    assert cfg.models.swapper == "inswapper_128_fp16" and cfg.swap.weight == 0.25
    assert cfg.enhance.enabled and cfg.enhance.blend == 0.6 and cfg.enhance.weight == 0.75 and cfg.masks.mouth_mask
    assert cfg.models.enhancer == "codeformer"


@pytest.mark.parametrize(("options", "words"), [
    (["--face-occluder-model", "xseg_2"], "face_occluder_model is for the occlusion mask"),
    (["--face-parser-model", "bisenet_resnet_18"], "face_parser_model is for the region mask"),
    (["--face-mask-regions", "skin"], "face_mask_regions is for the region mask"),
    (["--face-mask-areas", "mouth"], "face_mask_areas is for the area mask"),
    (["--face-enhancer-weight", "0.9"], "the faces are not enhanced"),
    (["--face-enhancer-weight", "0.9", "--enhance"], "gfpgan_1.4 has none"),
    (["--swapper", "classic", "--face-swapper-weight", "0.8"], "runs the classic swapper"),
    (["--face-landmarker-score", "0.7"], "face_landmarker_model 'none'"),
])
def test_options_that_would_be_unused_are_refused(options: list[str], words: str) -> None:
    """The service's rule (422 invalid_option) on the command line: never accepted and ignored."""
    with pytest.raises(ConfigError, match="unused") as err:
        _cfg([*SWAP, *options])
    assert words in str(err.value)


def test_old_aliases_still_work() -> None:
    cfg = _cfg([*SWAP, "--swapper", "classic", "--enhance", "0.5"])
    assert cfg.swap.swapper == "classic" and cfg.enhance.enabled and cfg.enhance.blend == 0.5


def test_wrong_values_are_refused() -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args([*SWAP, "--face-mask-types", "ellipse"])
    with pytest.raises(SystemExit):
        build_parser().parse_args([*SWAP, "--face-enhancer-blend", "101"])
    with pytest.raises(ConfigError, match="need 68 points"):
        _cfg([*SWAP, "--face-mask-types", "area"])
    with pytest.raises(ConfigError, match="need 68 points"):
        _cfg([*SWAP, "--mouth-mask"])


def test_pixel_boost_option() -> None:
    assert _cfg([*SWAP, "--face-swapper-pixel-boost", "512x512"]).swap.pixel_boost == 512
    with pytest.raises(ConfigError, match="classic"):
        _cfg([*SWAP, "--swapper", "classic", "--face-swapper-pixel-boost", "256x256"])


def test_classic_and_a_swap_model_conflict() -> None:
    with pytest.raises(ConfigError, match="choose one"):
        _cfg([*SWAP, "--swapper", "classic", "--face-swapper-model", "inswapper_128"])


def test_every_swapper_and_enhancer_row_is_offered() -> None:
    from fusion_ray.models.registry import names_of_kind

    for swapper in names_of_kind("swapper"):
        assert _cfg([*SWAP, "--face-swapper-model", swapper]).models.swapper == swapper
    for enhancer in names_of_kind("enhancer"):
        assert _cfg([*SWAP, "--face-enhancer-model", enhancer]).models.enhancer == enhancer
    assert len(names_of_kind("swapper")) == 13 and len(names_of_kind("enhancer")) == 9
    with pytest.raises(SystemExit):
        build_parser().parse_args([*SWAP, "--face-swapper-model", "crossface_ghost"])  # a converter, not a swapper
