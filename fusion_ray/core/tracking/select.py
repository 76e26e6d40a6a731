"""Face selection decided per track, not per frame: the chosen person stays chosen.

The one selection function, :func:`fusion_ray.ops.select.select_indices`, chooses among a frame's
tracked faces; this module only says when a choice is made and how long it holds:

- ``all``: every face;
- ``largest``: the track of the largest face on the first frame with a face;
- ``index``: the track of the ``index``-th face in reading order (left to right, then top to
  bottom) on the first frame with enough faces;
- ``reference``: each track whose embedding (of one face of the track, e.g. its
  best-scored one: :func:`representative_faces`) is within ``max_distance`` of the reference.

A ``largest`` or ``index`` choice holds while its track lives (a second face appearing, or
the detector's order changing, does not move it); when the track ends the choice is made again.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

import numpy as np
import numpy.typing as npt

from fusion_ray.core.tracking.tracks import FrameFaces
from fusion_ray.ops.select import select_indices
from fusion_ray.types import SELECT_MODES, Embedding

BoolArray = npt.NDArray[np.bool_]


class TrackSelection:
    """Sticky selection over one shot's frames (in order). ``choose`` once per frame."""

    def __init__(self, mode: str, *, index: int = 0, reference: Embedding | None = None,
                 max_distance: float = 0.6, order: str | None = None) -> None:
        if mode not in SELECT_MODES:
            raise ValueError(f"unknown selection mode {mode!r}; expected one of {', '.join(SELECT_MODES)}")
        if mode == "reference" and reference is None:
            raise ValueError("reference selection needs a reference embedding")
        if index < 0:
            raise ValueError(f"index: expected a non-negative face index, got {index}")
        self.mode = mode
        self.index = index
        self.reference = reference
        self.max_distance = max_distance
        self.order = order
        """FaceFusion's ``--face-selector-order`` (None: reading order)."""
        self.chosen: int | None = None
        self._decided: dict[int, bool] = {}

    def choose(self, faces: FrameFaces, *, live: Collection[int] | None = None,
               embeddings: Mapping[int, Embedding] | None = None) -> BoolArray:
        """Which of this frame's faces are swapped.

        ``live``: the ids of tracks that have not ended (None: the chosen track lives on);
        ``embeddings``: track id -> embedding, needed for ``reference`` (a track without one
        yet is not swapped until it has one; the decision is then kept).
        """
        ids = faces.track_id
        if self.mode == "all":
            return np.ones(len(faces), bool)
        if self.mode == "reference":
            return self._reference(faces, embeddings or {})
        if self.chosen is not None and live is not None and self.chosen not in live:
            self.chosen = None
        if self.chosen is None and len(faces):
            self.chosen = self._pick(faces)
        return ids == self.chosen if self.chosen is not None else np.zeros(len(faces), bool)

    def _pick(self, faces: FrameFaces) -> int | None:
        """The track of the face :func:`select_indices` picks on this frame (largest or index)."""
        chosen = select_indices(faces.bbox_xyxy, self.mode, index=self.index, order=self.order, scores=faces.score)
        return int(faces.track_id[chosen[0]]) if chosen else None

    def _reference(self, faces: FrameFaces, embeddings: Mapping[int, Embedding]) -> BoolArray:
        """Tracks not decided yet that have an embedding are decided now, by :func:`select_indices`."""
        ids = faces.track_id.tolist()
        todo = [i for i, tid in enumerate(ids) if tid not in self._decided and tid in embeddings]
        if todo:
            chosen = set(select_indices(faces.bbox_xyxy[todo], "reference", embeddings=[embeddings[ids[i]] for i in todo],
                                        reference=self.reference, max_distance=self.max_distance))
            for k, i in enumerate(todo):
                self._decided[ids[i]] = k in chosen
        return np.asarray([self._decided.get(tid, False) for tid in ids], bool)


def last_frames(frames: Sequence[FrameFaces]) -> dict[int, int]:
    """Track id -> index of the last frame it appears in."""
    last: dict[int, int] = {}
    for i, faces in enumerate(frames):
        for tid in faces.track_id.tolist():
            last[tid] = i
    return last


def select_tracks(frames: Sequence[FrameFaces], mode: str, *, index: int = 0,
                  reference: Embedding | None = None, max_distance: float = 0.6,
                  embeddings: Mapping[int, Embedding] | None = None) -> list[BoolArray]:
    """Offline: for each frame of a tracked shot, which faces are swapped (see :class:`TrackSelection`)."""
    selection = TrackSelection(mode, index=index, reference=reference, max_distance=max_distance)
    last = last_frames(frames)
    masks = []
    for i, faces in enumerate(frames):
        live = {tid for tid, end in last.items() if end >= i}
        masks.append(selection.choose(faces, live=live, embeddings=embeddings))
    return masks


def representative_faces(frames: Sequence[FrameFaces]) -> dict[int, tuple[int, int]]:
    """Track id -> (frame index, row) of its best-scored detected (not interpolated) face."""
    best: dict[int, tuple[float, int, int]] = {}
    for i, faces in enumerate(frames):
        for row in range(len(faces)):
            if faces.interpolated[row]:
                continue
            tid, score = int(faces.track_id[row]), float(faces.score[row])
            if tid not in best or score > best[tid][0]:
                best[tid] = (score, i, row)
    return {tid: (i, row) for tid, (_, i, row) in best.items()}
