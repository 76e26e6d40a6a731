"""Synthetic clips with known face motion, for the tracking benchmark.

A face is cut from a shared photo (its box grown 1.7x, feathered ellipse), and warped into
each frame by a known similarity (rotation, scale, translation). Its true landmarks in a
frame are the still photo's landmarks (detected once, at full resolution) moved by the same
similarity. A face can leave the frame, be covered by another face, or be hidden under a
black box for a few frames (``hidden``: the frames where a tracker should still fill it in).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import cv2
import numpy as np
import numpy.typing as npt

from fusion_ray.errors import NoFaceError
from fusion_ray.imageio import read_image
from fusion_ray.types import Face, Frame

if TYPE_CHECKING:
    from fusion_ray.models.detector import ScrfdDetector

FRAME_HW = (360, 640)


@dataclass(frozen=True)
class Sprite:
    """A face cut from a photo: BGR pixels, alpha in [0, 1], and its landmarks in sprite pixels."""

    pixels: Frame
    alpha: npt.NDArray[np.float32]
    landmarks: npt.NDArray[np.float64]

    @property
    def eye_distance(self) -> float:
        return float(np.linalg.norm(self.landmarks[1] - self.landmarks[0]))


@dataclass
class Clip:
    """Frames with each face's true landmarks (F, K, 5, 2), visibility and hidden flags (F, K)."""

    name: str
    frames: list[Frame]
    truth: npt.NDArray[np.float64]
    visible: npt.NDArray[np.bool_]
    hidden: npt.NDArray[np.bool_]
    description: str


