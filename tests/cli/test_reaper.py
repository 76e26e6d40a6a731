"""A ``kill -9`` of a command that started a local Ray leaves no Ray process behind.

``fusion-ray swap`` on a video and ``fusion-ray job`` start a local Ray; killed mid-job, its Ray
processes must be gone within seconds (the reaper, :mod:`fusion_ray.cli.reaper`, ends them). Runs the command in a
subprocess (it must not share the test session's cluster); under the Ray lock like every Ray test.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from fractions import Fraction
from pathlib import Path

import psutil
import pytest

from fusion_ray.imageio import read_image
from fusion_ray.video.synthetic import make_test_video
from tests.procs import kill_9_leaves, kill_all

pytestmark = pytest.mark.ray

FUSION_RAY = Path(sys.executable).with_name("fusion-ray")



def _ray_children(pid: int) -> list[psutil.Process]:
    found = []
    for p in psutil.Process(pid).children(recursive=True):
        with contextlib.suppress(psutil.NoSuchProcess):
            if "fusion_ray.cli.reaper" not in " ".join(p.cmdline()):
                found.append(p)
    return found


@pytest.mark.parametrize("command", ["swap", "job"])
def test_kill_9_of_a_video_command_leaves_no_ray_process_behind(command, tmp_path, images_dir, scrfd_path):
    clip = make_test_video(tmp_path / "long.mp4", face_image=read_image(images_dir / "obama.jpg").frame,
                           n_frames=900, fps=Fraction(30), audio=False)
    source = str(images_dir / "biden.jpg")
    if command == "swap":
        io = ["-s", source, "-t", str(clip), "-o", str(tmp_path / "out.mp4")]
    else:  # a job of one item on its own local Ray
        (tmp_path / "out").mkdir()
        io = ["--source-pattern", source, "--target-pattern", str(clip), "--output-root", str(tmp_path / "out"),
              "--no-progress-bars"]
    proc = subprocess.Popen([str(FUSION_RAY), command, "--runner", "ray", "--swapper", "classic", "--no-tracking",
                             "--model", f"scrfd_2.5g={scrfd_path}", "--providers", "cpu", *io],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ray_processes: list[psutil.Process] = []
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:  # the job is running on its Ray
            ray_processes = _ray_children(proc.pid)
            if any("raylet" in " ".join(p.cmdline()) for p in ray_processes if p.is_running()) \
                    and any("MapWorker" in " ".join(p.cmdline()) or "ray::" in p.name() for p in ray_processes):
                break
            time.sleep(0.5)
        assert proc.poll() is None and ray_processes, f"the {command} should be running on its local Ray"
        time.sleep(1.5)  # the reaper polls every 0.5 s
        ray_processes = _ray_children(proc.pid)
        left = kill_9_leaves(proc, ray_processes)
    finally:
        if proc.poll() is None:
            proc.kill()
        kill_all(ray_processes)  # never leave them to the next test, even when the assertion fails
    assert not left, left
