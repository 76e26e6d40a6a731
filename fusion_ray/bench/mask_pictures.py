"""The README's mask pictures: box, area and mouth masks on a real photo, with the real dlib_68
landmarker and the classic swapper (the one real swap here; no stand-in is involved).

``masks.png`` (each mask over the target crop) is drawn with the ops; ``swaps.png`` is made by
the chain itself (:class:`fusion_ray.runners.inline.Engine`, as ``fusion-ray swap --swapper classic
--face-landmarker-model dlib_68 --face-mask-types ...`` runs it).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np
import onnxruntime as ort

from fusion_ray.config import (
    DetectorConfig,
    EngineConfig,
    LandmarkerConfig,
    MaskConfig,
    ModelsConfig,
    RuntimeConfig,
    SwapConfig,
)
from fusion_ray.errors import NoFaceError
from fusion_ray.imageio import read_image
from fusion_ray.models.detector import ScrfdDetector
from fusion_ray.models.landmarker import Dlib68Landmarker
from fusion_ray.models.registry import get_spec
from fusion_ray.ops.align import align_face, transform_points
from fusion_ray.ops.face_masks import (
    area_mask,
    box_mask_percent,
    combine_masks,
    mouth_keep_mask,
    without,
)
from fusion_ray.ops.landmarks import alignment_points
from fusion_ray.ops.paste import crop_roi
from fusion_ray.runners.inline import Engine
from fusion_ray.types import Face, Frame, Mask

TEMPLATE = "arcface_128"
ALL_AREAS = ("upper-face", "lower-face", "mouth")


@dataclass(frozen=True)
class FaceCrop:
    frame: Frame
    crop: np.ndarray
    matrix: np.ndarray
    points_in_crop: np.ndarray


def _largest_face(detector: ScrfdDetector, frame: Frame, name: str) -> Face:
    faces = detector.detect(frame)
    if not faces:
        raise NoFaceError(f"{name}: no face found")
    return max(faces, key=lambda f: f.area)


def face_crop(detector: ScrfdDetector, landmarker: Dlib68Landmarker, path: Path, size: int) -> FaceCrop:
    """The largest face of an image, aligned with the 68 points' 5 when dlib_68 scores over 0.5."""
    frame = read_image(path).frame
    face = _largest_face(detector, frame, str(path))
    found = landmarker.detect(frame, face.bbox_xyxy[None], face.landmarks_5[None])
    five = alignment_points(face.landmarks_5, found.points[0], float(found.scores[0]))
    crop, matrix = align_face(frame, five, TEMPLATE, size)
    return FaceCrop(frame, crop, matrix, transform_points(found.points[0], matrix))


def picture_masks(target: FaceCrop) -> dict[str, Mask]:
    """The three masks to compare, each combined (minimum) with FaceFusion's default box mask."""
    size = target.crop.shape[0]
    box = box_mask_percent(size, 0.3)
    return {
        "box": box,
        "area": combine_masks([box, area_mask(size, target.points_in_crop, ALL_AREAS)]),
        "mouth": combine_masks([box, without(mouth_keep_mask(size, target.points_in_crop))]),
    }


def _overlay(crop: np.ndarray, mask: Mask, points: np.ndarray) -> np.ndarray:
    tint = np.zeros_like(crop)
    tint[..., 1] = 255
    shown = (crop * (1 - 0.45 * mask[..., None]) + tint * 0.45 * mask[..., None]).astype(np.uint8)
    for x, y in np.round(points).astype(int):
        cv2.circle(shown, (int(x), int(y)), 1, (0, 0, 255), -1)
    return shown


def _label(image: np.ndarray, text: str) -> np.ndarray:
    out = image.copy()
    cv2.putText(out, text, (6, 18), cv2.FONT_HERSHEY_SIMPLEX, 0.5, (255, 255, 255), 2, cv2.LINE_AA)
    cv2.putText(out, text, (6, 18), cv2.FONT_HERSHEY_SIMPLEX, 0.5, (0, 0, 0), 1, cv2.LINE_AA)
    return out


CHAIN_MASKS: dict[str, MaskConfig] = {
    "box": MaskConfig(types=["box"]),
    "area": MaskConfig(types=["box", "area"]),
    "lower-face": MaskConfig(types=["box", "area"], areas=["lower-face"]),
    "mouth mask": MaskConfig(types=["box"], mouth_mask=True),
}
"""The swaps.png panels: ``--face-mask-types`` / ``--face-mask-areas`` / ``--mouth-mask`` of each."""


def chain_swaps(target_path: Path, source_path: Path, scrfd_path: Path, around: np.ndarray,
                panel: int) -> list[np.ndarray]:
    """The target and its classic swap through the chain with each of :data:`CHAIN_MASKS` (REAL
    dlib_68 landmarker, REAL SCRFD detector), cut at ``around`` (x0, y0, x1, y1)."""
    target = read_image(target_path).frame
    x0, y0, x1, y1 = (int(v) for v in around)
    panels = [_label(cv2.resize(target[y0:y1, x0:x1], (panel, panel), interpolation=cv2.INTER_AREA), "target")]
    for name, masks in CHAIN_MASKS.items():
        cfg = EngineConfig(models=ModelsConfig(paths={"scrfd_2.5g": scrfd_path}),
                           runtime=RuntimeConfig(providers=["cpu"]), swap=SwapConfig(swapper="classic"),
                           landmarker=LandmarkerConfig(model="dlib_68"), masks=masks)
        engine = Engine.load(cfg, cpu_budget=1)
        out = engine.process_frame(target, engine.prepare_source([read_image(source_path).frame])).frame
        panels.append(_label(cv2.resize(out[y0:y1, x0:x1], (panel, panel), interpolation=cv2.INTER_AREA), name))
    return panels


def make_pictures(target_path: Path, source_path: Path, scrfd_path: Path, out_dir: Path, *,
                  size: int = 256, panel: int = 200) -> list[Path]:
    """Write ``masks.png`` (each mask over the target crop, 68 points in red) and ``swaps.png``
    (the classic swap through the chain with each mask, around the face) into ``out_dir``."""
    session = ort.InferenceSession(str(scrfd_path), providers=["CPUExecutionProvider"])
    detector = ScrfdDetector(session, get_spec("scrfd_2.5g"), DetectorConfig())
    landmarker = Dlib68Landmarker()
    target = face_crop(detector, landmarker, target_path, size)
    roi = crop_roi(target.matrix, size, target.frame.shape[:2], margin=0)
    mask_panels = []
    for name, mask in picture_masks(target).items():
        shown = _overlay(target.crop, mask, target.points_in_crop)
        mask_panels.append(_label(cv2.resize(shown, (panel, panel), interpolation=cv2.INTER_AREA), f"{name} mask"))
    swap_panels = chain_swaps(target_path, source_path, scrfd_path, np.array([roi.x0, roi.y0, roi.x1, roi.y1]),
                              panel)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for file_name, panels in (("masks.png", mask_panels), ("swaps.png", swap_panels)):
        path = out_dir / file_name
        cv2.imwrite(str(path), np.hstack(panels), [cv2.IMWRITE_PNG_COMPRESSION, 9])
        written.append(path)
    return written
