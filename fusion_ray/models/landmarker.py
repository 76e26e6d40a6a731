"""68-point face landmarkers: dlib's shape predictor (``dlib_68``) and 2dfan4 (ONNX).

Both take frames and the detector's faces as arrays (boxes ``(N, 4)`` and 5 points
``(N, 5, 2)``, with each face's frame index for a batch of frames) and return
:class:`Landmarks68`: ``(N, 68, 2)`` frame pixels in the iBUG 300-W order and a score per face
in [0, 1]. The 5 alignment points come from the 68 when the score is over the landmarker
threshold (:func:`fusion_ray.ops.landmarks.alignment_points`).

- ``dlib_68``: dlib's ``shape_predictor_68_face_landmarks.dat`` as the ``face-recognition-models``
  package ships it, run by the prebuilt ``dlib-bin`` wheel (the ``landmarks`` extra). Fitted
  inside each detector box; a face rolled ``UPRIGHT_FROM_DEGREES`` (15) or more is fitted on a
  crop turned upright (dlib starts from an upright mean face: on a face rolled 45 degrees its
  lips landed half a mouth width away) and its points turned back. dlib gives no confidence,
  so the score is the agreement of its 68 points with the detector's 5 (:func:`fusion_ray.ops.landmarks.consistency_score`).
- ``2dfan4``: FaceFusion's processing (``face_landmarker.py``): 256 px crop scaled and rotated
  from the box, BGR / 255 NCHW into ``input``; outputs ``(N, 68, 3)`` points in 64 px heatmap
  units and ``(N, 68, 64, 64)`` heatmaps, found by rank (their names are not known here).
  Every face of a batch goes through in batched calls.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import numpy.typing as npt
import onnxruntime as ort

from fusion_ray.errors import ModelError, ModelMissingError
from fusion_ray.models.common import fixed_batch, input_by_rank, run_in_batches
from fusion_ray.models.onnx_info import is_stand_in_metadata
from fusion_ray.models.session import NotPicklable, read_metadata
from fusion_ray.models.spec import ModelSpec
from fusion_ray.ops.landmarks import (
    LANDMARKER_CROP_SIZE,
    UPRIGHT_FROM_DEGREES,
    brighten_dark_crop,
    consistency_score,
    face_angle,
    heatmap_points_to_frame,
    heatmap_score,
    landmarker_crop_matrix,
    roll_degrees,
    upright_crop,
)
from fusion_ray.types import Frame, check_frame

DLIB_68_FILE = "shape_predictor_68_face_landmarks.dat"
DLIB_INSTALL = "pip install 'fusion-ray[landmarks]'"


@dataclass(frozen=True)
class Landmarks68:
    """68 points per face in frame pixels, and a score per face in [0, 1]."""

    points: npt.NDArray[np.float32]
    """(N, 68, 2)."""
    scores: npt.NDArray[np.float32]
    """(N,)."""

    @classmethod
    def empty(cls) -> Landmarks68:
        return cls(np.zeros((0, 68, 2), np.float32), np.zeros(0, np.float32))


def _check_faces(boxes: npt.ArrayLike, landmarks_5: npt.ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    box_rows = np.asarray(boxes, dtype=np.float32).reshape(-1, 4)
    five = np.asarray(landmarks_5, dtype=np.float32)
    if five.shape != (len(box_rows), 5, 2):
        raise ValueError(f"expected landmarks_5 of shape ({len(box_rows)}, 5, 2), got {five.shape}")
    return box_rows, five


def _frame_of_each_face(frames: Sequence[Frame], frame_index: npt.ArrayLike, n: int) -> np.ndarray:
    index = np.asarray(frame_index, dtype=np.int64).reshape(-1)
    if index.shape != (n,) or (n and (index.min() < 0 or index.max() >= len(frames))):
        raise ValueError(f"frame_index: expected {n} indices into {len(frames)} frames, got {index.tolist()}")
    return index


def dlib_68_path() -> Path:
    """The shape predictor file of the installed ``face-recognition-models`` package.

    :class:`ModelMissingError` (one line: the file and the install command) when the package is
    not installed.
    """
    try:
        import face_recognition_models
    except ImportError:
        raise ModelMissingError(f"dlib_68 needs {DLIB_68_FILE} from the face-recognition-models package: "
                                f"{DLIB_INSTALL}") from None
    path = Path(face_recognition_models.pose_predictor_model_location())
    if not path.is_file():
        raise ModelMissingError(f"dlib_68: {path} is missing; reinstall with {DLIB_INSTALL}")
    return path


def check_dlib_68() -> Path:
    """The shape predictor file, once dlib itself is known to import (a job's driver checks this
    before its actors load the landmarker); :class:`ModelMissingError` naming the install command."""
    try:
        import dlib  # noqa: F401
    except ImportError:
        raise ModelMissingError(f"dlib_68 needs the dlib-bin wheel to run {DLIB_68_FILE}: {DLIB_INSTALL}") from None
    return dlib_68_path()


class Dlib68Landmarker(NotPicklable):
    """dlib's 68-point shape predictor (the ``dlib_68`` model); the one real landmarker here."""

    name = "dlib_68"
    stand_in = False

    def __init__(self, model_path: Path | None = None) -> None:
        try:
            import dlib
        except ImportError:
            raise ModelMissingError(f"dlib_68 needs the dlib-bin wheel to run {DLIB_68_FILE}: "
                                    f"{DLIB_INSTALL}") from None
        path = dlib_68_path() if model_path is None else Path(model_path)
        if not path.is_file():
            raise ModelMissingError(f"dlib_68: {path} is missing; {DLIB_INSTALL}")
        try:
            self._predictor: Any = dlib.shape_predictor(str(path))
        except RuntimeError as exc:
            raise ModelError(f"dlib_68: cannot read {path}: {exc}") from exc
        self._rectangle: Any = dlib.rectangle

    def detect(self, frame: Frame, boxes: npt.ArrayLike, landmarks_5: npt.ArrayLike) -> Landmarks68:
        """68 points for each detector box of one BGR frame; scores from the detector's 5 points."""
        check_frame(frame)
        box_rows, five = _check_faces(boxes, landmarks_5)
        if len(box_rows) == 0:
            return Landmarks68.empty()
        rgb = np.ascontiguousarray(frame[..., ::-1])
        points = np.empty((len(box_rows), 68, 2), np.float32)
        scores = np.empty(len(box_rows), np.float32)
        for i, box in enumerate(box_rows):
            if abs(roll_degrees(five[i])) < UPRIGHT_FROM_DEGREES:
                points[i] = self._fit(rgb, box)
            else:  # dlib's fit starts from an upright mean face: a rolled face is fitted upright
                matrix, side, upright_box = upright_crop(box, five[i])
                crop = cv2.warpAffine(rgb, matrix, (side, side), flags=cv2.INTER_LINEAR,
                                      borderMode=cv2.BORDER_REPLICATE)
                inverse = cv2.invertAffineTransform(matrix)
                points[i] = self._fit(np.ascontiguousarray(crop), upright_box) @ inverse[:, :2].T + inverse[:, 2]
            scores[i] = consistency_score(points[i], five[i])
        return Landmarks68(points, scores)

    def _fit(self, rgb: np.ndarray, box: np.ndarray) -> npt.NDArray[np.float64]:
        x1, y1, x2, y2 = (int(round(float(v))) for v in box)
        shape = self._predictor(rgb, self._rectangle(x1, y1, x2, y2))
        return np.array([(shape.part(k).x, shape.part(k).y) for k in range(68)], np.float64)

    def detect_batch(self, frames: Sequence[Frame], frame_index: npt.ArrayLike, boxes: npt.ArrayLike,
                     landmarks_5: npt.ArrayLike) -> Landmarks68:
        """:meth:`detect` over faces of several frames (``frame_index`` gives each face's frame)."""
        box_rows, five = _check_faces(boxes, landmarks_5)
        index = _frame_of_each_face(frames, frame_index, len(box_rows))
        if len(box_rows) == 0:
            return Landmarks68.empty()
        parts = [self.detect(frames[int(f)], box_rows[i:i + 1], five[i:i + 1]) for i, f in enumerate(index)]
        return Landmarks68(np.concatenate([p.points for p in parts]), np.concatenate([p.scores for p in parts]))


