"""Detections at one precision against another (INT8 against FP32), shared by test and benchmark.

The reference faces are FP32's faces scoring at least ``min_score`` (0.6). Each is matched to
at most one candidate face by greedy IoU (highest first, at least ``match_iou``). Figures:
recall (matched / reference faces), box IoU mean and minimum over the matched faces, the mean
landmark error over the matched faces as a fraction of the face size (the square root of the
FP32 box area), and the candidate's extra faces: faces it finds (at its detector threshold,
0.5) that match no face FP32 finds at 0.5 - ``extra_margin`` (0.1). ``extra_faces_strict``
counts them against FP32's faces at 0.5 itself: a face scoring 0.500 at INT8 and 0.494 at
FP32, or 0.513 and 0.454 (both seen on generated collages), is extra there, a coin toss at
the threshold rather than a face FP32 does not see. The reference detections must then be made
at a threshold of at most 0.4.

The INT8 detector's quality bar: recall >= 99%, IoU mean >= 0.95 and min >= 0.85, landmark error <= 1%, no
extra face (:data:`INT8_DETECTOR_BAR`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

from fusion_ray.types import Face


@dataclass(frozen=True)
class Thresholds:
    """What a candidate precision must meet against the reference."""

    min_recall: float = 0.99
    min_iou_mean: float = 0.95
    min_iou_min: float = 0.85
    max_landmark_error: float = 0.01
    max_extra_faces: int = 0


INT8_DETECTOR_BAR = Thresholds()


@dataclass(frozen=True)
class Comparison:
    """Reference-against-candidate figures over a set of frames."""

    frames: int
    reference_faces: int
    matched: int
    iou_mean: float
    iou_min: float
    landmark_error_mean: float
    extra_faces: int
    extra_faces_strict: int

    @property
    def recall(self) -> float:
        return self.matched / self.reference_faces if self.reference_faces else 1.0

    def failures(self, limits: Thresholds = INT8_DETECTOR_BAR) -> list[str]:
        """What misses ``limits``, one phrase each ([] when everything holds)."""
        checks = [
            (self.recall >= limits.min_recall, f"recall {self.recall:.3f} < {limits.min_recall}"),
            (self.iou_mean >= limits.min_iou_mean, f"IoU mean {self.iou_mean:.3f} < {limits.min_iou_mean}"),
            (self.iou_min >= limits.min_iou_min, f"IoU min {self.iou_min:.3f} < {limits.min_iou_min}"),
            (self.landmark_error_mean <= limits.max_landmark_error,
             f"landmark error {self.landmark_error_mean:.4f} > {limits.max_landmark_error}"),
            (self.extra_faces <= limits.max_extra_faces, f"{self.extra_faces} extra face(s)"),
        ]
        return [text for ok, text in checks if not ok]

    def as_dict(self) -> dict[str, float | int]:
        return {**asdict(self), "recall": self.recall}


def box_iou(a: np.ndarray, b: np.ndarray) -> float:
    """IoU of two xyxy boxes."""
    w = max(0.0, float(min(a[2], b[2]) - max(a[0], b[0])))
    h = max(0.0, float(min(a[3], b[3]) - max(a[1], b[1])))
    inter = w * h
    union = float((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1])) - inter
    return inter / union if union > 0 else 0.0


def match_faces(reference: Sequence[Face], candidate: Sequence[Face],
                match_iou: float = 0.3) -> list[tuple[int, int, float]]:
    """Greedy one-to-one matches (reference index, candidate index, IoU), highest IoU first."""
    pairs = sorted(((box_iou(r.bbox_xyxy, c.bbox_xyxy), i, j) for i, r in enumerate(reference)
                    for j, c in enumerate(candidate)), reverse=True)
    used_r: set[int] = set()
    used_c: set[int] = set()
    matches = []
    for iou, i, j in pairs:
        if iou < match_iou:
            break
        if i in used_r or j in used_c:
            continue
        used_r.add(i)
        used_c.add(j)
        matches.append((i, j, iou))
    return matches


def landmark_error(reference: Face, candidate: Face) -> float:
    """Mean distance of the 5 landmarks over the face size (square root of the reference box area)."""
    size = max(float(np.sqrt(reference.area)), 1e-6)
    return float(np.linalg.norm(reference.landmarks_5 - candidate.landmarks_5, axis=1).mean()) / size


def compare_detections(reference: Sequence[Sequence[Face]], candidate: Sequence[Sequence[Face]], *,
                       min_score: float = 0.6, match_iou: float = 0.3, threshold: float = 0.5,
                       extra_margin: float = 0.1) -> Comparison:
    """Compare per-frame detections; ``reference[k]`` and ``candidate[k]`` are frame ``k``'s faces
    (the reference detected at a threshold of ``threshold - extra_margin`` or lower, the
    candidate at ``threshold``)."""
    if len(reference) != len(candidate):
        raise ValueError(f"expected the same number of frames, got {len(reference)} and {len(candidate)}")
    ious: list[float] = []
    errors: list[float] = []
    wanted = extra = strict = 0
    for ref_faces, cand_faces in zip(reference, candidate, strict=True):
        cand_faces = [f for f in cand_faces if f.score >= threshold]
        strong = [f for f in ref_faces if f.score >= min_score]
        wanted += len(strong)
        for i, j, iou in match_faces(strong, cand_faces, match_iou):
            ious.append(iou)
            errors.append(landmark_error(strong[i], cand_faces[j]))
        near = [f for f in ref_faces if f.score >= threshold - extra_margin]
        extra += len(cand_faces) - len(match_faces(near, cand_faces, match_iou))
        above = [f for f in ref_faces if f.score >= threshold]
        strict += len(cand_faces) - len(match_faces(above, cand_faces, match_iou))
    return Comparison(
        frames=len(reference), reference_faces=wanted, matched=len(ious),
        iou_mean=float(np.mean(ious)) if ious else 1.0, iou_min=float(np.min(ious)) if ious else 1.0,
        landmark_error_mean=float(np.mean(errors)) if errors else 0.0, extra_faces=extra,
        extra_faces_strict=strict)
