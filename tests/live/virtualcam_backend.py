"""A pyvirtualcam backend that records what it is sent, registered the way pyvirtualcam's own
(v4l2loopback, OBS) are: the real ``pyvirtualcam.Camera`` runs in front of it."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest


class RecordingBackend:
    """pyvirtualcam's backend interface (``pyvirtualcam.Backend``); every instance is kept in ``opened``."""

    opened: list[RecordingBackend] = []

    def __init__(self, *, width: int, height: int, fps: float, fourcc: int, device: str | None, **kw: object) -> None:
        self.width, self.height, self.fps, self.fourcc = width, height, fps, fourcc
        self.device_name = device or "/dev/video-recording"
        self.frames: list[np.ndarray] = []
        self.closed = 0
        RecordingBackend.opened.append(self)

    def send(self, frame: np.ndarray) -> None:
        self.frames.append(frame.reshape(self.height, self.width, 3).copy())

    def close(self) -> None:
        self.closed += 1

    def device(self) -> str:
        return self.device_name

    def native_fourcc(self) -> int | None:
        return None


class NoDeviceBackend:
    """A backend that finds no device, as v4l2loopback does without the kernel module."""

    def __init__(self, **kw: object) -> None:
        raise RuntimeError("no v4l2 loopback device found")


@pytest.fixture
def recording_camera(monkeypatch: pytest.MonkeyPatch) -> Iterator[type[RecordingBackend]]:
    """Only the recording backend is registered (a machine's real ones are hidden)."""
    import pyvirtualcam
    from pyvirtualcam import camera

    monkeypatch.setattr(camera, "BACKENDS", {})
    monkeypatch.setattr(RecordingBackend, "opened", [])
    pyvirtualcam.register_backend("recording", RecordingBackend)
    yield RecordingBackend


@pytest.fixture
def no_camera(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only a backend that finds no device."""
    import pyvirtualcam
    from pyvirtualcam import camera

    monkeypatch.setattr(camera, "BACKENDS", {})
    pyvirtualcam.register_backend("v4l2loopback", NoDeviceBackend)
