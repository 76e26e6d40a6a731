"""The local runner as a process (``fusion-ray job --runner local``): bad inputs refused before
work, ``kill -9`` then a re-run that resumes from the finished segments, SIGTERM and Ctrl-C that
stop it cleanly. The classic swapper and the real SCRFD detector; tracking off."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from fractions import Fraction
from pathlib import Path

import numpy as np
import psutil
import pytest

from fusion_ray.imageio import read_image
from fusion_ray.jobs.parts import PARTS_SUFFIX
from fusion_ray.video import decode_all, make_corrupt_video, make_test_video, probe
from tests.procs import left_after

FUSION_RAY = Path(sys.executable).with_name("fusion-ray")
FRAMES, GOP = 300, 10  # 30 segments of 10 frames (segment_seconds 0.3 at 25 fps)
PIPELINE_YAML = """\
pipeline:
  segment_seconds: 0.3
  progress_bars: false
  encode_options: {preset: ultrafast, crf: 12}
local: {max_batch: 4, batch_wait_ms: 5}
"""


@pytest.fixture(scope="module")
def clip(tmp_path_factory, images_dir):
    root = tmp_path_factory.mktemp("local_faults")
    face = read_image(images_dir / "obama.jpg").frame
    make_test_video(root / "clip.mp4", face_image=face, n_frames=FRAMES, fps=Fraction(25), size_wh=(320, 180), gop=GOP)
    (root / "pipeline.yaml").write_text(PIPELINE_YAML)
    return root / "clip.mp4"


def _job(clip: Path, root: Path, scrfd: Path, source: Path, report: Path) -> list[str]:
    return [str(FUSION_RAY), "job", "--runner", "local", "--source-pattern", str(source), "--target-pattern",
            str(clip), "--output-pattern", "out.mp4", "--output-root", str(root), "--pipeline-config",
            str(clip.with_name("pipeline.yaml")), "--swapper", "classic", "--no-tracking", "--model",
            f"scrfd_2.5g={scrfd}", "--providers", "cpu", "--report", str(report)]


def _segments(root: Path) -> list[Path]:
    return sorted((root / f"out.mp4{PARTS_SUFFIX}").glob("*/segment_*.mp4"))


def _start_and_wait(cmd: list[str], root: Path, segments: int) -> subprocess.Popen[str]:
    """Start the job and wait until ``segments`` segment files are in its parts folder."""
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None and len(_segments(root)) < segments:
        time.sleep(0.02)
    if proc.poll() is not None:
        pytest.fail(f"the job ended before it could be stopped: {proc.stderr.read()[-2000:]}")  # type: ignore[union-attr]
    return proc


def test_a_job_killed_mid_run_resumes_from_its_parts(clip, images_dir, scrfd_path, tmp_path):
    source = images_dir / "biden.jpg"
    root = tmp_path / "out"
    root.mkdir()
    proc = _start_and_wait(_job(clip, root, scrfd_path, source, tmp_path / "r1.json"), root, 5)
    proc.kill()
    proc.wait(timeout=30)
    killed_at = len(_segments(root))
    assert 5 <= killed_at < FRAMES // GOP, killed_at
    assert not (root / "out.mp4").exists()

    done = subprocess.run(_job(clip, root, scrfd_path, source, tmp_path / "r2.json"), capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((tmp_path / "r2.json").read_text())
    (item,) = report["items"]
    assert item["status"] == "done" and item["frames"] == FRAMES and item["frames_resumed"] >= killed_at * GOP, item
    assert report["frames"] == FRAMES - item["frames_resumed"]
    assert not (root / f"out.mp4{PARTS_SUFFIX}").exists()  # joined: the parts are gone

    reference = tmp_path / "reference"
    reference.mkdir()
    whole = subprocess.run(_job(clip, reference, scrfd_path, source, tmp_path / "r3.json"), capture_output=True,
                           text=True, timeout=300)
    assert whole.returncode == 0, whole.stderr[-3000:]
    a, b = probe(reference / "out.mp4"), probe(root / "out.mp4")
    assert a.frame_count == b.frame_count == FRAMES and a.has_audio and b.has_audio
    for x, y in zip(decode_all(reference / "out.mp4"), decode_all(root / "out.mp4"), strict=True):
        assert np.array_equal(x.frame, y.frame), x.index


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_stops_the_run_cleanly(sig, clip, images_dir, scrfd_path, tmp_path):
    root = tmp_path / "out"
    root.mkdir()
    proc = _start_and_wait(_job(clip, root, scrfd_path, images_dir / "biden.jpg", tmp_path / "r.json"), root, 2)
    proc.send_signal(sig)
    try:
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, proc.stderr.read()[-2000:]  # type: ignore[union-attr]
    assert "interrupted" in proc.stderr.read()  # type: ignore[union-attr]
    assert not (root / "out.mp4").exists()
    parts = root / f"out.mp4{PARTS_SUFFIX}"
    leftovers = [p.name for p in parts.rglob("*") if p.is_file() and not p.name.startswith("segment_")]
    assert leftovers == []  # no partial segment left behind; the finished ones stay for a re-run
    assert all(probe(p).frame_count == GOP for p in _segments(root))
    assert left_after([psutil.Process(proc.pid)] if psutil.pid_exists(proc.pid) else [], 5) == []


@pytest.mark.parametrize("kind", ["corrupt", "output_is_input"])
def test_bad_inputs_are_refused_before_work(kind, tmp_path, images_dir, scrfd_path):
    """``fusion-ray swap --runner local``: refused at once (exit 2), nothing written, no runner."""
    source = images_dir / "biden.jpg"
    target = make_corrupt_video(tmp_path / "broken.mp4") if kind == "corrupt" else tmp_path / "clip.mp4"
    if kind == "output_is_input":
        make_test_video(target, face_image=None, n_frames=10, fps=Fraction(25), size_wh=(64, 48))
    output = tmp_path / "out.mp4" if kind == "corrupt" else target
    before = sorted(p.name for p in tmp_path.iterdir())
    proc = subprocess.run([str(FUSION_RAY), "swap", "--runner", "local", "-s", str(source), "-t", str(target), "-o",
                           str(output), "--swapper", "classic", "--model", f"scrfd_2.5g={scrfd_path}", "--force"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "runner:" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == before
