"""``fusion-ray live`` without --url to a virtual camera and to a WHIP endpoint, end to end: a generated
clip with stamped frames, the real SCRFD detector and the classic swapper (a real swap)."""

import re
from fractions import Fraction
from pathlib import Path

import cv2
import numpy as np
import pytest

from fusion_ray.bench.webrtc_echo import EchoServer
from fusion_ray.cli import main
from fusion_ray.imageio import read_image
from fusion_ray.live.stamp import STAMP_SIZE, read_stamp, stamp
from fusion_ray.video.decode import decode_all
from fusion_ray.video.synthetic import make_test_video
from tests.live.virtualcam_backend import RecordingBackend

FRAMES = 24
TOKEN = "whip-secret"


@pytest.fixture(scope="module")
def clip(images_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[np.ndarray]]:
    """A 640x360 30 fps clip whose frame i carries stamp i, and its frames as read back."""
    folder = tmp_path_factory.mktemp("live_outputs")
    made = make_test_video(folder / "made.mp4", face_image=read_image(images_dir / "biden.jpg").frame,
                           n_frames=FRAMES, fps=Fraction(30), size_wh=(640, 360), audio=False)
    frames = [stamp(d.frame.copy(), i) for i, d in enumerate(decode_all(made))]
    path = folder / "stamped.mp4"
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter.fourcc(*"mp4v"), 30, (640, 360))
    for frame in frames:
        writer.write(frame)
    writer.release()
    capture = cv2.VideoCapture(str(path))
    read = [capture.read()[1] for _ in range(FRAMES)]
    capture.release()
    assert [read_stamp(frame) for frame in read] == list(range(FRAMES))
    return path, read


def _live(clip_path: Path, images_dir: Path, scrfd_path: Path, *extra: str) -> int:
    return main(["live", "--input", str(clip_path), "--source", str(images_dir / "obama.jpg"), "--fps", "10",
                 "--deadline-ms", "3000", "--quality", "95", "--swapper", "classic", "--model",
                 f"scrfd_2.5g={scrfd_path}", "--providers", "cpu", "--precision", "detector=fp32", *extra])


def _changed(got: np.ndarray, sent: np.ndarray) -> float:
    """The largest mean difference of a 32x32 block below the stamp (JPEG at 95: a few levels; a
    swapped face: tens)."""
    diff = np.abs(got.astype(np.int16) - sent.astype(np.int16)).mean(axis=2)[STAMP_SIZE[1]:352]
    return float(diff.reshape(10, 32, 20, 32).mean(axis=(1, 3)).max())


def test_virtual_camera_gets_the_swapped_frames_in_order_at_the_inputs_size_and_rate(
        clip, images_dir, scrfd_path, recording_camera: type[RecordingBackend], capsys):
    path, sent = clip
    code = _live(path, images_dir, scrfd_path, "--virtual-camera", "--virtual-camera-device", "/dev/video7")
    out = capsys.readouterr().out
    assert code == 0, out
    (backend,) = recording_camera.opened
    assert (backend.width, backend.height, backend.fps, backend.device_name) == (640, 360, 10.0, "/dev/video7")
    assert backend.closed == 1
    received = int(re.search(r"received (\d+)", out).group(1))  # type: ignore[union-attr]
    assert 1 <= received == len(backend.frames)
    assert f"virtual camera /dev/video7 (640x360 at 10 fps): sent {received} frames" in out
    seqs = [read_stamp(frame) for frame in backend.frames]
    assert all(seq is not None for seq in seqs) and seqs == sorted(set(seqs))  # in order, none twice
    assert all(frame.shape == (360, 640, 3) for frame in backend.frames)
    changes = [_changed(frame, sent[seq]) for frame, seq in zip(backend.frames, seqs, strict=True)]
    assert all(c > 10 for c in changes), changes


def test_no_virtual_camera_is_a_clear_error_before_any_work(clip, images_dir, scrfd_path, no_camera, capsys):
    code = _live(clip[0], images_dir, scrfd_path, "--virtual-camera")
    err = capsys.readouterr().err
    assert code == 2
    assert "sudo modprobe v4l2loopback devices=1 exclusive_caps=1" in err and "no v4l2 loopback device" in err
    assert "running locally" not in err  # the models were never loaded
    assert len([line for line in err.splitlines() if line.startswith("error:")]) == 1


def test_whip_publishes_the_swapped_stream_and_ends_the_session(clip, images_dir, scrfd_path, capsys):
    with EchoServer(token=TOKEN) as echo:
        code = _live(clip[0], images_dir, scrfd_path, "--whip", echo.url, "--whip-token", TOKEN,
                     "--whip-codec", "vp8")
        out = capsys.readouterr().out
        assert code == 0, out
        assert echo.sessions == {}  # DELETEd at the end
        (frames_received,) = echo.frames_received.values()
    sent = int(re.search(r"WHIP \S+ \(vp8\): sent (\d+) of (\d+) frames", out).group(1))  # type: ignore[union-attr]
    assert frames_received >= 1 and sent >= frames_received


def test_a_refused_whip_token_is_a_clear_error(clip, images_dir, scrfd_path, capsys):
    with EchoServer(token=TOKEN) as echo:
        code = _live(clip[0], images_dir, scrfd_path, "--whip", echo.url, "--whip-token", "wrong")
    err = capsys.readouterr().err
    assert code == 1 and "refused the token: 401" in err
