"""Core data types and array aliases.

Vocabulary (the format is in the name): ``frame`` is BGR uint8 HxWx3, ``crop`` an aligned face
crop (BGR uint8 SxSx3), ``affine_matrix`` a 2x3 float matrix mapping frame -> crop,
``landmarks_5`` a 5x2 float array (left eye, right eye, nose, left mouth, right mouth),
``bbox_xyxy`` a length-4 float array ``[x1, y1, x2, y2]``, ``size_wh`` a ``(width, height)``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, get_args

import numpy as np
import numpy.typing as npt

Frame = npt.NDArray[np.uint8]
"""BGR uint8 image, shape (H, W, 3)."""
Crop = npt.NDArray[np.uint8]
"""Aligned face crop, BGR uint8, shape (S, S, 3)."""
Mask = npt.NDArray[np.float32]
"""Float mask in [0, 1], shape (H, W)."""
AffineMatrix = npt.NDArray[np.float64]
"""2x3 affine matrix mapping frame coordinates to crop coordinates."""
Landmarks5 = npt.NDArray[np.float32]
"""5x2 landmarks: left eye, right eye, nose, left mouth corner, right mouth corner."""
BBoxXYXY = npt.NDArray[np.float32]
"""[x1, y1, x2, y2] in pixels."""
Embedding = npt.NDArray[np.float32]
"""L2-normalised identity embedding, shape (512,)."""

StreamSelectMode = Literal["all", "largest", "index"]
"""The selection modes that need no reference face: those a service request and a live stream take."""
SelectMode = Literal[StreamSelectMode, "reference"]
"""Which target faces are swapped: all, the largest, the one at an index in reading order, or those
near a reference face."""
SELECT_MODES: tuple[SelectMode, ...] = get_args(SelectMode)
STREAM_SELECT_MODES: tuple[StreamSelectMode, ...] = get_args(StreamSelectMode)
FaceSelectorOrder = Literal["left-right", "right-left", "top-bottom", "bottom-top", "small-large", "large-small",
                            "best-worst", "worst-best"]
"""FaceFusion's ``--face-selector-order``: the order the faces a selection considers are put in (by the
box's left or top edge, its area, or the detector's score)."""
FACE_SELECTOR_ORDERS: tuple[FaceSelectorOrder, ...] = get_args(FaceSelectorOrder)
DetectorAngle = Literal[0, 90, 180, 270]
"""FaceFusion's ``--face-detector-angles``: the frame is also searched turned by this many degrees
(counter-clockwise, as OpenCV's ``getRotationMatrix2D``)."""
DETECTOR_ANGLES: tuple[DetectorAngle, ...] = get_args(DetectorAngle)


def check_frame(frame: Any, name: str = "frame") -> Frame:
    """Return ``frame`` if it is a BGR uint8 HxWx3 array, else raise ``ValueError``."""
    if not isinstance(frame, np.ndarray):
        raise ValueError(f"{name}: expected a numpy array, got {type(frame).__name__}")
    if frame.dtype != np.uint8:
        raise ValueError(f"{name}: expected dtype uint8, got {frame.dtype}")
    if frame.ndim != 3 or frame.shape[2] != 3:
        raise ValueError(f"{name}: expected shape (H, W, 3), got {frame.shape}")
    if frame.shape[0] < 1 or frame.shape[1] < 1:
        raise ValueError(f"{name}: expected a non-empty image, got shape {frame.shape}")
    return frame


@dataclass(frozen=True)
class Face:
    """One detected face. Validated on construction; arrays are float32 copies."""

    bbox_xyxy: BBoxXYXY
    landmarks_5: Landmarks5
    score: float
    embedding: Embedding | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        bbox = np.asarray(self.bbox_xyxy, dtype=np.float32).reshape(-1)
        if bbox.shape != (4,):
            raise ValueError(f"Face.bbox_xyxy: expected 4 values, got shape {np.shape(self.bbox_xyxy)}")
        if not np.all(np.isfinite(bbox)) or bbox[2] < bbox[0] or bbox[3] < bbox[1]:
            raise ValueError(f"Face.bbox_xyxy: expected finite x1<=x2, y1<=y2, got {bbox.tolist()}")
        landmarks = np.asarray(self.landmarks_5, dtype=np.float32)
        if landmarks.shape != (5, 2):
            raise ValueError(f"Face.landmarks_5: expected shape (5, 2), got {landmarks.shape}")
        if not np.all(np.isfinite(landmarks)):
            raise ValueError("Face.landmarks_5: expected finite values")
        score = float(self.score)
        if not 0.0 <= score <= 1.0:
            raise ValueError(f"Face.score: expected a value in [0, 1], got {score}")
        object.__setattr__(self, "bbox_xyxy", bbox)
        object.__setattr__(self, "landmarks_5", landmarks)
        object.__setattr__(self, "score", score)
        if self.embedding is not None:
            embedding = np.asarray(self.embedding, dtype=np.float32).reshape(-1)
            if embedding.ndim != 1 or embedding.size == 0:
                raise ValueError(f"Face.embedding: expected a 1-D vector, got shape {np.shape(self.embedding)}")
            object.__setattr__(self, "embedding", embedding)

    @property
    def area(self) -> float:
        """Area of the bounding box in pixels."""
        x1, y1, x2, y2 = self.bbox_xyxy
        return float((x2 - x1) * (y2 - y1))

    def with_embedding(self, embedding: Embedding) -> Face:
        """A copy of this face carrying ``embedding``."""
        return Face(self.bbox_xyxy, self.landmarks_5, self.score, embedding)


@dataclass(frozen=True)
class SourceIdentity:
    """The identity to swap in, computed once per job or request and shared (it is small).

    ``embedding``: the averaged, L2-normalised ArcFace embedding (None without an embedder);
    ``latent``: the inswapper latent derived from it (None for other swappers);
    ``crop``: the aligned source face crop, for swappers given the source as an image (classic at
    its crop size; blendswap_256 and uniface_256 at their row's source template and size);
    ``num_images``: how many source images went into it.
    """

    embedding: Embedding | None
    latent: npt.NDArray[np.float32] | None
    crop: Crop | None
    num_images: int
