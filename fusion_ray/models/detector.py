"""SCRFD face detector with 5 landmarks (insightface export, fixed- or dynamic-size input).

Pre-processing: resize keeping the aspect ratio, pad bottom/right to the input canvas,
(pixel - 127.5) / 128, RGB. Decoding: for strides 8/16/32, 2 anchors per location centred at
(col * stride, row * stride); box and landmark distances are multiplied by the stride; score
threshold, then NMS.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np
import numpy.typing as npt
import onnxruntime as ort

from fusion_ray.config import DetectorConfig
from fusion_ray.errors import ModelError
from fusion_ray.models.onnx_info import is_stand_in_metadata
from fusion_ray.models.registry import ModelSpec
from fusion_ray.models.session import NotPicklable, read_metadata
from fusion_ray.types import Face, Frame, check_frame

STRIDES = (8, 16, 32)
ANCHORS_PER_LOCATION = 2

FloatArray = npt.NDArray[np.float32]


@dataclass(frozen=True)
class DetectorInput:
    """How a frame was placed on the detector canvas."""

    canvas_hw: tuple[int, int]
    resized_hw: tuple[int, int]
    scale: float


def plan_input(frame_hw: tuple[int, int], cfg: DetectorConfig,
               model_hw: tuple[int | None, int | None]) -> DetectorInput:
    """Canvas size and scale for a frame.

    A fixed-size export uses its own size. Otherwise ``square`` uses ``cfg.size`` on both sides
    and ``fit`` scales the longest side to ``cfg.size`` and pads only to the next multiple of 32
    (a 640x360 frame becomes 640x384 instead of 640x640: 44% fewer pixels to run).
    """
    height, width = frame_hw
    if height <= 0 or width <= 0:
        raise ValueError(f"expected a non-empty frame, got {frame_hw}")
    fixed_h, fixed_w = model_hw
    if fixed_h is not None and fixed_w is not None:
        canvas = (fixed_h, fixed_w)
        scale = min(fixed_h / height, fixed_w / width)
    elif cfg.canvas == "square":
        canvas = (cfg.size, cfg.size)
        scale = min(cfg.size / height, cfg.size / width)
    else:
        scale = cfg.size / max(height, width)
        # at least one 32-pixel row or column: a 3x20000 strip scales to under one pixel
        canvas = (32 * max(1, math.ceil(round(height * scale) / 32)), 32 * max(1, math.ceil(round(width * scale) / 32)))
    resized = (max(1, min(canvas[0], round(height * scale))), max(1, min(canvas[1], round(width * scale))))
    return DetectorInput(canvas, resized, scale)


def frame_to_blob(frame: Frame, plan: DetectorInput, spec: ModelSpec) -> FloatArray:
    """The detector's input tensor (1, 3, H, W) for ``frame`` placed on the canvas ``plan`` says:
    resized keeping the aspect ratio, padded bottom/right, (pixel - mean) / std in the spec's
    colour order. Quantisation calibrates on exactly these tensors."""
    resized_h, resized_w = plan.resized_hw
    if (resized_h, resized_w) != frame.shape[:2]:
        frame = np.asarray(cv2.resize(frame, (resized_w, resized_h), interpolation=cv2.INTER_LINEAR), np.uint8)
    canvas = cv2.copyMakeBorder(frame, 0, plan.canvas_hw[0] - resized_h, 0, plan.canvas_hw[1] - resized_w,
                                cv2.BORDER_CONSTANT, value=(0, 0, 0))
    swap_rb = spec.color_order == "RGB"
    if len(set(spec.std)) == 1:  # one fused OpenCV pass: (pixel - mean) / std, channel swap
        # OpenCV takes the mean in the output channel order, i.e. the spec's colour order.
        blob = cv2.dnn.blobFromImage(canvas, scalefactor=1.0 / spec.std[0], mean=spec.mean, swapRB=swap_rb)
        return np.asarray(blob, np.float32)
    pixels = canvas[..., ::-1] if swap_rb else canvas
    normalised = (pixels.astype(np.float32) - np.asarray(spec.mean, np.float32)) / np.asarray(spec.std, np.float32)
    return np.ascontiguousarray(normalised.transpose(2, 0, 1)[None])


def anchor_centers(canvas_hw: tuple[int, int], stride: int,
                   anchors: int = ANCHORS_PER_LOCATION) -> FloatArray:
    """(rows*cols*anchors, 2) anchor centres (x, y) for one stride, each repeated ``anchors`` times."""
    rows, cols = canvas_hw[0] // stride, canvas_hw[1] // stride
    ys, xs = np.mgrid[:rows, :cols]
    centers = np.stack([xs, ys], axis=-1).reshape(-1, 2).astype(np.float32) * stride
    return np.repeat(centers, anchors, axis=0)


def decode_scrfd(outputs: Sequence[np.ndarray], canvas_hw: tuple[int, int], threshold: float,
                 strides: Sequence[int] = STRIDES,
                 anchors: int = ANCHORS_PER_LOCATION) -> tuple[FloatArray, FloatArray, FloatArray]:
    """Turn raw SCRFD outputs into (scores (K,), boxes (K, 4), landmarks (K, 5, 2)) in canvas pixels.

    ``outputs`` are ordered as the export names them: scores for each stride, then box
    distances for each stride, then landmark distances for each stride.
    """
    n = len(strides)
    if len(outputs) != 3 * n:
        raise ModelError(f"SCRFD: expected {3 * n} outputs (scores, boxes, landmarks per stride), got {len(outputs)}")
    all_scores, all_boxes, all_kps = [], [], []
    for i, stride in enumerate(strides):
        scores = np.asarray(outputs[i], np.float32).reshape(-1)
        boxes = np.asarray(outputs[i + n], np.float32).reshape(-1, 4) * stride
        kps = np.asarray(outputs[i + 2 * n], np.float32).reshape(-1, 10) * stride
        centers = anchor_centers(canvas_hw, stride, anchors)
        if len(centers) != len(scores) or len(boxes) != len(scores) or len(kps) != len(scores):
            raise ModelError(f"SCRFD: stride {stride} has {len(scores)} scores, {len(boxes)} boxes, "
                             f"{len(kps)} landmark rows; expected {len(centers)} for canvas {canvas_hw}")
        keep = scores >= threshold
        if not np.any(keep):
            continue
        c = centers[keep]
        d = boxes[keep]
        all_scores.append(scores[keep])
        all_boxes.append(np.stack([c[:, 0] - d[:, 0], c[:, 1] - d[:, 1],
                                   c[:, 0] + d[:, 2], c[:, 1] + d[:, 3]], axis=-1))
        all_kps.append((kps[keep].reshape(-1, 5, 2) + c[:, None, :]).astype(np.float32))
    if not all_scores:
        return (np.zeros((0,), np.float32), np.zeros((0, 4), np.float32), np.zeros((0, 5, 2), np.float32))
    return (np.concatenate(all_scores), np.concatenate(all_boxes).astype(np.float32),
            np.concatenate(all_kps))


def split_rows(outputs: Sequence[np.ndarray], n: int, canvas_hw: tuple[int, int],
               strides: Sequence[int] = STRIDES, anchors: int = ANCHORS_PER_LOCATION) -> list[list[np.ndarray]]:
    """Each image's outputs from one call on ``n`` images of one canvas (a batch-dynamic copy of
    an insightface export): per grid cell, a stride's output holds the ``anchors`` rows of image
    0, then those of image 1, ... Output ``i`` is of stride ``strides[i % len(strides)]``."""
    images: list[list[np.ndarray]] = [[] for _ in range(n)]
    for i, out in enumerate(outputs):
        stride = strides[i % len(strides)]
        cells = (canvas_hw[0] // stride) * (canvas_hw[1] // stride)
        rows = np.asarray(out)
        if rows.shape[0] != cells * n * anchors:
            raise ModelError(f"SCRFD: output {i} has {rows.shape[0]} rows, expected {cells * n * anchors} "
                             f"for {n} images at {canvas_hw}")
        grid = rows.reshape(cells, n, anchors, *rows.shape[1:])
        for k in range(n):
            images[k].append(grid[:, k].reshape(cells * anchors, *rows.shape[1:]))
    return images


def nms(boxes: FloatArray, scores: FloatArray, iou_threshold: float) -> npt.NDArray[np.int64]:
    """Indices of the boxes kept by greedy non-maximum suppression, highest score first."""
    if len(boxes) == 0:
        return np.zeros((0,), np.int64)
    x1, y1, x2, y2 = boxes[:, 0], boxes[:, 1], boxes[:, 2], boxes[:, 3]
    areas = np.maximum(x2 - x1, 0) * np.maximum(y2 - y1, 0)
    order = np.argsort(-scores, kind="stable")
    keep: list[int] = []
    while order.size:
        i = int(order[0])
        keep.append(i)
        rest = order[1:]
        w = np.maximum(0.0, np.minimum(x2[i], x2[rest]) - np.maximum(x1[i], x1[rest]))
        h = np.maximum(0.0, np.minimum(y2[i], y2[rest]) - np.maximum(y1[i], y1[rest]))
        inter = w * h
        iou = inter / np.maximum(areas[i] + areas[rest] - inter, 1e-9)
        order = rest[iou <= iou_threshold]
    return np.asarray(keep, np.int64)


class ScrfdDetector(NotPicklable):
    """SCRFD face detector. ``detect(frame)`` returns faces by descending score ([] when none).

    ``model_path``: the file the session runs, where known (a batch-dynamic copy is made from it:
    :func:`~fusion_ray.models.detector_batch.batch_detector`)."""

    def __init__(self, session: ort.InferenceSession, spec: ModelSpec, cfg: DetectorConfig, *,
                 model_path: Path | None = None) -> None:
        self.session = session
        self.spec = spec
        self.cfg = cfg
        self.model_path = model_path
        inputs = session.get_inputs()
        if len(inputs) != 1 or len(inputs[0].shape) != 4:
            raise ModelError(f"{spec.name}: expected one NCHW input, got {[(i.name, i.shape) for i in inputs]}")
        self.input_name = inputs[0].name
        shape = inputs[0].shape
        self.model_hw: tuple[int | None, int | None] = (
            shape[2] if isinstance(shape[2], int) else None,
            shape[3] if isinstance(shape[3], int) else None)
        self.batch_dynamic = not isinstance(shape[0], int)
        """The session takes several images per call (:meth:`detect_batch` stacks them)."""
        self.output_names = [o.name for o in session.get_outputs()]
        if len(self.output_names) != 3 * len(STRIDES):
            raise ModelError(f"{spec.name}: expected 9 outputs (SCRFD with 5 landmarks), "
                             f"got {len(self.output_names)}")
        self.stand_in = is_stand_in_metadata(read_metadata(session))

    def preprocess(self, frame: Frame) -> tuple[FloatArray, DetectorInput]:
        plan = plan_input(frame.shape[:2], self.cfg, self.model_hw)
        return frame_to_blob(frame, plan, self.spec), plan

    def forward(self, blob: FloatArray) -> list[np.ndarray]:
        return list(self.session.run(self.output_names, {self.input_name: blob}))

    def postprocess(self, outputs: Sequence[np.ndarray], plan: DetectorInput,
                    frame_hw: tuple[int, int]) -> list[Face]:
        scores, boxes, kps = decode_scrfd(outputs, plan.canvas_hw, self.cfg.score_threshold)
        keep = nms(boxes, scores, self.cfg.nms_iou)[: self.cfg.max_faces]
        height, width = frame_hw
        faces = []
        for i in keep:
            box = boxes[i] / plan.scale
            box = np.clip(box, 0, [width, height, width, height])
            faces.append(Face(box, kps[i] / plan.scale, float(scores[i])))
        return faces

    def detect(self, frame: Frame) -> list[Face]:
        check_frame(frame)
        blob, plan = self.preprocess(frame)
        return self.postprocess(self.forward(blob), plan, frame.shape[:2])

    def detect_batch(self, frames: Sequence[Frame]) -> list[list[Face]]:
        """Faces for each frame, as :meth:`detect` gives them. With a batch-dynamic session the
        frames placed on the same canvas go in one call (square canvases: every frame); the
        insightface exports have a fixed batch of 1, so there it is one call per frame."""
        if not self.batch_dynamic or len(frames) < 2:
            return [self.detect(frame) for frame in frames]
        for frame in frames:
            check_frame(frame)
        prepared = [self.preprocess(frame) for frame in frames]
        groups: dict[tuple[int, int], list[int]] = {}
        for k, (_, plan) in enumerate(prepared):
            groups.setdefault(plan.canvas_hw, []).append(k)
        found: dict[int, list[Face]] = {}
        for canvas_hw, members in groups.items():
            outputs = self.forward(np.concatenate([prepared[k][0] for k in members]))
            rows = split_rows(outputs, len(members), canvas_hw) if len(members) > 1 else [outputs]
            for k, image_rows in zip(members, rows, strict=True):
                found[k] = self.postprocess(image_rows, prepared[k][1], frames[k].shape[:2])
        return [found[k] for k in range(len(frames))]


class DetectorCanvases:
    """One detector and, made once each, detectors over its session at other canvases (a live
    stream's smaller canvas, the square crop canvas of re-detection). Thread-safe."""

    def __init__(self, base: ScrfdDetector) -> None:
        self.base = base
        self._made: dict[tuple[int, bool], ScrfdDetector] = {}
        self._lock = threading.Lock()

    def get(self, size: int | None = None, *, square: bool = False) -> ScrfdDetector:
        """The detector at ``size`` (None: the base's), on a square canvas with ``square``."""
        if size is None or (size == self.base.cfg.size and not square):
            return self.base
        with self._lock:
            if (size, square) not in self._made:
                update: dict[str, object] = {"size": size, "canvas": "square"} if square else {"size": size}
                self._made[(size, square)] = ScrfdDetector(self.base.session, self.base.spec,
                                                           self.base.cfg.model_copy(update=update),
                                                           model_path=self.base.model_path)
            return self._made[(size, square)]
