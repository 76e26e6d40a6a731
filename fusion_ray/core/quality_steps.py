"""The chain's 68-point landmark step and FaceFusion's per-face mask steps (docs/ARCHITECTURE.md).

Each is a step function of :mod:`fusion_ray.core.steps` (declared there in ``STEPS`` with its
phase, model and ``enabled(cfg)``):

- ``landmark`` (after select, before align): 68 points per face from the configured landmarker,
  kept on the faces (``FaceBatch.landmarks_68``, frame pixels); a face whose score is over
  ``landmarker.score`` is aligned on the 5 points made from its 68, so the swap crop uses them.
- ``area_mask`` and ``mouth_mask`` (target crop): FaceFusion's area mask and Deep-Live-Cam's mouth
  mask from the 68 points mapped into each face's crop.
- ``occlusion_mask`` (target crop, before the swap): xseg.
- ``region_mask`` (swapped crop): BiSeNet's chosen regions.

Every mask joins the face's others by element-wise minimum (``FaceBatch.with_mask``).
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING

import numpy as np

from fusion_ray.core.chain import guarded
from fusion_ray.core.facebatch import FaceBatch, FrameBatch
from fusion_ray.core.layout import CropLayout, align_crops
from fusion_ray.models.landmarker import Landmarks68
from fusion_ray.ops.face_masks import area_masks, mouth_paste_masks, points_in_crops
from fusion_ray.ops.landmarks import alignment_points

if TYPE_CHECKING:
    from fusion_ray.core.steps import Rows, Tools


def landmark_step(tools: Tools, rows: Rows, batch: FrameBatch) -> FrameBatch:
    """68 points for every face (all faces of the batch in one landmarker call when it can)."""
    faces = batch.faces
    if not len(faces):
        return batch
    found = _landmarks(tools, batch)
    five = np.array(faces.landmarks_5)
    points = np.zeros((len(faces), 68, 2), np.float32)
    threshold = tools.cfg.landmarker.score
    for i, row in enumerate(faces.frame_index):
        got = found.get(int(row))
        if got is None:
            continue
        k = int(np.count_nonzero(faces.frame_index[:i] == row))
        points[i] = got.points[k]
        five[i] = alignment_points(faces.landmarks_5[i], got.points[k], float(got.scores[k]), threshold)
    marked = replace(faces, landmarks_5=five, landmarks_68=points)
    return replace(batch, faces=marked.without_frames([r for r, e in enumerate(batch.errors) if e]))


def _landmarks(tools: Tools, batch: FrameBatch) -> dict[int, Landmarks68]:
    """Each frame's faces' 68 points: one batched call, or frame by frame (a failing frame is
    marked) when that call fails."""
    landmarker = tools.models.need_landmarker()
    faces = batch.faces
    rows = sorted(set(faces.frame_index.tolist()))
    try:
        every = landmarker.detect_batch(batch.frames, faces.frame_index, faces.bbox_xyxy, faces.landmarks_5)
    except Exception:  # noqa: BLE001 - retried per frame below, where the failing frame is marked
        found: dict[int, Landmarks68] = {}
        for row in rows:
            idx = np.flatnonzero(faces.frame_index == row)
            one = guarded(batch.errors, row, "landmark", partial(landmarker.detect, batch.frames[row],
                                                                 faces.bbox_xyxy[idx], faces.landmarks_5[idx]), None)
            if one is not None:
                found[row] = one
        return found
    return {row: Landmarks68(every.points[faces.frame_index == row], every.scores[faces.frame_index == row])
            for row in rows}


def target_embed_step(tools: Tools, rows: Rows, batch: FrameBatch) -> FrameBatch:
    """The target faces' embeddings (all faces in one embedder call), for the swapper weight;
    faces that already have theirs (reference selection) keep them."""
    faces = batch.faces
    if not len(faces) or faces.embedding is not None:
        return batch
    embedder = tools.models.need_embedder()
    layout = CropLayout(embedder.template, embedder.crop_size, np.ones((embedder.crop_size,) * 2, np.float32))
    crops = np.zeros((len(faces), embedder.crop_size, embedder.crop_size, 3), np.uint8)
    for row in sorted(set(faces.frame_index.tolist())):
        idx = np.flatnonzero(faces.frame_index == row)
        crops[idx] = align_crops(batch.frames[row], faces.landmarks_5[idx], layout)[0]
    return replace(batch, faces=replace(faces, embedding=embedder.embed_crops(crops)))


def _crop_points(faces: FaceBatch) -> tuple[int, np.ndarray]:
    """(crop size, each face's 68 points in its crop's pixels)."""
    crops, affines = faces.require_crops()
    if faces.landmarks_68 is None:
        raise ValueError("FaceBatch: expected 68 points (run a landmark step first), got none")
    return crops.shape[1], points_in_crops(faces.landmarks_68, affines)


def area_mask_step(tools: Tools, rows: Rows, batch: FrameBatch) -> FrameBatch:
    """FaceFusion's area mask (``masks.areas``) on every target crop."""
    if not len(batch.faces):
        return batch
    size, points = _crop_points(batch.faces)
    return replace(batch, faces=batch.faces.with_mask(area_masks(size, points, tools.cfg.masks.areas)))


def mouth_mask_step(tools: Tools, rows: Rows, batch: FrameBatch) -> FrameBatch:
    """Deep-Live-Cam's mouth mask: the target's own mouth is kept over the swap."""
    if not len(batch.faces):
        return batch
    size, points = _crop_points(batch.faces)
    return replace(batch, faces=batch.faces.with_mask(mouth_paste_masks(size, points)))


def occlusion_mask_step(tools: Tools, rows: Rows, batch: FrameBatch) -> FrameBatch:
    """xseg's occlusion mask of every target crop (before the swap), in one batched call."""
    if not len(batch.faces):
        return batch
    crops, _ = batch.faces.require_crops()
    return replace(batch, faces=batch.faces.with_mask(tools.models.need_occluder().masks(crops)))


def region_mask_step(tools: Tools, rows: Rows, batch: FrameBatch) -> FrameBatch:
    """BiSeNet's region mask (``masks.regions``) of every swapped crop, in one batched call."""
    if not len(batch.faces):
        return batch
    crops, _ = batch.faces.require_crops()
    masks = tools.models.need_parser().masks(crops, tools.cfg.masks.regions)
    return replace(batch, faces=batch.faces.with_mask(masks))
