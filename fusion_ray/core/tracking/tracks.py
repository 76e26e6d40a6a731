"""Face tracks through a video: stable ids, gap filling and landmark smoothing.

- :class:`FrameFaces`: one frame's faces as arrays (box, 5 landmarks, score, track id, a flag
  for faces that were interpolated or held rather than detected).
- :class:`Linker`: links each frame's detections to tracks. Each track predicts its position
  at constant velocity (box corners and landmarks); detections are matched to predictions
  one-to-one (optimal assignment) on landmark distance (in eye distances) plus 1 - box IoU,
  within a gate that widens with the frames a track was missed (the velocity is fitted to
  the last few detections). Unmatched detections start
  tracks; a track missed for more than ``keep_lost`` frames, or predicted wholly outside the
  frame, ends. The prediction is what keeps two crossing faces on their own ids.
- :func:`track_segment` (offline, video jobs): links a segment's detections, interpolates
  gaps of at most ``max_gap`` frames inside a track (never past its last detection), then
  smooths each track (a centred window by default).
- :class:`Tracker` (online, live streams): links frame by frame, smooths with a One Euro
  filter, and holds a missed face at its prediction for at most ``max_gap`` frames.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from fusion_ray.config import TrackingConfig
from fusion_ray.core.tracking.matching import assign, iou_matrix, landmark_distance_matrix
from fusion_ray.core.tracking.smoothing import OneEuroFilter, centred_window, one_euro_sequence
from fusion_ray.types import Face

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

NO_TRACK = -1
"""``track_id`` of an untracked face (the same value as ``fusion_ray.core.facebatch.NO_TRACK``)."""

GATE_GROWTH = 0.25
"""The matching gate widens by this fraction of ``max_landmark_distance`` per missed frame."""

VELOCITY_SAMPLES = 6
"""A track's velocity is fitted to its last this many detections."""

NEW_TRACK_GATE = 2.0
"""A track with a single detection (no velocity yet: it is predicted where it was) matches
within this many times the gate: a face may move about an eye distance per frame."""


def gate_scale(misses: int | npt.NDArray[np.float64], settled: bool | npt.NDArray[np.bool_]) -> Any:
    """The matching gate, in units of ``max_landmark_distance``: it widens with the frames a
    track was missed and is wider while the track has no velocity (``settled`` False)."""
    return (1.0 + GATE_GROWTH * np.asarray(misses, np.float64)) * np.where(settled, 1.0, NEW_TRACK_GATE)


@dataclass(frozen=True)
class FrameFaces:
    """The faces of one frame: boxes (n, 4), landmarks (n, 5, 2), scores (n,), track ids (n,;
    NO_TRACK when untracked, the default) and ``interpolated`` (n,; True for a face filled in
    over a gap or held, not detected; False by default)."""

    bbox_xyxy: npt.NDArray[np.float32]
    landmarks_5: npt.NDArray[np.float32]
    score: npt.NDArray[np.float32]
    track_id: IntArray = field(default_factory=lambda: np.zeros((0,), np.int64))
    interpolated: npt.NDArray[np.bool_] = field(default_factory=lambda: np.zeros((0,), bool))

    def __post_init__(self) -> None:
        boxes = np.asarray(self.bbox_xyxy, np.float32).reshape(-1, 4)
        n = len(boxes)
        landmarks = np.asarray(self.landmarks_5, np.float32)
        if landmarks.shape != (n, 5, 2):
            raise ValueError(f"FrameFaces.landmarks_5: expected shape ({n}, 5, 2), got {landmarks.shape}")
        values: dict[str, tuple[type, Any, float]] = {
            "score": (np.float32, self.score, 0.0), "track_id": (np.int64, self.track_id, NO_TRACK),
            "interpolated": (np.bool_, self.interpolated, False)}
        for name, (dtype, value, default) in values.items():
            array: np.ndarray = np.asarray(value, dtype).reshape(-1)
            if array.size == 0 and n and name != "score":
                array = np.full((n,), default, dtype)
            if array.shape != (n,):
                raise ValueError(f"FrameFaces.{name}: expected {n} values, got {array.shape[0]}")
            object.__setattr__(self, name, array)
        object.__setattr__(self, "bbox_xyxy", boxes)
        object.__setattr__(self, "landmarks_5", landmarks)

    def __len__(self) -> int:
        return len(self.bbox_xyxy)

    @classmethod
    def empty(cls) -> FrameFaces:
        return cls(np.zeros((0, 4), np.float32), np.zeros((0, 5, 2), np.float32), np.zeros((0,), np.float32))

    @classmethod
    def from_faces(cls, faces: Sequence[Face]) -> FrameFaces:
        if not faces:
            return cls.empty()
        return cls(np.stack([f.bbox_xyxy for f in faces]), np.stack([f.landmarks_5 for f in faces]),
                   np.asarray([f.score for f in faces], np.float32))

    @classmethod
    def from_points(cls, points: npt.ArrayLike, score: npt.ArrayLike, track_id: npt.ArrayLike,
                    interpolated: npt.ArrayLike) -> FrameFaces:
        """From (n, 7, 2) points: the 5 landmarks, then the box's top-left and bottom-right corners."""
        p = np.asarray(points, np.float32).reshape(-1, 7, 2)
        boxes = np.concatenate([np.minimum(p[:, 5], p[:, 6]), np.maximum(p[:, 5], p[:, 6])], axis=1)
        return cls(boxes, p[:, :5], np.asarray(score, np.float32), np.asarray(track_id, np.int64),
                   np.asarray(interpolated, bool))

    def points(self) -> FloatArray:
        """(n, 7, 2): the 5 landmarks, then the box's top-left and bottom-right corners."""
        corners = self.bbox_xyxy.astype(np.float64).reshape(-1, 2, 2)
        return np.concatenate([self.landmarks_5.astype(np.float64), corners], axis=1)

    def to_faces(self) -> list[Face]:
        """Plain faces (scores clipped to [0, 1]); the track ids are dropped."""
        return [Face(self.bbox_xyxy[i], self.landmarks_5[i], float(np.clip(self.score[i], 0, 1)))
                for i in range(len(self))]

    def take(self, index: npt.ArrayLike) -> FrameFaces:
        i = np.asarray(index, np.int64).reshape(-1)
        return FrameFaces(self.bbox_xyxy[i], self.landmarks_5[i], self.score[i], self.track_id[i],
                          self.interpolated[i])


