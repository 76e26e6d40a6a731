"""Clips for the tracking tests: faces cut from the shared photos moving with known motion
(fusion_ray.bench.tracking_clips), written as H.264 MP4 files."""

from __future__ import annotations

import math
from fractions import Fraction
from pathlib import Path

import numpy as np

from fusion_ray.bench.tracking import load_detector
from fusion_ray.bench.tracking_clips import FRAME_HW, Clip, Sprite, make_sprite, render
from fusion_ray.imageio import read_image
from fusion_ray.video import EncodeOptions
from fusion_ray.video.encode import encode_segment

FPS = Fraction(25)


def sprites(images_dir: Path, scrfd_path: Path) -> dict[str, Sprite]:
    detector = load_detector(scrfd_path)
    out = {}
    for name in ("obama", "biden"):
        photo = read_image(images_dir / f"{name}.jpg").frame
        out[name] = make_sprite(photo, detector.detect(photo)[0])
    return out


def hidden_clip(sprite: Sprite, n_frames: int, hidden: list[int], *, textured: bool = False) -> Clip:
    """One face drifting right and turning a little, under a black box on ``hidden`` frames
    (``textured``: the box is filled with smooth stripes, so that a face the classic swapper
    pastes there, with the box's colour statistics, is not black on black)."""
    scale = 46.0 / sprite.eye_distance

    def motion(f: int) -> tuple[tuple[float, float], float, float]:
        return (220 + 5 * f, 180 + 6 * math.sin(f / 6)), 6 * math.sin(f / 9), scale

    clip = render("hidden", [sprite], [motion], n_frames, {0: hidden}, "one face, hidden on some frames")
    if textured:
        height, width = FRAME_HW
        stripes = 128 + 90 * np.sin(2 * np.pi * np.arange(width) / 14.0)
        pattern = np.broadcast_to(stripes[None, :, None] * [1.0, 0.9, 0.8], (height, width, 3)).astype(np.uint8)
        for f in hidden:
            box = np.all(clip.frames[f] == 0, axis=2)
            clip.frames[f][box] = pattern[box]
    return clip


def entering_clip(first: Sprite, second: Sprite, n_frames: int, enter: int) -> Clip:
    """``first`` on the right from the start; ``second`` slides in from the left from frame
    ``enter`` on (so it becomes face 0 in reading order)."""
    s1, s2 = 46.0 / first.eye_distance, 46.0 / second.eye_distance

    def right(f: int) -> tuple[tuple[float, float], float, float]:
        return (460 - f, 180), 0.0, s1

    def left(f: int) -> tuple[tuple[float, float], float, float]:
        return (-200 + 40 * min(max(f - enter, 0), 8), 190), 0.0, s2

    return render("enter", [first, second], [right, left], n_frames, {}, "a second face enters on the left")


def write_clip(clip: Clip, path: Path) -> Path:
    height, width = FRAME_HW
    encode_segment(iter(clip.frames), path, fps=FPS, width=width, height=height,
                   options=EncodeOptions(preset="ultrafast", crf=12))
    return path
