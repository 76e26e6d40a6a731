"""Offline tracking of one segment while it is decoded, with a bounded lookahead.

:func:`~fusion_ray.core.tracking.tracks.track_segment` needs a whole segment's detections. A video
job's read task decodes a segment frame by frame and should hold only a few frames, so
:class:`SegmentTracks` gives the same faces (same track ids, gap filling and smoothing) from a
sliding window: frame ``f`` is final, and leaves, once frame ``f + lookahead`` has come in:

- ``full_every`` frames, when the tracking detector follows new faces back (``lookback``): a
  face found by a full detection at frame ``t`` may be added to frames ``t - full_every``
  onwards, so a frame is linked into tracks only ``full_every`` frames later;
- ``max_gap`` (G) frames: a track missed at ``f`` is interpolated there only if it is found
  again within G frames;
- ``window_radius`` frames with the centred window (the samples on each side of ``f``).

With the One Euro filter the smoothing is causal: each track's filter runs over its filled
samples in frame order as they leave, which is what the offline filter does.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from fusion_ray.config import TrackingConfig
from fusion_ray.core.tracking.redetect import merge
from fusion_ray.core.tracking.smoothing import OneEuroFilter, centred_window
from fusion_ray.core.tracking.tracks import FloatArray, FrameFaces, Linker, fill_gaps

Sample = tuple[int, FloatArray, float]
"""One detection of a track: frame index, its (7, 2) points (5 landmarks, box corners), score."""


def offline_smoothing(cfg: TrackingConfig) -> str:
    """The smoothing a video job uses: 'auto' is the centred window offline."""
    return "window" if cfg.smoothing == "auto" else cfg.smoothing


def lookahead(cfg: TrackingConfig, *, lookback: bool) -> int:
    """Frames that must follow a frame before its faces are final (see the module docstring)."""
    radius = cfg.window_radius if offline_smoothing(cfg) == "window" else 0
    return (cfg.full_every if lookback else 0) + cfg.max_gap + radius


class SegmentTracks:
    """One segment's frames in, in order (``add``); final frames out, oldest first.

    ``add`` and ``finish`` return ``(frame index, faces)`` pairs: the faces of that frame with
    track ids, ordered by track id, interpolated faces flagged, smoothed along each track,
    exactly as :func:`~fusion_ray.core.tracking.tracks.track_segment` gives them for the whole segment.
    """

    def __init__(self, cfg: TrackingConfig, *, lookback: bool, fps: float = 30.0,
                 frame_hw: tuple[int, int] | None = None, first_id: int = 0) -> None:
        self.cfg = cfg
        self.fps = fps
        self.frame_hw = frame_hw
        self.mode = offline_smoothing(cfg)
        self.raw_lag = cfg.full_every if lookback else 0
        self.lookahead = lookahead(cfg, lookback=lookback)
        self.linker = Linker(cfg, first_id)
        self._raw: dict[int, FrameFaces] = {}
        self._samples: dict[int, list[Sample]] = {}
        self._filters: dict[int, OneEuroFilter] = {}
        self._newest: int | None = None
        self._linked: int | None = None
        self._next_out: int | None = None

    @property
    def pending(self) -> int:
        """Frames added and not yet handed back."""
        if self._newest is None or self._next_out is None:
            return 0
        return self._newest - self._next_out + 1

    def add(self, frame_idx: int, raw: FrameFaces,
            backfill: Mapping[int, FrameFaces] | None = None) -> list[tuple[int, FrameFaces]]:
        """This frame's raw detections, and faces found back on earlier frames; the frames now final."""
        if self._newest is not None and frame_idx != self._newest + 1:
            raise ValueError(f"expected frame {self._newest + 1}, got {frame_idx}")
        self._add_backfill(backfill)
        self._raw[frame_idx] = raw
        if self._next_out is None:
            self._next_out = frame_idx
        self._newest = frame_idx
        self._link_until(frame_idx - self.raw_lag)
        if self._linked is None:
            return []
        return self._emit_until(self._linked - (self.lookahead - self.raw_lag))

    def finish(self, backfill: Mapping[int, FrameFaces] | None = None) -> list[tuple[int, FrameFaces]]:
        """The segment ended: every frame still held (``backfill``: faces found last on frames
        not linked yet, as :meth:`add` takes them)."""
        if self._newest is None:
            return []
        self._add_backfill(backfill)
        self._link_until(self._newest)
        return self._emit_until(self._newest)

    def _add_backfill(self, backfill: Mapping[int, FrameFaces] | None) -> None:
        for idx, faces in (backfill or {}).items():
            if idx not in self._raw:
                raise ValueError(f"frame {idx} is already linked: a backfill reaches at most "
                                 f"{self.raw_lag} frames back")
            self._raw[idx] = merge(self._raw[idx], faces)

    def live(self, frame_idx: int) -> set[int]:
        """Tracks that have not ended by ``frame_idx``: seen there or later, or still followed."""
        seen = {tid for tid, samples in self._samples.items() if samples and samples[-1][0] >= frame_idx}
        after = (self._linked if self._linked is not None else frame_idx) + 1
        return seen | {p.track_id for p in self.linker.predict(after)}

    def best_detection(self, track_id: int, since: int) -> tuple[int, FrameFaces] | None:
        """The track's best-scored detection (not interpolated) at frame ``since`` or later."""
        samples = [s for s in self._samples.get(track_id, []) if s[0] >= since]
        if not samples:
            return None
        frame_idx, points, score = max(samples, key=lambda s: s[2])
        return frame_idx, FrameFaces.from_points(points[None], [score], [track_id], [False])

    def _link_until(self, last: int) -> None:
        start = self._next_out if self._linked is None else self._linked + 1
        if start is None:
            return
        for idx in range(start, last + 1):
            faces = self._raw.pop(idx)
            ids = self.linker.link(idx, faces, self.frame_hw)
            points = faces.points()
            for k, tid in enumerate(ids.tolist()):
                self._samples.setdefault(tid, []).append((idx, points[k], float(faces.score[k])))
            self._linked = idx

    def _emit_until(self, last: int) -> list[tuple[int, FrameFaces]]:
        out: list[tuple[int, FrameFaces]] = []
        while self._next_out is not None and self._next_out <= last:
            out.append((self._next_out, self._frame(self._next_out)))
            self._next_out += 1
            self._prune(self._next_out)
        return out

    def _frame(self, f: int) -> FrameFaces:
        reach = self.cfg.max_gap + self.cfg.window_radius + 1
        rows: list[tuple[int, FloatArray, float, bool]] = []
        for tid in sorted(self._samples):
            near = [s for s in self._samples[tid] if abs(s[0] - f) <= reach]
            if not near:
                continue
            frames, points, scores, interp = fill_gaps([s[0] for s in near], np.stack([s[1] for s in near]),
                                                       [s[2] for s in near], self.cfg.max_gap)
            hit = np.flatnonzero(frames == f)
            if not len(hit):
                continue
            k = int(hit[0])
            rows.append((tid, self._smoothed(tid, f, frames, points, k), float(scores[k]), bool(interp[k])))
        if not rows:
            return FrameFaces.empty()
        return FrameFaces.from_points(np.stack([r[1] for r in rows]), [r[2] for r in rows],
                                      [r[0] for r in rows], [r[3] for r in rows])

    def _smoothed(self, tid: int, f: int, frames: np.ndarray, points: FloatArray, k: int) -> FloatArray:
        if self.mode == "window":
            window = np.flatnonzero(np.abs(frames - f) <= self.cfg.window_radius)
            smoothed = centred_window(points[window], frames[window], self.cfg.window_radius, self.cfg.window_order)
            return smoothed[int(np.flatnonzero(frames[window] == f)[0])]
        if self.mode == "one_euro":
            flt = self._filters.setdefault(tid, OneEuroFilter(
                self.cfg.one_euro_min_cutoff, self.cfg.one_euro_beta, self.cfg.one_euro_d_cutoff))
            scale = float(np.linalg.norm(points[k, 1] - points[k, 0]))
            return flt.filter(points[k], f / self.fps, scale)
        return points[k]

    def _prune(self, next_out: int) -> None:
        """Forget samples no later frame needs, and tracks that ended."""
        oldest = next_out - self.cfg.max_gap - self.cfg.window_radius - 1
        followed = {p.track_id for p in self.linker.predict((self._linked or next_out) + 1)}
        for tid in list(self._samples):
            kept = [s for s in self._samples[tid] if s[0] >= oldest]
            if kept or tid in followed:
                self._samples[tid] = kept
            else:
                del self._samples[tid]
                self._filters.pop(tid, None)
