"""Segment-level resume: ``kill -9`` of a job's driver mid-run, then a re-run redoes only the
missing segments and the output equals an uninterrupted run's (local, and in a bucket of the
session's S3 server).

The drivers are ``fusion-ray job`` processes on the session's Ray cluster (``--address``): a
driver killed on a real cluster leaves the cluster running, as here. The classic swapper (the
one real swap here) and the real SCRFD detector; tracking off.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from fusion_ray.imageio import read_image
from fusion_ray.jobs.parts import PARTS_SUFFIX
from fusion_ray.storage import Storage
from fusion_ray.video import decode_all, make_test_video, probe

pytestmark = pytest.mark.usefixtures("ray_cluster")

FUSION_RAY = Path(sys.executable).with_name("fusion-ray")
FRAMES, GOP = 200, 10  # 20 segments of 10 frames (segment_seconds 0.3 at 25 fps)
PIPELINE_YAML = """\
pipeline:
  segment_seconds: 0.3
  block_frames: 5
  writers: 1
  progress_bars: false
  no_progress_timeout_s: 120
  encode_options: {preset: ultrafast, crf: 12}
"""


@pytest.fixture(scope="module")
def clip(tmp_path_factory, images_dir):
    root = tmp_path_factory.mktemp("resume")
    face = read_image(images_dir / "obama.jpg").frame
    make_test_video(root / "clip.mp4", face_image=face, n_frames=FRAMES, fps=Fraction(25), size_wh=(192, 108), gop=GOP)
    (root / "pipeline.yaml").write_text(PIPELINE_YAML)
    return root / "clip.mp4"


def _job(clip: Path, root: str, scrfd: Path, source: Path, env: dict[str, str], report: Path) -> list[str]:
    import ray

    return [str(FUSION_RAY), "job", "--source-pattern", str(source), "--target-pattern", str(clip),
            "--output-pattern", "out.mp4", "--output-root", root, "--address", ray.get_runtime_context().gcs_address,
            "--pipeline-config", str(clip.with_name("pipeline.yaml")), "--swapper", "classic", "--no-tracking",
            "--model", f"scrfd_2.5g={scrfd}", "--providers", "cpu", "--no-progress-bars", "--report", str(report)]


def _run(cmd: list[str], env: dict[str, str]) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]


def _kill_when(cmd: list[str], env: dict[str, str], segments_written) -> int:  # type: ignore[no-untyped-def]
    """Start the job, ``kill -9`` its driver once at least 5 segments are in its parts folder;
    returns how many there were."""
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and proc.poll() is None and segments_written() < 5:
            time.sleep(0.05)
        assert proc.poll() is None, f"the job ended before it could be killed: {proc.stderr.read()[-2000:]}"  # type: ignore[union-attr]
        proc.kill()
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    return int(segments_written())


@pytest.mark.parametrize("where", ["local", "s3"])
def test_a_job_killed_mid_run_resumes_from_its_parts(where, clip, images_dir, scrfd_path, tmp_path, request):
    env = dict(os.environ)
    storage = Storage()
    root = str(tmp_path / "out")
    (tmp_path / "out").mkdir()
    if where == "s3":
        s3 = request.getfixturevalue("s3_server")
        bucket = request.getfixturevalue("s3_bucket")
        env.update(s3.env())
        storage = s3.storage()
        root = f"s3://{bucket}/resume"
    source = images_dir / "biden.jpg"
    parts = f"{root}/out.mp4{PARTS_SUFFIX}"

    def written() -> int:
        return len(storage.glob(f"{parts}/*/segment_*.mp4"))

    killed_at = _kill_when(_job(clip, root, scrfd_path, source, env, tmp_path / "r1.json"), env, written)
    assert 5 <= killed_at < FRAMES // GOP, killed_at
    assert not storage.exists(f"{root}/out.mp4")  # no partial output under the output's name

    _run(_job(clip, root, scrfd_path, source, env, tmp_path / "r2.json"), env)
    (item,) = json.loads((tmp_path / "r2.json").read_text())["items"]
    assert item["status"] == "done", item
    assert item["frames"] == FRAMES and item["frames_resumed"] >= killed_at * GOP, item
    assert json.loads((tmp_path / "r2.json").read_text())["frames"] == FRAMES - item["frames_resumed"]
    assert not storage.glob(f"{parts}/**/*")  # joined: the parts are gone

    reference = tmp_path / "reference"
    reference.mkdir()
    _run(_job(clip, str(reference), scrfd_path, source, env, tmp_path / "r3.json"), env)
    resumed = tmp_path / "resumed.mp4"
    resumed.write_bytes(storage.read_bytes(f"{root}/out.mp4"))
    a, b = probe(reference / "out.mp4"), probe(resumed)
    assert a.frame_count == b.frame_count == FRAMES and a.has_audio and b.has_audio
    assert b.audio_duration_s == pytest.approx(a.audio_duration_s, abs=1e-3)
    swapped = 0
    for x, y, original in zip(decode_all(reference / "out.mp4"), decode_all(resumed), decode_all(clip), strict=True):
        assert np.array_equal(x.frame, y.frame), x.index
        swapped += not np.array_equal(y.frame, original.frame)
    assert swapped > FRAMES // 2  # a visible swap, not a copy


def test_clean_parts_removes_leftovers_and_changed_settings_start_again(clip, tmp_path):
    """``--clean-parts`` removes every parts folder under the root (and nothing else)."""
    root = tmp_path / "out"
    keep = root / "done.mp4"
    leftovers = [root / f"a.mp4{PARTS_SUFFIX}" / "0123456789abcdef", root / "sub" / f"b.mp4{PARTS_SUFFIX}" / "k"]
    for folder in leftovers:
        folder.mkdir(parents=True)
        (folder / "segment_00000.mp4").write_bytes(b"x")
    keep.write_bytes(b"y")
    proc = subprocess.run([str(FUSION_RAY), "job", "--clean-parts", "--output-root", str(root)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "2 parts folder(s) removed" in proc.stderr
    assert not any(f.parent.exists() for f in leftovers) and keep.read_bytes() == b"y"
