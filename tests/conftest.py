"""Shared fixtures: the shared assets, stand-in models, and one Ray cluster per test session."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]

# moto's S3 server fixtures: s3_server (session), s3_env, s3_bucket; a recording pyvirtualcam
# backend: recording_camera, no_camera.
pytest_plugins = ["tests.s3_server", "tests.live.virtualcam_backend", "tests.job_fixtures"]


def _assets_dir() -> Path:
    override = os.environ.get("FUSION_RAY_TEST_ASSETS")
    return Path(override) if override else REPO_ROOT.parent / "shared" / "assets"


@pytest.fixture(scope="session")
def assets_dir() -> Path:
    path = _assets_dir()
    if not (path / "images").is_dir():
        pytest.skip(f"shared assets not found at {path} (set FUSION_RAY_TEST_ASSETS)")
    return path


@pytest.fixture(scope="session")
def images_dir(assets_dir: Path) -> Path:
    return assets_dir / "images"


@pytest.fixture(scope="session")
def scrfd_path(assets_dir: Path) -> Path:
    path = assets_dir / "models" / "scrfd_2.5g.onnx"
    if not path.is_file():
        pytest.skip(f"real SCRFD detector not found at {path}")
    return path


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[None]:
    """One local Ray instance for the whole session (start-up costs 5-7 s on 2 cores)."""
    import ray
    from ray.data import DataContext

    if not ray.is_initialized():
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
                 configure_logging=False)
    ctx = DataContext.get_current()
    # A deadlocked pipeline fails fast instead of hanging CI.
    ctx.execution_no_progress_timeout_s = 120  # type: ignore[attr-defined]
    ctx.enable_progress_bars = False
    yield
    # Shut down at the end of the session only.
    ray.shutdown()


@pytest.fixture(scope="session")
def standin_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Light STAND-IN models (generated, labelled, not real weights) for the whole session."""
    from fusion_ray.models.hashes import write_hash_record
    from fusion_ray.models.standins import build_all_standins

    directory = tmp_path_factory.mktemp("standin_models")
    for path in build_all_standins(directory, variant="light").values():
        write_hash_record(path, "generated")
    return directory


@pytest.fixture(scope="session")
def models_config(standin_dir: Path, scrfd_path: Path):  # type: ignore[no-untyped-def]
    """ModelsConfig: the real SCRFD detector plus stand-ins for the other models."""
    from fusion_ray.config import ModelsConfig

    return ModelsConfig(models_dir=standin_dir, paths={"scrfd_2.5g": scrfd_path})


@pytest.fixture(scope="session")
def rows_models_config(standin_dir: Path, scrfd_path: Path, tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """ModelsConfig over STAND-INs (generated, labelled, not real weights) of every swapper,
    embedding converter and enhancer row of the registry, the standard stand-ins and the real SCRFD."""
    from fusion_ray.config import ModelsConfig
    from fusion_ray.fsutil import atomic_write_bytes
    from fusion_ray.models.hashes import write_hash_record
    from fusion_ray.models.registry import all_specs
    from fusion_ray.models.registry_swappers import ENHANCER_SPECS, SWAPPER_SPECS
    from fusion_ray.models.standins_quality import make_quality_standin

    directory = tmp_path_factory.mktemp("row_standins")
    for spec in (*SWAPPER_SPECS, *ENHANCER_SPECS):
        path = directory / spec.file_name
        atomic_write_bytes(path, make_quality_standin(spec.name).SerializeToString())
        write_hash_record(path, "generated")
    standard = {spec.name: standin_dir / spec.file_name for spec in all_specs()
                if (standin_dir / spec.file_name).is_file()}
    return ModelsConfig(models_dir=directory, paths={**standard, "scrfd_2.5g": scrfd_path})


def build_int8_models(models_dir: Path, scrfd_path: Path, images_dir: Path, weight_bits: str | int = "auto") -> Path:
    """``models_dir`` with the three shared photos in its calibration folder and the INT8 detector
    built from them, with ``weight_bits`` (auto: this CPU's choice) in its cache."""
    import shutil

    from fusion_ray.config import DetectorConfig, ModelsConfig
    from fusion_ray.models.precision import Int8Request, calibration_folder, detector_int8
    from fusion_ray.models.registry import get_spec
    from fusion_ray.models.store import ModelStore

    calibration_folder(models_dir).mkdir(parents=True)
    for photo in sorted(images_dir.glob("*.jpg")):
        shutil.copy(photo, calibration_folder(models_dir) / photo.name)
    store = ModelStore(models_dir, overrides={"scrfd_2.5g": scrfd_path})
    built = detector_int8(store.locate("scrfd_2.5g"), get_spec("scrfd_2.5g"),
                          Int8Request(ModelsConfig(int8_weight_bits=weight_bits), models_dir, DetectorConfig()))
    assert built is not None and built.parent == models_dir
    return models_dir


@pytest.fixture(scope="session")
def int8_models_dir(tmp_path_factory: pytest.TempPathFactory, scrfd_path: Path, images_dir: Path) -> Path:
    """A models directory whose calibration folder holds the three shared photos and whose cache
    holds the INT8 detector built from them for this CPU (about 35 s on 2 cores, once)."""
    return build_int8_models(tmp_path_factory.mktemp("int8_models"), scrfd_path, images_dir)
