"""Where ``fusion-ray live`` sends the swapped frames: an MP4 (``--output``), a window (``--show``),
a virtual camera (``--virtual-camera``) and a WHIP endpoint (``--whip``), side by side."""

from __future__ import annotations

import argparse
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from fusion_ray.live.frame_sources import CaptureSource

WHIP_TOKEN_ENV = "FUSION_RAY_WHIP_TOKEN"


def add_output_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("outputs (any together)")
    group.add_argument("--output", type=Path, help="write the returned frames to this MP4")
    group.add_argument("--show", action="store_true",
                       help="show the frames in a window (the default without another output; needs a display "
                       "and an OpenCV with GUI support)")
    group.add_argument("--virtual-camera", action="store_true",
                       help="send the frames to a virtual camera that video-call apps list as a webcam "
                       "(pyvirtualcam: v4l2loopback on Linux, OBS Virtual Camera on Windows/macOS)")
    group.add_argument("--virtual-camera-device", metavar="DEVICE",
                       help="the virtual camera to use, e.g. /dev/video10 (default: the first free one)")
    group.add_argument("--whip", metavar="URL", help="publish the frames to this WHIP endpoint (WebRTC)")
    group.add_argument("--whip-token", help=f"bearer token of the WHIP endpoint (default: ${WHIP_TOKEN_ENV})")
    group.add_argument("--whip-codec", choices=["h264", "vp8"], default="h264",
                       help="video codec offered first to the WHIP endpoint (default h264)")


def wants_window(args: argparse.Namespace) -> bool:
    """``--show``, or no other output was asked for."""
    return bool(args.show or not (args.output or args.virtual_camera or args.whip))


class FrameWriter:
    """Returned frames to an MP4, repeating the last one over dropped frames (never an input frame)."""

    def __init__(self, path: Path, fps: float) -> None:
        self.path, self.fps = path, fps
        self.writer: Any = None
        self.last_seq = -1
        self.last: np.ndarray | None = None

    def __call__(self, seq: int, image: bytes) -> None:
        frame = cv2.imdecode(np.frombuffer(image, np.uint8), cv2.IMREAD_COLOR)
        if frame is None:
            return
        if self.writer is None:
            height, width = frame.shape[:2]
            self.writer = cv2.VideoWriter(str(self.path), cv2.VideoWriter.fourcc(*"mp4v"), self.fps, (width, height))
        if self.last is not None:
            for _ in range(seq - self.last_seq - 1):
                self.writer.write(self.last)
        self.writer.write(frame)
        self.last, self.last_seq = frame, seq

    def close(self) -> None:
        if self.writer is not None:
            self.writer.release()


class Outputs:
    """The outputs asked for, as one result sink ``(seq, image bytes)``.

    Built before any work: the virtual camera opens here (no backend fails now, exit code 2).
    The WHIP connection lives on the stream's event loop: :meth:`start` and :meth:`stop` there;
    :meth:`close` closes the rest.
    """

    def __init__(self, args: argparse.Namespace, capture: CaptureSource, *, window: bool) -> None:
        from fusion_ray.live.virtual_camera import VirtualCamera
        from fusion_ray.live.window import Window

        self.args = args
        self.fps = capture.fps
        self.camera = (VirtualCamera(*capture.size, capture.fps, device=args.virtual_camera_device)
                       if args.virtual_camera else None)
        self.writer = FrameWriter(args.output, capture.fps) if args.output else None
        self.window = Window() if window else None
        self.whip: Any = None
        self.sinks: list[Callable[[int, bytes], None]] = [s for s in (self.writer, self.window, self.camera) if s]

    @property
    def quit_requested(self) -> threading.Event | None:
        """The window's quit event (q or Esc), or None without a window."""
        return self.window.quit if self.window is not None else None

    async def start(self) -> None:
        """Connect to the WHIP endpoint, if one was asked for."""
        if self.args.whip:
            from fusion_ray.live.whip_client import WhipPublisher

            token = self.args.whip_token or os.environ.get(WHIP_TOKEN_ENV)
            self.whip = WhipPublisher(self.args.whip, token, fps=self.fps, codec=self.args.whip_codec)
            await self.whip.start()
            self.sinks.append(self.whip)

    def __call__(self, seq: int, image: bytes) -> None:
        for sink in self.sinks:
            sink(seq, image)

    async def stop(self) -> None:
        """End the WHIP session (DELETE)."""
        if self.whip is not None:
            await self.whip.close()

    def close(self) -> None:
        for closable in (self.writer, self.window, self.camera):
            if closable is not None:
                closable.close()

    def summary(self) -> list[str]:
        """One line per output that is not a file or a window."""
        lines = []
        if self.camera is not None:
            width, height = self.camera.size
            resized = f", {self.camera.resized} resized" if self.camera.resized else ""
            lines.append(f"virtual camera {self.camera.device} ({width}x{height} at {self.camera.fps:g} fps): "
                         f"sent {self.camera.sent} frames{resized}")
        if self.whip is not None:
            lines.append(f"WHIP {self.args.whip} ({self.whip.codec}): sent {self.whip.track.sent} of "
                         f"{self.whip.pushed} frames (the others were replaced by a newer one before sending)")
        return lines