def fan_crops(frames: Sequence[Frame], frame_index: np.ndarray, boxes: np.ndarray,
              landmarks_5: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """2dfan4's input: (N, 3, 256, 256) float32 BGR / 255 and the (N, 2, 3) frame -> crop matrices."""
    size = LANDMARKER_CROP_SIZE
    blob = np.empty((len(boxes), 3, size, size), np.float32)
    matrices = np.empty((len(boxes), 2, 3), np.float64)
    for i, f in enumerate(frame_index):
        matrices[i] = landmarker_crop_matrix(boxes[i], face_angle(landmarks_5[i]), size)
        crop = cv2.warpAffine(frames[int(f)], matrices[i], (size, size))
        blob[i] = brighten_dark_crop(np.asarray(crop, np.uint8)).transpose(2, 0, 1) / np.float32(255.0)
    return blob, matrices


class Fan68Landmarker(NotPicklable):
    """FaceFusion's 2dfan4 landmarker (ONNX); batched when the export's batch is dynamic."""

    name = "2dfan4"

    def __init__(self, session: ort.InferenceSession, spec: ModelSpec) -> None:
        self.session = session
        self.spec = spec
        self.image_input = input_by_rank(session, 4, "input", spec.name)
        expected = [3, LANDMARKER_CROP_SIZE, LANDMARKER_CROP_SIZE]
        if list(self.image_input.shape[1:]) != expected:
            raise ModelError(f"{spec.name}: expected input (N, 3, 256, 256), got {self.image_input.shape}")
        by_rank = {len(o.shape): o.name for o in session.get_outputs()}
        if set(by_rank) != {3, 4}:
            raise ModelError(f"{spec.name}: expected a (N, 68, 3) points output and a (N, 68, 64, 64) heatmap "
                             f"output, got {[(o.name, o.shape) for o in session.get_outputs()]}")
        self.points_output, self.heatmap_output = by_rank[3], by_rank[4]
        self.batch = fixed_batch(self.image_input)
        self.stand_in = is_stand_in_metadata(read_metadata(session))

    def detect(self, frame: Frame, boxes: npt.ArrayLike, landmarks_5: npt.ArrayLike) -> Landmarks68:
        """68 points and scores for each detector box of one BGR frame."""
        check_frame(frame)
        return self.detect_batch([frame], np.zeros(len(np.asarray(boxes).reshape(-1, 4)), np.int64),
                                 boxes, landmarks_5)

    def detect_batch(self, frames: Sequence[Frame], frame_index: npt.ArrayLike, boxes: npt.ArrayLike,
                     landmarks_5: npt.ArrayLike) -> Landmarks68:
        """Every face of a batch of frames in batched calls."""
        box_rows, five = _check_faces(boxes, landmarks_5)
        index = _frame_of_each_face(frames, frame_index, len(box_rows))
        if len(box_rows) == 0:
            return Landmarks68.empty()
        blob, matrices = fan_crops(frames, index, box_rows, five)

        def run(part: slice) -> np.ndarray:
            points, heatmaps = self.session.run([self.points_output, self.heatmap_output],
                                                {self.image_input.name: blob[part]})
            flat = np.asarray(heatmaps, np.float32).reshape(len(blob[part]), -1)
            return np.concatenate([np.asarray(points, np.float32).reshape(len(flat), -1), flat], axis=1)

        out = run_in_batches(len(blob), self.batch, run)
        raw_points = out[:, :68 * 3].reshape(-1, 68, 3)
        heatmaps = out[:, 68 * 3:].reshape(len(out), 68, -1)[:, :, :, None]
        frame_points = np.stack([heatmap_points_to_frame(raw_points[i], matrices[i]) for i in range(len(out))])
        return Landmarks68(frame_points.astype(np.float32), heatmap_score(heatmaps))
