"""A shared check for animated outputs (GIF, APNG, WebP): every frame swapped, timing and loop kept."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image


def assert_every_frame_swapped(before_path: Path, after_path: Path, durations: list[int]) -> None:
    """``after_path`` has ``before_path``'s frames (one per duration, in ms), loops forever, and
    each of its frames differs from the input's (swapped, not a copy of the first)."""
    with Image.open(before_path) as before, Image.open(after_path) as after:
        assert after.n_frames == len(durations) and after.info.get("loop") == 0
        for index, duration in enumerate(durations):
            before.seek(index)
            after.seek(index)
            after.load()
            assert after.info["duration"] == duration
            assert np.abs(np.asarray(before.convert("RGB"), int) - np.asarray(after.convert("RGB"), int)).mean() > 1
