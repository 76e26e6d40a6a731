"""Workloads shaped like users' footage, for the offline benchmarks against insightface's loop.

- :func:`write_group_video`: the three-face clip of :func:`~fusion_ray.bench.tracking_clips.group_clip`
  (one face turns while it walks, one crosses behind it, one is hidden twice) as an H.264 MP4
  whose AAC audio starts before its first video frame, as phone and camera files often do.
- :func:`make_mixed_photo_set`: a folder of PNG and JPEG photos of 0.5 to 2 megapixels with 1 to
  3 faces (a crop may cut one out, as a real folder has photos without a face), built from the
  shared photos (crops, mirrors, two photos side by side).
- :func:`unswapped_faces`: the faces the real detector finds on sampled input frames whose box
  the output left unchanged (a face the swap missed).
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from pathlib import Path

import cv2
import numpy as np

from fusion_ray.bench.tracking_clips import group_clip, photo_sprite
from fusion_ray.errors import InputError
from fusion_ray.imageio import read_image
from fusion_ray.models.detector import ScrfdDetector
from fusion_ray.types import Frame
from fusion_ray.video import decode_all
from fusion_ray.video.synthetic import write_frames_video


def write_group_video(path: Path, photos: Sequence[Path], detector: ScrfdDetector, *, n_frames: int = 275,
                      fps: int = 25, audio_lead_s: float = 0.4) -> Path:
    """The group clip (``photos``: three face photos, the last face of each is used) as ``path``:
    H.264 640x360 at ``fps`` (CRF 18, a keyframe a second), with a tone whose first sample is
    ``audio_lead_s`` before the first video frame."""
    if len(photos) != 3:
        raise InputError(f"the group clip takes three face photos, got {len(photos)}")
    turning, crossing, covered = (photo_sprite(photo, detector) for photo in photos)
    clip = group_clip(turning, crossing, covered, n_frames=n_frames)
    return write_frames_video(path, clip.frames, fps=Fraction(fps), audio_lead_s=audio_lead_s, crf=18)


def make_mixed_photo_set(folder: Path, count: int, photos: Sequence[Path], *, seed: int = 0,
                         png_share: float = 0.4) -> list[Path]:
    """``count`` photos in ``folder``: each a crop (75 to 100% of a side) of one shared photo or of
    two side by side (1 to 3 faces; a crop may cut one out), mirrored half the time, scaled to 0.5 to 2 megapixels, saved as
    PNG (``png_share`` of them) or JPEG; the same seed gives the same files."""
    rng = np.random.default_rng(seed)
    frames = [read_image(p).frame for p in photos]
    folder.mkdir(parents=True, exist_ok=True)
    files = []
    for n in range(count):
        picked = [frames[n % len(frames)]] if n % 3 else [frames[n % len(frames)], frames[(n + 1) % len(frames)]]
        image = _side_by_side([_crop(f, rng) for f in picked])
        if rng.random() < 0.5:
            image = image[:, ::-1]
        megapixels = rng.uniform(0.5, 2.0)
        h, w = image.shape[:2]
        scale = (megapixels * 1e6 / (h * w)) ** 0.5
        size = (max(32, round(w * scale)), max(32, round(h * scale)))
        image = cv2.resize(np.ascontiguousarray(image), size,  # type: ignore[assignment]
                           interpolation=cv2.INTER_AREA if scale < 1 else cv2.INTER_LINEAR)
        png = rng.random() < png_share
        path = folder / f"photo_{n:05d}.{'png' if png else 'jpg'}"
        params = [cv2.IMWRITE_PNG_COMPRESSION, 3] if png else [cv2.IMWRITE_JPEG_QUALITY, 90]
        cv2.imwrite(str(path), image, params)
        files.append(path)
    return files


def _crop(frame: Frame, rng: np.random.Generator) -> Frame:
    h, w = frame.shape[:2]
    ch, cw = int(h * rng.uniform(0.75, 1.0)), int(w * rng.uniform(0.75, 1.0))
    y, x = int(rng.integers(0, h - ch + 1)), int(rng.integers(0, w - cw + 1))
    return frame[y:y + ch, x:x + cw]


def _side_by_side(images: Sequence[Frame]) -> Frame:
    height = min(i.shape[0] for i in images)
    resized = [cv2.resize(i, (round(i.shape[1] * height / i.shape[0]), height), interpolation=cv2.INTER_AREA)
               for i in images]
    return np.hstack(resized)


VIDEO_SUFFIXES = (".mp4", ".mov", ".mkv", ".avi")


def frames_of(path: Path) -> list[Frame]:
    """A video's frames, or a photo as one frame."""
    if path.suffix.lower() in VIDEO_SUFFIXES:
        return [d.frame for d in decode_all(path)]
    return [read_image(path).frame]


def unswapped_faces(pairs: Sequence[tuple[Path, Path]], detector: ScrfdDetector, *, every: int = 10,
                    min_change: float = 4.0) -> dict[str, int]:
    """For each (input, output) pair, on every ``every``-th frame of the input (a photo is one
    frame): the faces the detector finds, and how many of them the output left unchanged (mean
    absolute change in the face's box under ``min_change`` grey levels: a face the swap missed)."""
    sampled = faces = missed = 0
    for source, output in pairs:
        before, after = frames_of(source), frames_of(output)
        if len(before) != len(after) or before[0].shape != after[0].shape:
            raise InputError(f"{output} does not match {source} ({len(after)} against {len(before)} frames)")
        for i in range(0, len(before), every):
            sampled += 1
            for face in detector.detect(before[i]):
                x0, y0, x1, y1 = (int(round(float(v))) for v in face.bbox_xyxy)
                x0, y0 = max(x0, 0), max(y0, 0)
                region_in, region_out = before[i][y0:y1, x0:x1], after[i][y0:y1, x0:x1]
                if region_in.size == 0:
                    continue
                faces += 1
                change = float(np.abs(region_in.astype(np.int16) - region_out.astype(np.int16)).mean())
                missed += change < min_change
    return {"sampled_frames": sampled, "faces": faces, "unswapped": missed}
