"""Image figures for the notebooks (matplotlib, imported only when called).

Images are downscaled before plotting and figures are drawn at a low DPI, so that an executed
notebook stays small. Every figure takes a title: the notebooks put the stand-in label there,
so that a saved figure cannot pass for a real swap.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import cv2
import numpy as np

from fusion_ray.types import Face

FIGURE_DPI = 60


def _pyplot() -> Any:
    import matplotlib.pyplot as plt

    return plt


def thumbnail(image: np.ndarray, max_side: int = 360) -> np.ndarray:
    """An RGB copy of a BGR image, scaled down so that its longer side is at most ``max_side``."""
    height, width = image.shape[:2]
    scale = min(1.0, max_side / max(height, width))
    if scale < 1.0:
        image = cv2.resize(image, (max(1, round(width * scale)), max(1, round(height * scale))),
                           interpolation=cv2.INTER_AREA)
    return np.ascontiguousarray(image[..., ::-1])


def show_images(panels: Sequence[tuple[str, np.ndarray]], title: str, *, max_side: int = 360,
                panel_inches: float = 3.6) -> Any:
    """BGR images side by side, each with its caption, under ``title``."""
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(panels), figsize=(panel_inches * len(panels), panel_inches * 0.95),
                             dpi=FIGURE_DPI, squeeze=False)
    for ax, (caption, image) in zip(axes[0], panels, strict=True):
        ax.imshow(thumbnail(image, max_side))
        ax.set_title(caption, fontsize=10)
        ax.axis("off")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def draw_faces(image: np.ndarray, faces: Sequence[Face]) -> np.ndarray:
    """A copy of a BGR image with each face's box, score and five landmarks drawn."""
    out = image.copy()
    thickness = max(1, round(max(image.shape[:2]) / 300))
    for face in faces:
        x1, y1, x2, y2 = (int(round(float(v))) for v in face.bbox_xyxy)
        cv2.rectangle(out, (x1, y1), (x2, y2), (0, 255, 0), thickness)
        cv2.putText(out, f"{face.score:.2f}", (x1, max(0, y1 - 4 * thickness)), cv2.FONT_HERSHEY_SIMPLEX,
                    0.4 * thickness, (0, 255, 0), thickness)
        for x, y in face.landmarks_5:
            cv2.circle(out, (int(round(float(x))), int(round(float(y)))), 2 * thickness, (0, 0, 255), -1)
    return out
