"""Plumbing for the notebooks: their parameters, the shared assets, the work folder, stand-ins.

The notebooks call the public API themselves (``Engine``, ``swap_image_files``,
``build_pipeline``, ``PipelineConfig``); this module only finds files and reads parameters,
so that CI can execute them at a tiny size (``tests/test_notebooks.py``) and a user can run
them at a larger size unchanged:

===========================  ===========================================  ====================
variable                     meaning                                      default
===========================  ===========================================  ====================
FUSION_RAY_NB_FRAMES         frames of the generated clip (02)            96
FUSION_RAY_NB_SIZE           its size, WxH                                320x180
FUSION_RAY_NB_STANDINS       stand-in variant: light or cost_faithful     light
FUSION_RAY_NB_RAY_ADDRESS    join this Ray cluster instead of starting    (start a local one)
                             a local one (the test suite passes its own)
FUSION_RAY_NB_WORK_DIR       where the clip, outputs and stand-ins go     a temp directory
FUSION_RAY_ASSETS            shared assets (photos, real SCRFD detector)  ../shared/assets
===========================  ===========================================  ====================
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from fusion_ray.bench.runner import shared_assets_dir
from fusion_ray.errors import InputError
from fusion_ray.models.standins import build_all_standins
from fusion_ray.models.store import write_hash_record

Variant = str


def _env(name: str, default: str) -> str:
    value = os.environ.get(name, "").strip()
    return value or default


def _size(text: str) -> tuple[int, int]:
    width, sep, height = text.lower().partition("x")
    if not sep or not width.isdigit() or not height.isdigit():
        raise InputError(f"FUSION_RAY_NB_SIZE: expected WxH such as 320x180, got {text!r}")
    return int(width), int(height)


@dataclass(frozen=True)
class NotebookParams:
    """The notebooks' parameters (see the module docstring)."""

    frames: int
    size_wh: tuple[int, int]
    standins: Variant
    ray_address: str | None
    work_dir: Path
    assets: Path

    def asset(self, name: str) -> Path:
        """A file of the shared assets (``images/biden.jpg``, ``models/scrfd_2.5g.onnx``)."""
        path = self.assets / name
        if not path.is_file():
            raise InputError(f"shared asset {name} not found under {self.assets} (set FUSION_RAY_ASSETS)")
        return path

    def describe(self) -> str:
        return "\n".join(f"{key}: {value}" for key, value in self.__dict__.items())


def notebook_params() -> NotebookParams:
    """Read the parameters from the environment (defaults: a small run on a laptop CPU)."""
    assets = shared_assets_dir()
    if assets is None:
        raise InputError("the shared assets were not found: set FUSION_RAY_ASSETS to the assets folder")
    standins = _env("FUSION_RAY_NB_STANDINS", "light")
    if standins not in ("light", "cost_faithful"):
        raise InputError(f"FUSION_RAY_NB_STANDINS: expected light or cost_faithful, got {standins!r}")
    work = _env("FUSION_RAY_NB_WORK_DIR", "")
    work_dir = Path(work) if work else Path(tempfile.mkdtemp(prefix="fusion_ray_nb_"))
    work_dir.mkdir(parents=True, exist_ok=True)
    return NotebookParams(
        frames=int(_env("FUSION_RAY_NB_FRAMES", "96")),
        size_wh=_size(_env("FUSION_RAY_NB_SIZE", "320x180")),
        standins=standins,
        ray_address=_env("FUSION_RAY_NB_RAY_ADDRESS", "") or None,
        work_dir=work_dir,
        assets=assets,
    )


def make_standins(directory: Path, variant: Variant = "light") -> dict[str, Path]:
    """Generate the STAND-IN models (ArcFace, inswapper, GFPGAN interfaces; no real weights).

    Each file is labelled a stand-in in its metadata, and gets a hash record (as
    ``fusion-ray models make-standins`` writes) so that the store loads it without a warning.
    """
    paths = build_all_standins(directory, variant=variant)
    for path in paths.values():
        write_hash_record(path, "generated")
    return paths
