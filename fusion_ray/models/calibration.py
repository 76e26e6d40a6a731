"""Calibration frames for quantising the detector to INT8.

Static quantisation fixes each activation's range from the tensors seen while calibrating, so
the calibration frames must look like what the detector meets: faces of many sizes (a face
filling a portrait photo, a dozen small faces in a group shot), turned heads, dark and bright
light, several faces per frame, and the canvases real frames give (``fit``: 640x384 for
16:9, 384x640 for portrait, 640x640 for square). A few photos do not cover that: calibrated on
the three shared photos alone, INT8 SCRFD found 63 of the 71 faces FP32 finds.

:func:`calibration_frames` turns a few photos into a varied set: each photo as it is, then
deterministic augmentations (scale, rotation, flip, brightness/contrast/gamma, blur, grey)
placed on frames of several sizes, and collages of several scaled photos per frame. The
frames go through the detector's own pre-processing (:func:`detector_blobs`), so calibration
sees exactly the tensors inference sees. Pure numpy/OpenCV; the same recipe and photos give
the same frames (and so the same cache key, see :func:`frames_key`).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np

from fusion_ray.config import DetectorConfig
from fusion_ray.models.detector import frame_to_blob, plan_input
from fusion_ray.models.registry import ModelSpec
from fusion_ray.types import Frame

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".webp")
FRAME_SIZES_WH: tuple[tuple[int, int], ...] = ((640, 360), (360, 640), (640, 640), (1280, 720), (480, 640))
"""Frame sizes the augmentations are drawn on: landscape, portrait and square canvases."""


@dataclass(frozen=True)
class CalibrationRecipe:
    """How many augmented frames to make from the photos, and the seed that fixes them."""

    augmented: int = 48
    collages: int = 16
    seed: int = 0
    version: int = 1
    """Bumped when the augmentation code changes, so cached INT8 models are rebuilt."""

    def describe(self) -> str:
        return f"v{self.version}:aug{self.augmented}:col{self.collages}:seed{self.seed}"


def calibration_images(folder: Path) -> list[Path]:
    """The image files in ``folder`` (not recursive), sorted by name; [] when it is missing."""
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)


def frames_key(frames: Sequence[Frame], recipe: CalibrationRecipe) -> str:
    """sha256 of the recipe and the frames (shape and pixels, in order): the calibration set's hash,
    which is all the cache keeps of it."""
    digest = hashlib.sha256(recipe.describe().encode())
    for frame in frames:
        digest.update(repr(frame.shape).encode() + b"\0" + np.ascontiguousarray(frame).tobytes())
    return digest.hexdigest()


def read_photos(images: Sequence[Path], max_side: int = 1280) -> list[Frame]:
    """The images as BGR frames, shrunk to ``max_side``; unreadable files are skipped."""
    photos: list[Frame] = []
    for path in images:
        frame = cv2.imread(str(path), cv2.IMREAD_COLOR)
        if frame is None:
            continue
        scale = max_side / max(frame.shape[:2])
        if scale < 1.0:
            frame = cv2.resize(frame, None, fx=scale, fy=scale, interpolation=cv2.INTER_AREA)
        photos.append(np.ascontiguousarray(frame, np.uint8))
    return photos


def _background(rng: np.random.Generator, size_wh: tuple[int, int]) -> Frame:
    """A plain, a gradient or a blurred-noise background."""
    width, height = size_wh
    kind = int(rng.integers(3))
    if kind == 0:
        return np.full((height, width, 3), rng.integers(0, 256, 3), np.uint8)
    if kind == 1:
        xs = np.linspace(0.0, 1.0, width, dtype=np.float32)[None, :, None]
        a, b = rng.uniform(0, 255, 3).astype(np.float32), rng.uniform(0, 255, 3).astype(np.float32)
        return np.broadcast_to(a + (b - a) * xs, (height, width, 3)).astype(np.uint8)
    noise = rng.uniform(0, 255, (max(2, height // 32), max(2, width // 32), 3)).astype(np.float32)
    return np.asarray(cv2.resize(noise, (width, height), interpolation=cv2.INTER_CUBIC).clip(0, 255), np.uint8)


def _relight(image: Frame, rng: np.random.Generator) -> Frame:
    """Contrast, brightness and gamma changes; sometimes grey or blurred."""
    out = image.astype(np.float32) * rng.uniform(0.55, 1.4) + rng.uniform(-60, 50)
    out = 255.0 * (np.clip(out, 0, 255) / 255.0) ** rng.uniform(0.6, 1.6)
    result = out.astype(np.uint8)
    if rng.random() < 0.15:
        result = cv2.cvtColor(cv2.cvtColor(result, cv2.COLOR_BGR2GRAY), cv2.COLOR_GRAY2BGR)
    if rng.random() < 0.2:
        result = cv2.GaussianBlur(result, (0, 0), rng.uniform(0.8, 2.0))
    return np.asarray(result, np.uint8)


def _place(canvas: Frame, photo: Frame, rng: np.random.Generator, *, scale: float,
           angle: float, centre: tuple[float, float]) -> None:
    """Warp ``photo`` (scaled, rotated, maybe flipped) onto ``canvas`` around ``centre``, in place."""
    if rng.random() < 0.5:
        photo = np.ascontiguousarray(photo[:, ::-1])
    h, w = photo.shape[:2]
    matrix = cv2.getRotationMatrix2D((w / 2, h / 2), angle, scale)
    matrix[:, 2] += np.asarray(centre) - np.asarray([w / 2, h / 2])
    size = (canvas.shape[1], canvas.shape[0])
    warped = cv2.warpAffine(photo, matrix, size, flags=cv2.INTER_LINEAR)
    mask = cv2.warpAffine(np.full((h, w), 255, np.uint8), matrix, size, flags=cv2.INTER_NEAREST)
    canvas[mask > 0] = warped[mask > 0]


def augmented_frame(photo: Frame, rng: np.random.Generator) -> Frame:
    """One photo, scaled (from a tenth to 1.3x of the frame), rotated (up to 35 degrees), maybe
    flipped and relit, on a frame of one of :data:`FRAME_SIZES_WH`."""
    width, height = FRAME_SIZES_WH[int(rng.integers(len(FRAME_SIZES_WH)))]
    fit = min(width / photo.shape[1], height / photo.shape[0])
    scale = fit * math.exp(rng.uniform(math.log(0.1), math.log(1.3)))
    canvas = _background(rng, (width, height))
    centre = (rng.uniform(0.25, 0.75) * width, rng.uniform(0.25, 0.75) * height)
    _place(canvas, _relight(photo, rng), rng, scale=scale, angle=rng.uniform(-35, 35), centre=centre)
    return canvas


def collage_frame(photos: Sequence[Frame], rng: np.random.Generator) -> Frame:
    """Two to nine scaled, relit photos on a grid of one frame: many small faces at once."""
    width, height = FRAME_SIZES_WH[int(rng.integers(len(FRAME_SIZES_WH)))]
    cols, rows = int(rng.integers(2, 4)), int(rng.integers(1, 4))
    canvas = _background(rng, (width, height))
    cell_w, cell_h = width / cols, height / rows
    for row in range(rows):
        for col in range(cols):
            photo = photos[int(rng.integers(len(photos)))]
            fit = min(cell_w / photo.shape[1], cell_h / photo.shape[0])
            centre = ((col + 0.5) * cell_w, (row + 0.5) * cell_h)
            _place(canvas, _relight(photo, rng), rng, scale=fit * rng.uniform(0.6, 1.1),
                   angle=rng.uniform(-20, 20), centre=centre)
    return canvas


def calibration_frames(photos: Sequence[Frame], recipe: CalibrationRecipe) -> Iterator[Frame]:
    """The photos themselves, then ``recipe.augmented`` augmented frames and ``recipe.collages``
    collages, drawn from one generator seeded by ``recipe.seed`` (lazily: one frame at a time)."""
    if not photos:
        return
    rng = np.random.default_rng(recipe.seed)
    yield from photos
    for i in range(recipe.augmented):
        yield augmented_frame(photos[i % len(photos)], rng)
    for _ in range(recipe.collages):
        yield collage_frame(photos, rng)


def frame_blob(frame: Frame, spec: ModelSpec, cfg: DetectorConfig,
               model_hw: tuple[int | None, int | None] = (None, None)) -> np.ndarray:
    """A frame as the detector's input tensor, through its own canvas plan and normalisation."""
    return frame_to_blob(frame, plan_input(frame.shape[:2], cfg, model_hw), spec)