@dataclass(frozen=True)
class TrackPrediction:
    """Where a live track is expected at a frame; ``misses``: frames since its last detection;
    ``settled``: the track has a velocity (two detections or more)."""

    track_id: int
    bbox_xyxy: FloatArray
    landmarks_5: FloatArray
    misses: int
    last_score: float
    settled: bool = True


@dataclass
class _Track:
    track_id: int
    last_frame: int
    points: FloatArray
    score: float
    history: list[tuple[int, FloatArray]] = field(default_factory=list)
    velocity: FloatArray | None = None

    def predict(self, frame_idx: int) -> FloatArray:
        if self.velocity is None:
            return self.points
        return self.points + self.velocity * (frame_idx - self.last_frame)

    def observe(self, frame_idx: int, points: FloatArray, score: float) -> None:
        """Add a detection; the velocity is the least-squares slope of the last detections
        (a few corrupted ones, as a face being covered, move it less than a last step would)."""
        self.history = [*self.history, (frame_idx, points)][-VELOCITY_SAMPLES:]
        self.points, self.last_frame, self.score = points, frame_idx, score
        if len(self.history) < 2:
            return
        frames = np.asarray([f for f, _ in self.history], np.float64)
        stacked = np.stack([p for _, p in self.history])
        offsets = frames - frames.mean()
        slope = np.tensordot(offsets, stacked - stacked.mean(axis=0), axes=(0, 0)) / float(np.sum(offsets ** 2))
        self.velocity = slope


def _outside(points: FloatArray, frame_hw: tuple[int, int]) -> bool:
    (x1, y1), (x2, y2) = points[5], points[6]
    return bool(x2 <= 0 or y2 <= 0 or x1 >= frame_hw[1] or y1 >= frame_hw[0])


