"""The virtual camera sink through pyvirtualcam's real Camera, with a registered recording backend."""

import sys

import cv2
import numpy as np
import pytest

from fusion_ray.live.virtual_camera import VirtualCamera, VirtualCameraError, setup_hint
from tests.live.virtualcam_backend import RecordingBackend


def test_frames_go_out_in_bgr_at_the_size_and_rate_given(recording_camera: type[RecordingBackend]):
    import pyvirtualcam

    camera = VirtualCamera(64, 48, 25.0, device="/dev/video7")
    frame = np.random.default_rng(0).integers(0, 255, (48, 64, 3), np.uint8)
    camera.send(frame)
    camera(1, cv2.imencode(".png", frame[::-1].copy())[1].tobytes())  # a result sink: encoded image bytes
    camera.close()
    (backend,) = recording_camera.opened
    assert (backend.width, backend.height, backend.fps) == (64, 48, 25.0)
    assert backend.fourcc == pyvirtualcam.camera.encode_fourcc(pyvirtualcam.PixelFormat.BGR.value)
    assert camera.device == "/dev/video7" and backend.closed == 1
    assert np.array_equal(backend.frames[0], frame) and np.array_equal(backend.frames[1], frame[::-1])
    assert camera.sent == 2 and camera.resized == 0


def test_a_frame_of_another_size_is_resized_to_the_cameras_and_counted(recording_camera, caplog):
    camera = VirtualCamera(64, 48, 30.0)
    camera.send(np.zeros((96, 128, 3), np.uint8))
    camera.send(np.zeros((96, 128, 3), np.uint8))
    (backend,) = recording_camera.opened
    assert [f.shape for f in backend.frames] == [(48, 64, 3)] * 2 and camera.resized == 2
    assert len([r for r in caplog.records if "resized" in r.message]) == 1  # said once, with the reason


def test_no_backend_names_the_setup_step(no_camera):
    with pytest.raises(VirtualCameraError) as caught:
        VirtualCamera(640, 360, 30.0)
    message = str(caught.value)
    assert setup_hint() in message and "no v4l2 loopback device found" in message and "\n" not in message
    assert caught.value.exit_code == 2


def test_the_setup_step_per_platform():
    assert "sudo modprobe v4l2loopback devices=1 exclusive_caps=1" in setup_hint("linux")
    assert "OBS" in setup_hint("win32") and "Virtual Camera" in setup_hint("darwin")


def test_without_pyvirtualcam_the_error_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "pyvirtualcam", None)
    with pytest.raises(VirtualCameraError, match=r"fusion-ray\[virtualcam\]"):
        VirtualCamera(640, 360, 30.0)
