"""Frames the core's tracking tests share."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np

from fusion_ray.imageio import read_image


def sliding_face(images_dir: Path, start_x: int, step_px: int, frames: int = 12) -> list[np.ndarray]:
    """640x360 frames of obama.jpg's face (150x170 px) moving ``step_px`` to the right a frame."""
    photo = read_image(images_dir / "obama.jpg").frame
    face = cv2.resize(photo[40:480, 300:690], (150, 170), interpolation=cv2.INTER_AREA)
    out = []
    for f in range(frames):
        canvas = np.full((360, 640, 3), 110, np.uint8)
        x = start_x + step_px * f
        canvas[90:260, x:x + 150] = face
        out.append(canvas)
    return out
