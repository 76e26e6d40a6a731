"""Swapped frames to a virtual camera (``fusion-ray live --virtual-camera``) that video-call apps
(Zoom, Meet, Teams, OBS) list as a webcam, through pyvirtualcam: v4l2loopback on Linux, the OBS
Virtual Camera on Windows and macOS.

The camera is opened before any work (before the models load), at the input's size and rate;
no backend is a :class:`VirtualCameraError` that names the setup step. A frame of another size
than the camera's (which cannot change once open) is resized to it, counted, and logged once.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

import cv2
import numpy as np

from fusion_ray.errors import InputError, one_line

log = logging.getLogger(__name__)

INSTALL_HINT = "pyvirtualcam is not installed: pip install 'fusion-ray[virtualcam]'"


class VirtualCameraError(InputError):
    """No virtual camera can be opened (pyvirtualcam missing, no backend, no device)."""


def setup_hint(platform: str = sys.platform) -> str:
    """The one setup step that makes a virtual camera available on ``platform``."""
    if platform.startswith("linux"):
        return ("load the v4l2loopback kernel module: sudo modprobe v4l2loopback devices=1 exclusive_caps=1 "
                "(package v4l2loopback-dkms)")
    return "install OBS Studio and start its Virtual Camera once (Tools or Controls: Start Virtual Camera)"


class VirtualCamera:
    """A pyvirtualcam camera taking BGR frames of one size; also a result sink ``(seq, image bytes)``."""

    def __init__(self, width: int, height: int, fps: float, *, device: str | None = None) -> None:
        try:
            import pyvirtualcam
        except ModuleNotFoundError as exc:
            raise VirtualCameraError(INSTALL_HINT) from exc
        if width <= 0 or height <= 0:
            raise VirtualCameraError(f"a virtual camera needs a frame size, got {width}x{height}")
        try:
            self.camera: Any = pyvirtualcam.Camera(width, height, fps, fmt=pyvirtualcam.PixelFormat.BGR,
                                                   device=device)
        except RuntimeError as exc:
            detail = one_line(str(exc)) or "no backend registered"
            raise VirtualCameraError(f"no virtual camera: {setup_hint()} (pyvirtualcam: {detail})") from exc
        self.device = str(self.camera.device)
        """The device in use (``/dev/videoN``, ``OBS Virtual Camera``)."""
        self.size = (width, height)
        self.fps = fps
        self.sent = 0
        self.resized = 0

    def send(self, frame: np.ndarray) -> None:
        """Send one BGR frame (resized to the camera's size if it differs)."""
        height, width = frame.shape[:2]
        if (width, height) != self.size:
            if self.resized == 0:
                log.warning("virtual camera: a %dx%d frame resized to the camera's %dx%d (its size is fixed "
                            "when it opens)", width, height, *self.size)
            self.resized += 1
            frame = cv2.resize(frame, self.size, interpolation=cv2.INTER_AREA)
        self.camera.send(np.ascontiguousarray(frame))
        self.sent += 1

    def __call__(self, seq: int, image: bytes) -> None:
        frame = cv2.imdecode(np.frombuffer(image, np.uint8), cv2.IMREAD_COLOR)
        if frame is not None:
            self.send(frame)

    def close(self) -> None:
        self.camera.close()
