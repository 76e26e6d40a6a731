"""``--precision``, the calibration seed from a command's input, and ``fusion-ray models quantize``."""

from __future__ import annotations

from pathlib import Path

import pytest

from fusion_ray.cli import build_parser, main
from fusion_ray.cli.common import engine_config_from_args
from fusion_ray.errors import ConfigError


def _cfg(argv: list[str]):  # type: ignore[no-untyped-def]
    return engine_config_from_args(build_parser().parse_args(argv))


def test_precision_option_and_calibration_seed(tmp_path: Path) -> None:
    cfg = _cfg(["swap", "-s", "a.jpg", "-s", "b.jpg", "-t", "t.mp4", "-o", "o.mp4",
                "--precision", "detector=INT8, swapper=fp16"])
    assert cfg.models.precision == {"detector": "int8", "swapper": "fp16"}
    assert cfg.models.calibration_seed == [Path("t.mp4"), Path("a.jpg"), Path("b.jpg")]
    assert _cfg(["detect", "x.png"]).models.calibration_seed == [Path("x.png")]
    with pytest.raises(ConfigError, match="COMPONENT=PRECISION"):
        _cfg(["detect", "x.png", "--precision", "int8"])
    with pytest.raises(ConfigError, match="detector only"):
        _cfg(["detect", "x.png", "--precision", "embedder=int8"])


def test_models_quantize_reports_the_cached_int8_detector(int8_models_dir: Path, scrfd_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["models", "--models-dir", str(int8_models_dir), "quantize", "--model", f"scrfd_2.5g={scrfd_path}"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert out.startswith("scrfd_2.5g: INT8 at ") and str(int8_models_dir) in out
    assert main([*argv, "--calibration", str(int8_models_dir / "missing.jpg")]) == 2
    assert main([*argv[:4], "inswapper_128"]) == 2


def test_models_quantize_without_photos_fails_and_says_why(tmp_path: Path, scrfd_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["models", "--models-dir", str(tmp_path), "quantize", "--model", f"scrfd_2.5g={scrfd_path}"]) == 4
    assert "runs at FP32" in capsys.readouterr().err
