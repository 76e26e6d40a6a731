"""Frame sources for the live client: a clip in memory, a video file played as a camera, a camera."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import cv2
import numpy as np

from fusion_ray.errors import InputError

DEFAULT_QUALITY = 80


def encode_frame(frame: np.ndarray, quality: int = DEFAULT_QUALITY, fmt: str = "jpeg") -> bytes:
    """A frame as JPEG (``quality``), or as BMP (``fmt="bmp"``: lossless and nearly free to encode
    and decode, for a stream that never leaves this process)."""
    if fmt == "bmp":
        ok, buffer = cv2.imencode(".bmp", frame)
    else:
        ok, buffer = cv2.imencode(".jpg", frame, [cv2.IMWRITE_JPEG_QUALITY, int(quality)])
    if not ok:
        raise InputError(f"cannot encode a frame as {fmt}")
    return buffer.tobytes()


class JpegClip:
    """Pre-encoded frames played at ``fps``, looping (no encoding cost while streaming)."""

    def __init__(self, frames: Sequence[bytes], fps: float, *, loop: bool = True) -> None:
        if not frames:
            raise InputError("a clip needs at least one frame")
        self.frames = list(frames)
        self.fps = float(fps)
        self.loop = loop
        self._next = 0

    def read(self) -> bytes | None:
        if self._next >= len(self.frames):
            if not self.loop:
                return None
            self._next = 0
        data = self.frames[self._next]
        self._next += 1
        return data


class CaptureSource:
    """An OpenCV capture: a camera index, or a video file played at its own frame rate."""

    def __init__(self, target: int | Path, *, fps: float | None = None, quality: int = DEFAULT_QUALITY,
                 fmt: str = "jpeg") -> None:
        if isinstance(target, Path) and not target.is_file():
            raise InputError(f"video not found: {target}")
        self.capture = cv2.VideoCapture(str(target) if isinstance(target, Path) else target)
        if not self.capture.isOpened():
            raise InputError(f"cannot open {'camera' if isinstance(target, int) else 'video'} {target}")
        native = float(self.capture.get(cv2.CAP_PROP_FPS) or 0.0)
        self.fps = float(fps) if fps else (native if 1.0 <= native <= 240.0 else 30.0)
        self.size = (int(self.capture.get(cv2.CAP_PROP_FRAME_WIDTH)), int(self.capture.get(cv2.CAP_PROP_FRAME_HEIGHT)))
        """Width and height of the frames, as the capture reports them."""
        self.quality = quality
        self.fmt = fmt
        self.last_frame: np.ndarray | None = None

    def read(self) -> bytes | None:
        ok, frame = self.capture.read()
        if not ok or frame is None:
            return None
        self.last_frame = frame
        return encode_frame(frame, self.quality, self.fmt)

    def close(self) -> None:
        self.capture.release()
