"""Fixtures of the live tests that run the real chain: the classic swapper (a real swap) over the
real SCRFD detector, and a clip of a real photo's face moving."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from fusion_ray.config import EngineConfig, RuntimeConfig, SwapConfig
from fusion_ray.imageio import read_image
from fusion_ray.runners.inline import Engine
from fusion_ray.video.decode import decode_all
from fusion_ray.video.synthetic import make_test_video


@pytest.fixture(scope="module")
def engine(models_config):
    cfg = EngineConfig(models=models_config, runtime=RuntimeConfig(providers=["cpu"]), swap=SwapConfig(swapper="classic"))
    return Engine.load(cfg, cpu_budget=1)


def face_clip(images_dir: Path, folder: Path, *, n_frames: int, fps: int) -> list[np.ndarray]:
    """A 640x360 clip of biden.jpg's face moving (the real detector finds it), decoded."""
    face = read_image(images_dir / "biden.jpg").frame
    path = make_test_video(folder / "clip.mp4", face_image=face, n_frames=n_frames, fps=Fraction(fps), audio=False)
    return [decoded.frame for decoded in decode_all(path)]
