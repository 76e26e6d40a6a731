"""Showing a live stream in a window (``fusion-ray live`` without ``--output``), when one can be shown.

The project depends on ``opencv-python-headless``, which has no GUI (``cv2.imshow`` raises), and a
server or a container may have no display: :func:`window_problem` says why no window can open,
before any model is loaded, so the command can name the way out (``--output``, or the GUI build
of OpenCV) instead of failing at the first frame.
"""

from __future__ import annotations

import os
import sys
import threading

import cv2
import numpy as np

from fusion_ray.live.client import FrameSource

QUIT_KEYS = (ord("q"), 27)  # q, Esc


def opencv_gui(build_information: str | None = None) -> str | None:
    """The GUI backend OpenCV was built with (GTK, QT, Cocoa, WIN32UI...), or None (headless)."""
    info = cv2.getBuildInformation() if build_information is None else build_information
    for line in info.splitlines():
        name, sep, value = line.strip().partition(":")
        if sep and name.strip() == "GUI":
            value = value.strip()
            return None if not value or value.upper() == "NONE" else value
    return None


def window_problem(environ: dict[str, str] | None = None, platform: str = sys.platform,
                   build_information: str | None = None) -> str | None:
    """Why no window can be shown here, or None when one can."""
    if opencv_gui(build_information) is None:
        return ("this OpenCV has no GUI (opencv-python-headless, the project's dependency); "
                "install opencv-python in its place for a window")
    env = os.environ if environ is None else environ
    if platform.startswith("linux") and not (env.get("DISPLAY") or env.get("WAYLAND_DISPLAY")):
        return "no display (neither DISPLAY nor WAYLAND_DISPLAY is set)"
    return None


class Window:
    """Decoded results in one OpenCV window; q or Esc asks the source to stop."""

    def __init__(self, title: str = "fusion-ray live") -> None:
        self.title = title
        self.quit = threading.Event()

    def __call__(self, seq: int, image: bytes) -> None:
        frame = cv2.imdecode(np.frombuffer(image, np.uint8), cv2.IMREAD_COLOR)
        if frame is None:
            return
        cv2.imshow(self.title, frame)
        if cv2.waitKey(1) & 0xFF in QUIT_KEYS:
            self.quit.set()

    def close(self) -> None:
        cv2.destroyWindow(self.title)


class UntilQuit:
    """A frame source that ends when ``quit`` is set (the window's q key)."""

    def __init__(self, source: FrameSource, quit: threading.Event) -> None:
        self.source = source
        self.fps = source.fps
        self.quit = quit

    def read(self) -> bytes | None:
        return None if self.quit.is_set() else self.source.read()
