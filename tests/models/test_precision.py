"""Precision per model: what auto resolves to, provider options, the INT8 detector loaded."""

from __future__ import annotations

from pathlib import Path

import pytest

from fusion_ray.config import EngineConfig, ModelsConfig, RuntimeConfig, parse_config
from fusion_ray.errors import ConfigError
from fusion_ray.models.precision import resolve_precision
from fusion_ray.models.session import provider_options


@pytest.mark.parametrize(("kind", "requested", "providers", "fp16_form", "expected"), [
    ("detector", "auto", ["cpu"], False, "int8"),
    ("swapper", "auto", ["cpu"], True, "fp32"),
    ("swapper", "auto", ["cuda", "cpu"], True, "fp16"),
    ("swapper", "auto", ["cuda", "cpu"], False, "fp32"),
    ("embedder", "auto", ["tensorrt", "cuda", "cpu"], False, "fp16"),
    ("detector", "auto", ["tensorrt", "cuda", "cpu"], False, "fp16"),
    ("swapper", "fp16", ["cpu"], True, "fp32"),
    ("enhancer", "fp16", ["cuda", "cpu"], False, "fp32"),
    ("detector", "int8", ["cuda", "cpu"], False, "int8"),
    ("detector", "fp32", ["cpu"], False, "fp32"),
])
def test_resolve_precision(kind, requested, providers, fp16_form, expected) -> None:  # type: ignore[no-untyped-def]
    assert resolve_precision(kind, requested, providers, has_fp16_form=fp16_form) == expected


def test_tensorrt_fp16_off_makes_auto_fp32_on_tensorrt() -> None:
    assert resolve_precision("swapper", "auto", ["tensorrt", "cpu"], has_fp16_form=True, tensorrt_fp16=False) == "fp32"


def test_int8_is_refused_for_other_models() -> None:
    with pytest.raises(ConfigError, match="int8 is for the detector only"):
        parse_config({"models": {"precision": {"swapper": "int8"}}}, EngineConfig)
    with pytest.raises(ConfigError):
        parse_config({"models": {"precision": {"detector": "int4"}}}, EngineConfig)


def test_tensorrt_and_cuda_get_their_documented_options(tmp_path: Path) -> None:
    runtime = RuntimeConfig(tensorrt_cache_dir=tmp_path / "trt", cudnn_conv_algo_search="EXHAUSTIVE", device_id=1)
    trt, cuda, cpu = provider_options(["tensorrt", "cuda", "cpu"], runtime, tmp_path / "m.onnx", precision="fp16")
    assert trt == ("TensorrtExecutionProvider", {
        "device_id": 1, "trt_fp16_enable": True, "trt_int8_enable": False,
        "trt_engine_cache_enable": True, "trt_engine_cache_path": str(tmp_path / "trt"),
        "trt_timing_cache_enable": True, "trt_timing_cache_path": str(tmp_path / "trt")})
    assert cuda == ("CUDAExecutionProvider", {"device_id": 1, "cudnn_conv_algo_search": "EXHAUSTIVE"})
    assert cpu == "CPUExecutionProvider"
    (trt32,) = provider_options(["tensorrt"], RuntimeConfig(tensorrt_cache_dir=tmp_path), tmp_path / "m.onnx",
                                precision="int8")
    assert trt32[1]["trt_fp16_enable"] is False and trt32[1]["trt_int8_enable"] is True


def test_the_engine_loads_the_cached_int8_detector_and_says_so(int8_models_dir: Path, scrfd_path: Path) -> None:
    from fusion_ray.core.modelset import ModelSet

    cfg = EngineConfig(models=ModelsConfig(models_dir=int8_models_dir, paths={"scrfd_2.5g": scrfd_path}),
                       runtime=RuntimeConfig(providers=["cpu"]))
    models = ModelSet.load(cfg, ["detector"], cpu_budget=1)
    info = models.info["scrfd_2.5g"]
    assert info.precision == "int8" and Path(info.path).parent == int8_models_dir
    fp32 = ModelSet.load(cfg.model_copy(update={"models": cfg.models.model_copy(
        update={"precision": {"detector": "fp32"}})}), ["detector"], cpu_budget=1)
    assert fp32.info["scrfd_2.5g"].precision == "fp32" and fp32.info["scrfd_2.5g"].path == str(scrfd_path)