class Linker:
    """Links detections frame to frame into tracks with stable integer ids (frames in order)."""

    def __init__(self, cfg: TrackingConfig, first_id: int = 0) -> None:
        self.cfg = cfg
        self._tracks: list[_Track] = []
        self._next_id = first_id
        self._previous: int | None = None
        self.newly_lost: list[int] = []
        """Tracks detected on the previous frame and missed on the last one linked."""

    def predict(self, frame_idx: int) -> list[TrackPrediction]:
        """Predictions of the live tracks at ``frame_idx``."""
        out = []
        for t in self._tracks:
            p = t.predict(frame_idx)
            box = np.concatenate([np.minimum(p[5], p[6]), np.maximum(p[5], p[6])])
            out.append(TrackPrediction(t.track_id, box, p[:5], frame_idx - t.last_frame - 1, t.score,
                                       t.velocity is not None))
        return out

    def link(self, frame_idx: int, faces: FrameFaces, frame_hw: tuple[int, int] | None = None) -> IntArray:
        """Track ids of ``faces`` (detections at ``frame_idx``), starting tracks for new faces."""
        if self._previous is not None and frame_idx <= self._previous:
            raise ValueError(f"expected frames in increasing order, got {frame_idx} after {self._previous}")
        points = faces.points()
        ids = np.full((len(faces),), -1, np.int64)
        matched: set[int] = set()
        for row, col in assign(self._cost(frame_idx, points)):
            track = self._tracks[row]
            track.observe(frame_idx, points[col], float(faces.score[col]))
            ids[col] = track.track_id
            matched.add(track.track_id)
        fresh = [i for i in range(len(faces)) if ids[i] < 0]
        for i in sorted(fresh, key=lambda k: (float(points[k, 5, 0]), float(points[k, 5, 1]))):
            track = _Track(self._next_id, frame_idx, points[i], float(faces.score[i]))
            track.observe(frame_idx, points[i], float(faces.score[i]))
            self._tracks.append(track)
            ids[i] = self._next_id
            self._next_id += 1
        self.newly_lost = [t.track_id for t in self._tracks
                           if t.track_id not in matched and t.last_frame == self._previous]
        self._previous = frame_idx
        self._tracks = [t for t in self._tracks if frame_idx - t.last_frame <= self.cfg.keep_lost
                        and not (frame_hw is not None and _outside(t.predict(frame_idx + 1), frame_hw))]
        return ids

    def _cost(self, frame_idx: int, points: FloatArray) -> FloatArray:
        if not self._tracks or not len(points):
            return np.zeros((len(self._tracks), len(points)))
        predicted = np.stack([t.predict(frame_idx) for t in self._tracks])
        misses = np.asarray([frame_idx - t.last_frame - 1 for t in self._tracks], np.float64)
        dist = landmark_distance_matrix(predicted[:, :5], points[:, :5])
        iou = iou_matrix(predicted[:, 5:].reshape(-1, 4), points[:, 5:].reshape(-1, 4))
        settled = np.asarray([t.velocity is not None for t in self._tracks], bool)
        gate = self.cfg.max_landmark_distance * gate_scale(misses, settled)[:, None]
        cost = dist + (1.0 - iou)
        # The IoU gate holds for tracks seen on the previous frame; a lost track's prediction
        # drifts, and its widening landmark gate is the test.
        overlap = (iou >= self.cfg.min_iou) | (misses > 0)[:, None]
        return np.where((dist <= gate) & overlap, cost, np.inf)


def fill_gaps(frames: npt.ArrayLike, points: npt.ArrayLike, scores: npt.ArrayLike,
              max_gap: int) -> tuple[IntArray, FloatArray, FloatArray, npt.NDArray[np.bool_]]:
    """Interpolate one track linearly over gaps of at most ``max_gap`` missing frames.

    ``frames`` increase; ``points`` is (T, ...). Gaps longer than ``max_gap`` stay gaps, and
    nothing is added before the first or after the last sample. An added sample takes the
    lower score of its two neighbours. Returns frames, points, scores and an ``interpolated`` flag.
    """
    f = np.asarray(frames, np.int64)
    p = np.asarray(points, np.float64)
    s = np.asarray(scores, np.float64)
    if len(p) != len(f) or len(s) != len(f) or np.any(np.diff(f) <= 0):
        raise ValueError("expected increasing frames and one point set and score per frame")
    out_f, out_p, out_s, out_i = [], [], [], []
    for k in range(len(f)):
        if k:
            gap = int(f[k] - f[k - 1] - 1)
            if 0 < gap <= max_gap:
                for j in range(1, gap + 1):
                    w = j / (gap + 1)
                    out_f.append(int(f[k - 1]) + j)
                    out_p.append((1 - w) * p[k - 1] + w * p[k])
                    out_s.append(min(s[k - 1], s[k]))
                    out_i.append(True)
        out_f.append(int(f[k]))
        out_p.append(p[k])
        out_s.append(float(s[k]))
        out_i.append(False)
    return (np.asarray(out_f, np.int64), np.asarray(out_p, np.float64).reshape(-1, *p.shape[1:]),
            np.asarray(out_s, np.float64), np.asarray(out_i, bool))


def smooth_track(points: FloatArray, frames: IntArray, cfg: TrackingConfig, fps: float,
                 *, online: bool) -> FloatArray:
    """One track's (T, 7, 2) points smoothed as ``cfg.smoothing`` says ('auto': window offline)."""
    mode = cfg.smoothing
    if mode == "auto":
        mode = "one_euro" if online else "window"
    if mode == "off" or len(points) < 2:
        return points
    if mode == "window":
        return centred_window(points, frames, cfg.window_radius, cfg.window_order)
    scales = np.linalg.norm(points[:, 1] - points[:, 0], axis=1)
    return one_euro_sequence(points, frames, fps, min_cutoff=cfg.one_euro_min_cutoff, beta=cfg.one_euro_beta,
                             d_cutoff=cfg.one_euro_d_cutoff, scales=scales)


