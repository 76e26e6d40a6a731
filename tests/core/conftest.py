"""Fixtures of the core's detector tests: the real SCRFD on one CPU thread."""

from __future__ import annotations

from pathlib import Path

import pytest

from fusion_ray.config import DetectorConfig, RuntimeConfig
from fusion_ray.models.detector import ScrfdDetector
from fusion_ray.models.registry import get_spec
from fusion_ray.models.session import create_session


@pytest.fixture(scope="module")
def detector(scrfd_path: Path) -> ScrfdDetector:
    """The real SCRFD detector on one CPU thread (its model path given: it may batch crops)."""
    session, _ = create_session(scrfd_path, RuntimeConfig(providers=["cpu"]), cpu_budget=1)
    return ScrfdDetector(session, get_spec("scrfd_2.5g"), DetectorConfig(), model_path=scrfd_path)