def test_a_job_driver_names_the_int8_detector_its_actors_will_load(int8_models_dir: Path, scrfd_path: Path) -> None:
    from fusion_ray.core.modelset import inspect_models

    cfg = EngineConfig(models=ModelsConfig(models_dir=int8_models_dir, paths={"scrfd_2.5g": scrfd_path}),
                       runtime=RuntimeConfig(providers=["cpu"]))
    info = inspect_models(cfg, ["detector"])["scrfd_2.5g"]
    assert info.precision == "int8" and ".int8." in Path(info.path).name
    bare = cfg.model_copy(update={"models": cfg.models.model_copy(update={"models_dir": int8_models_dir / "none"})})
    assert inspect_models(bare, ["detector"])["scrfd_2.5g"].precision == "fp32"  # no calibration photos there


def test_no_calibration_photos_runs_fp32(tmp_path: Path, scrfd_path: Path) -> None:
    from fusion_ray.core.modelset import ModelSet

    cfg = EngineConfig(models=ModelsConfig(models_dir=tmp_path, paths={"scrfd_2.5g": scrfd_path},
                                           precision={"detector": "int8"}), runtime=RuntimeConfig(providers=["cpu"]))
    assert ModelSet.load(cfg, ["detector"], cpu_budget=1).info["scrfd_2.5g"].precision == "fp32"


def _files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.rglob("*") if p.is_file() and not p.name.endswith(".lock"))


def test_auto_never_builds_int8_and_keeps_nothing_of_the_inputs(tmp_path: Path, scrfd_path: Path, images_dir: Path,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    """A first run (one image, or a clip) detects at FP32 and says how to build INT8 once: before,
    it calibrated on 66 frames to swap one face, and saved the user's frames (faces) in
    <models dir>/calibration without asking."""
    import logging

    from fusion_ray.core.modelset import ModelSet

    seed = images_dir / "obama.jpg"
    cfg = EngineConfig(models=ModelsConfig(models_dir=tmp_path / "models", paths={"scrfd_2.5g": scrfd_path},
                                           calibration_seed=[seed]), runtime=RuntimeConfig(providers=["cpu"]))
    with caplog.at_level(logging.WARNING):
        info = ModelSet.load(cfg, ["detector"], cpu_budget=1).info["scrfd_2.5g"]
    assert info.precision == "fp32" and "fusion-ray models quantize" in caplog.text
    assert not (tmp_path / "models").exists() or _files(tmp_path / "models") == []


def test_int8_asked_for_calibrates_in_memory_and_auto_then_finds_it(tmp_path: Path, scrfd_path: Path,
                                                                   images_dir: Path) -> None:
    """--precision detector=int8 with the command's own input: built from it in memory (the models
    directory then holds the model and its record, no frame of the input); a later run under auto,
    on another input, finds that copy."""
    from fusion_ray.core.modelset import ModelSet

    models = tmp_path / "models"
    asked = EngineConfig(models=ModelsConfig(models_dir=models, paths={"scrfd_2.5g": scrfd_path},
                                             precision={"detector": "int8"},
                                             calibration_seed=[images_dir / "obama_and_biden.jpg"]),
                         runtime=RuntimeConfig(providers=["cpu"]))
    built = ModelSet.load(asked, ["detector"], cpu_budget=1).info["scrfd_2.5g"]
    assert built.precision == "int8"
    assert sorted(n.rsplit(".", 1)[-1] for n in _files(models)) == ["json", "onnx"]  # the model and its record
    later = asked.model_copy(update={"models": asked.models.model_copy(update={
        "precision": {}, "calibration_seed": [images_dir / "biden.jpg"]})})
    again = ModelSet.load(later, ["detector"], cpu_budget=1).info["scrfd_2.5g"]
    assert again.precision == "int8" and again.path == built.path