def track_segment(detections: Sequence[FrameFaces], cfg: TrackingConfig, *, fps: float = 30.0,
                  first_frame: int = 0, frame_hw: tuple[int, int] | None = None) -> list[FrameFaces]:
    """Offline tracking of one segment's frames (in order, ``detections[i]`` at ``first_frame + i``).

    Returns each frame's faces with track ids, ordered by track id, including faces
    interpolated over gaps of at most ``cfg.max_gap`` frames (flagged ``interpolated``),
    smoothed along each track.
    """
    linker = Linker(cfg)
    samples: dict[int, tuple[list[int], list[FloatArray], list[float]]] = {}
    for i, faces in enumerate(detections):
        ids = linker.link(first_frame + i, faces, frame_hw)
        points = faces.points()
        for k, tid in enumerate(ids.tolist()):
            frames, pts, scores = samples.setdefault(tid, ([], [], []))
            frames.append(first_frame + i)
            pts.append(points[k])
            scores.append(float(faces.score[k]))
    per_frame: list[list[tuple[int, FloatArray, float, bool]]] = [[] for _ in detections]
    for tid in sorted(samples):
        frames, pts, scores = samples[tid]
        f, p, s, interp = fill_gaps(frames, np.stack(pts), scores, cfg.max_gap)
        p = smooth_track(p, f, cfg, fps, online=False)
        for k in range(len(f)):
            per_frame[int(f[k]) - first_frame].append((tid, p[k], float(s[k]), bool(interp[k])))
    return [_frame_from_rows(rows) for rows in per_frame]


def _frame_from_rows(rows: Sequence[tuple[int, FloatArray, float, bool]]) -> FrameFaces:
    if not rows:
        return FrameFaces.empty()
    return FrameFaces.from_points(np.stack([r[1] for r in rows]), [r[2] for r in rows],
                                  [r[0] for r in rows], [r[3] for r in rows])


class Tracker:
    """Online tracking (live streams): ``update`` once per frame, frames in increasing order.

    Detected faces come back with their track ids and One Euro-smoothed landmarks ('window'
    needs later frames, so online it means One Euro too; 'off' turns smoothing off). A track
    missed for at most ``max_gap`` frames is held at its prediction, flagged ``interpolated``.
    """

    def __init__(self, cfg: TrackingConfig, fps: float = 30.0) -> None:
        if fps <= 0:
            raise ValueError(f"expected a positive frame rate, got {fps}")
        self.cfg = cfg
        self.fps = fps
        self.linker = Linker(cfg)
        self._filters: dict[int, OneEuroFilter] = {}

    @property
    def newly_lost(self) -> list[int]:
        return self.linker.newly_lost

    def predictions(self, frame_idx: int) -> list[TrackPrediction]:
        return self.linker.predict(frame_idx)

    def update(self, frame_idx: int, faces: FrameFaces, frame_hw: tuple[int, int] | None = None) -> FrameFaces:
        """This frame's faces with track ids (smoothed), plus held faces of tracks just missed."""
        held = [p for p in self.linker.predict(frame_idx) if p.misses < self.cfg.max_gap]
        ids = self.linker.link(frame_idx, faces, frame_hw)
        points = faces.points()
        for k, tid in enumerate(ids.tolist()):
            if self.cfg.smoothing != "off":
                flt = self._filters.setdefault(tid, OneEuroFilter(
                    self.cfg.one_euro_min_cutoff, self.cfg.one_euro_beta, self.cfg.one_euro_d_cutoff))
                scale = float(np.linalg.norm(points[k, 1] - points[k, 0]))
                points[k] = flt.filter(points[k], frame_idx / self.fps, scale)
        found = set(ids.tolist())
        held = [p for p in held if p.track_id not in found]
        live = {p.track_id for p in self.linker.predict(frame_idx + 1)}
        self._filters = {tid: f for tid, f in self._filters.items() if tid in live}
        rows = [(int(t), points[k], float(faces.score[k]), False) for k, t in enumerate(ids.tolist())]
        rows += [(p.track_id, np.concatenate([p.landmarks_5, p.bbox_xyxy.reshape(2, 2)]), p.last_score, True)
                 for p in held]
        return _frame_from_rows(sorted(rows, key=lambda r: r[0]))