def make_sprite(photo: Frame, face: Face) -> Sprite:
    """Cut ``face`` (detected on ``photo``) with a feathered elliptical alpha."""
    x1, y1, x2, y2 = (float(v) for v in face.bbox_xyxy)
    cx, cy, half = (x1 + x2) / 2, (y1 + y2) / 2, 0.85 * max(x2 - x1, y2 - y1)
    left, top = max(0, int(cx - half)), max(0, int(cy - half))
    right, bottom = min(photo.shape[1], int(cx + half)), min(photo.shape[0], int(cy + half))
    pixels = np.ascontiguousarray(photo[top:bottom, left:right])
    h, w = pixels.shape[:2]
    alpha = np.zeros((h, w), np.float32)
    cv2.ellipse(alpha, (w // 2, h // 2), (int(w * 0.42), int(h * 0.47)), 0, 0, 360, 1.0, -1)
    feathered = np.asarray(cv2.GaussianBlur(alpha, (0, 0), max(1.0, 0.04 * w)), np.float32)
    return Sprite(pixels, feathered, face.landmarks_5.astype(np.float64) - [left, top])


def photo_sprite(path: Path, detector: ScrfdDetector) -> Sprite:
    """The sprite of the last face ``detector`` finds on the photo at ``path`` (a group photo's
    last); NoFaceError when it finds none."""
    photo = read_image(path).frame
    faces = detector.detect(photo)
    if not faces:
        raise NoFaceError(f"no face found on {path}")
    return make_sprite(photo, faces[-1])


def similarity(sprite: Sprite, centre: tuple[float, float], angle_deg: float, scale: float) -> npt.NDArray[np.float64]:
    """2x3 matrix putting the sprite's landmark centre at ``centre``, rotated and scaled."""
    anchor = sprite.landmarks.mean(axis=0)
    m = cv2.getRotationMatrix2D((float(anchor[0]), float(anchor[1])), angle_deg, scale)
    m[:, 2] += np.asarray(centre) - anchor
    return np.asarray(m, np.float64)


def background(seed: int = 0) -> Frame:
    """A static textured background (gradient, soft blobs, mild noise)."""
    rng = np.random.default_rng(seed)
    h, w = FRAME_HW
    ys, xs = np.mgrid[:h, :w].astype(np.float32)
    bg = np.stack([80 + 60 * xs / w, 100 + 50 * ys / h, 90 + 40 * (1 - xs / w)], axis=-1)
    for _ in range(12):
        cx, cy, r = rng.uniform(0, w), rng.uniform(0, h), rng.uniform(20, 80)
        bg += rng.uniform(-25, 25, 3) * np.exp(-((xs - cx) ** 2 + (ys - cy) ** 2) / (2 * r * r))[..., None]
    bg += rng.normal(0, 3, bg.shape)
    return np.clip(bg, 0, 255).astype(np.uint8)


Motion = Callable[[int], tuple[tuple[float, float], float, float]]
"""Frame index -> (centre, angle in degrees, scale) of a sprite."""


Squash = Callable[[int], float]
"""Frame index -> a sprite's horizontal scale about its landmark centre (below 1: the face as
it turns away, its width shrinking while its height stays)."""


def squashed(m: npt.NDArray[np.float64], sprite: Sprite, width: float) -> npt.NDArray[np.float64]:
    """``m`` after scaling the sprite by ``width`` horizontally about its landmark centre."""
    cx = float(sprite.landmarks.mean(axis=0)[0])
    squash = np.asarray([[width, 0.0, (1.0 - width) * cx], [0.0, 1.0, 0.0]])
    return np.concatenate([m[:, :2] @ squash[:, :2], (m[:, :2] @ squash[:, 2] + m[:, 2])[:, None]], axis=1)


def render(name: str, sprites: Sequence[Sprite], motions: Sequence[Motion], n_frames: int,
           hidden: dict[int, Sequence[int]], description: str,
           squash: dict[int, Squash] | None = None) -> Clip:
    """Composite the sprites (later ones in front) and work out the truth.

    ``hidden``: sprite index -> frames where a black box covers that face. ``squash``: sprite
    index -> its horizontal scale per frame (a turn). A face is visible when its 5 true
    landmarks lie inside the frame and none is covered by a sprite in front of it or by a
    black box.
    """
    h, w = FRAME_HW
    bg = background()
    k = len(sprites)
    truth = np.zeros((n_frames, k, 5, 2))
    visible = np.zeros((n_frames, k), bool)
    hidden_flags = np.zeros((n_frames, k), bool)
    frames = []
    for f in range(n_frames):
        canvas = bg.astype(np.float32)
        covers = []
        for j, (sprite, motion) in enumerate(zip(sprites, motions, strict=True)):
            centre, angle, scale = motion(f)
            m = similarity(sprite, centre, angle, scale)
            if squash is not None and j in squash:
                m = squashed(m, sprite, squash[j](f))
            pix = cv2.warpAffine(sprite.pixels, m, (w, h), flags=cv2.INTER_LINEAR).astype(np.float32)
            alpha = cv2.warpAffine(sprite.alpha, m, (w, h), flags=cv2.INTER_LINEAR)[..., None]
            canvas = canvas * (1 - alpha) + pix * alpha
            truth[f, j] = sprite.landmarks @ m[:, :2].T + m[:, 2]
            covers.append(alpha[..., 0] > 0.5)
            if f in hidden.get(j, ()):
                hidden_flags[f, j] = True
                pts = truth[f, j]
                (x1, y1), (x2, y2) = pts.min(axis=0), pts.max(axis=0)
                pad = 0.8 * float(np.linalg.norm(pts[1] - pts[0]))
                cv2.rectangle(canvas, (int(x1 - pad), int(y1 - 1.2 * pad)), (int(x2 + pad), int(y2 + pad)), (0, 0, 0), -1)
        for j in range(k):
            visible[f, j] = not hidden_flags[f, j] and _landmarks_clear(truth[f, j], covers[j + 1:])
        frames.append(np.clip(canvas, 0, 255).astype(np.uint8))
    return Clip(name, frames, truth, visible, hidden_flags, description)


def _landmarks_clear(points: npt.NDArray[np.float64], covers: Sequence[npt.NDArray[np.bool_]]) -> bool:
    h, w = FRAME_HW
    for x, y in points:
        if not (0 <= x < w and 0 <= y < h):
            return False
        if any(c[int(y), int(x)] for c in covers):
            return False
    return True


def motion_clip(sprite: Sprite, n_frames: int = 150, eye: float = 42.0) -> Clip:
    """One face sweeping left and right (leaving the frame on both sides and coming back),
    turning +-20 degrees, scaling 0.8-1.25x, hidden for 1, 2 and 3 frames."""
    base = eye / sprite.eye_distance

    def motion(f: int) -> tuple[tuple[float, float], float, float]:
        t = f / n_frames
        centre = (320 + 360 * math.sin(2 * math.pi * t), 180 + 50 * math.sin(4 * math.pi * t + 0.5))
        return centre, 20 * math.sin(2 * math.pi * f / 50), base * (1 + 0.22 * math.sin(2 * math.pi * f / 70))

    return render("move", [sprite], [motion], n_frames, {0: [20, 60, 61, 90, 91, 92]},
                  "one face: sweep out of the frame and back on both sides, +-20 deg turn, "
                  "0.8-1.25x scale; hidden 1, 2 and 3 frames")


def crossing_clip(front: Sprite, back: Sprite, n_frames: int = 120) -> Clip:
    """Two faces moving towards each other and crossing (``front`` passes over ``back``)."""
    sf, sb = 44.0 / front.eye_distance, 38.0 / back.eye_distance

    def front_motion(f: int) -> tuple[tuple[float, float], float, float]:
        return (90 + 460 * f / (n_frames - 1), 175 + 8 * math.sin(f / 9)), 8 * math.sin(f / 15), sf

    def back_motion(f: int) -> tuple[tuple[float, float], float, float]:
        return (550 - 460 * f / (n_frames - 1), 195 - 6 * math.sin(f / 11)), -6 * math.sin(f / 13), sb

    return render("cross", [back, front], [back_motion, front_motion], n_frames, {0: [100, 101]},
                  "two faces crossing (one covers the other), the back one also hidden 2 frames")


def still_clip(sprite: Sprite, n_frames: int = 90) -> Clip:
    """A near-still face (a slight sway, as a handheld camera), hidden for 2 frames."""
    base = 48.0 / sprite.eye_distance

    def motion(f: int) -> tuple[tuple[float, float], float, float]:
        return (320 + 4 * math.sin(f / 13), 180 + 3 * math.sin(f / 17)), 1.5 * math.sin(f / 19), base

    return render("still", [sprite], [motion], n_frames, {0: [45, 46]},
                  "one near-still face (a slight sway), hidden 2 frames")


def group_clip(turning: Sprite, crossing: Sprite, covered: Sprite, n_frames: int = 150) -> Clip:
    """Three faces, as real footage has them: one turns (in-plane +-30 degrees while its width
    shrinks to 55% and back, as a head turning away) while it walks across; one walks the other
    way and crosses behind it; one stands, zooms slowly and is hidden under a box twice (2 and 3
    frames) while the other two pass."""
    st, sc, sv = 40.0 / turning.eye_distance, 36.0 / crossing.eye_distance, 34.0 / covered.eye_distance

    def turning_motion(f: int) -> tuple[tuple[float, float], float, float]:
        return (70 + 500 * f / (n_frames - 1), 200 + 10 * math.sin(f / 10)), 30 * math.sin(2 * math.pi * f / 60), st

    def crossing_motion(f: int) -> tuple[tuple[float, float], float, float]:
        return (580 - 480 * f / (n_frames - 1), 215 - 12 * math.sin(f / 14)), -10 * math.sin(f / 17), sc

    def covered_motion(f: int) -> tuple[tuple[float, float], float, float]:
        return (330 + 6 * math.sin(f / 21), 95 + 4 * math.sin(f / 16)), 4 * math.sin(f / 25), sv * (1 + 0.2 * f / n_frames)

    def turn(f: int) -> float:
        return 1.0 - 0.45 * (0.5 - 0.5 * math.cos(2 * math.pi * f / 50))

    return render("group", [covered, crossing, turning], [covered_motion, crossing_motion, turning_motion],
                  n_frames, {0: [60, 61, 100, 101, 102]},
                  "three faces: one turns (+-30 deg, width 55-100%) walking across, one crosses behind it, "
                  "one stands and zooms, hidden 2 and 3 frames", squash={2: turn})
