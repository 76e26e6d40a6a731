"""The local runner: a job in one process, without Ray, with the Ray runner's rules (report,
progress, bad inputs, frames that fail, audio and timestamps, the runner choice)."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from fractions import Fraction

import numpy as np
import pytest

from fusion_ray.core import chain, steps
from fusion_ray.core.facebatch import FrameBatch
from fusion_ray.core.steps import Rows, Step, Tools
from fusion_ray.jobs.config import LocalConfig
from fusion_ray.runners.job import JobItem, choose_runner, plan_job, run_job
from fusion_ray.video import decode_all, make_test_video, probe
from tests.runners.conftest import FPS, NO_FACE, job_config


@pytest.fixture(scope="module")
def first_run(tmp_path_factory, runner_media, scrfd_path):
    out = tmp_path_factory.mktemp("local_out")
    source = (runner_media["source"],)
    items = [JobItem(source, runner_media["clip"], out / "clip.mp4"),
             JobItem(source, runner_media["bad"], out / "broken.mp4"),
             JobItem(source, runner_media["image"], out / "still.png")]
    progress: list[tuple[int, int]] = []
    report = run_job(items, job_config(scrfd_path), output_root=out, report_path=out / "report.json",
                     progress=lambda d, t, r: progress.append((d, t)), runner="local")
    return report, out, progress


def test_items_finish_the_bad_one_is_reported_and_the_report_is_the_jobs(first_run):
    report, out, progress = first_run
    assert [i.status for i in report.items] == ["done", "failed", "done"]
    assert "broken.mp4" in report.items[1].error and not (out / "broken.mp4").exists()
    assert not list(out.glob("*.fusion_ray_parts"))  # joined: the parts are gone
    saved = json.loads((out / "report.json").read_text())
    assert saved["counts"] == {"done": 2, "failed": 1} and saved["frames"] == 49
    assert {"decode", "detect", "select", "align", "swap", "mask", "paste", "compute", "encode"} <= set(saved["stages"])
    assert saved["stages"]["detect"]["busy_s"] > 0 and saved["stages"]["compute"]["busy_s"] > 0
    lines = saved["lines"]   # each line's busy share, and the one that bounds the job
    assert {"compute", "encode"} <= set(lines) and ({"track", "decode"} & set(lines)) and saved["bound"] in lines
    assert all(0 < line["busy_share"] <= 1 for line in lines.values()), lines
    assert set(saved["steps"]) == {"detect", "select", "align", "swap", "mask", "paste"}
    assert all(step["busy_s"] > 0 for step in saved["steps"].values()), saved["steps"]
    assert 0 < saved["driver"]["first_frame_s"] < saved["wall_s"]
    rows = [json.loads(line) for line in (out / "report.jsonl").read_text().splitlines()]
    assert rows[0]["index"] == 1 and sorted(r["index"] for r in rows) == [0, 1, 2]
    assert progress[-1] == (49, 49) and [d for d, _ in progress] == sorted(d for d, _ in progress)


def test_frames_count_rate_and_audio_are_kept(first_run, runner_media):
    report, out, _ = first_run
    src, dst = probe(runner_media["clip"]), probe(out / "clip.mp4")
    assert dst.fps == src.fps == FPS and dst.frame_count == src.frame_count == 48
    assert dst.has_audio and abs(dst.audio_duration_s - src.audio_duration_s) < 0.05
    clip = report.items[0]
    assert clip.frames == 48 and clip.frames_failed == 0 and clip.faces_swapped == 48 - len(NO_FACE)


def test_a_variable_frame_rate_keeps_its_timestamps(tmp_path, images_dir, runner_media, scrfd_path):
    from fusion_ray.imageio import read_image

    times = [Fraction(i, 30) for i in range(6)] + [Fraction(6, 30) + Fraction(i, 10) for i in range(4)]
    clip = make_test_video(tmp_path / "vfr.mp4", face_image=read_image(images_dir / "obama.jpg").frame, n_frames=10,
                           fps=Fraction(30), size_wh=(128, 96), frame_times=times, gop=4)
    report = run_job([JobItem((runner_media["source"],), clip, tmp_path / "out.mp4")], job_config(scrfd_path),
                     output_root=tmp_path, runner="local")
    assert report.items[0].status == "done", report.items[0].error
    assert _video_pts(tmp_path / "out.mp4") == _video_pts(clip) and len(_video_pts(clip)) == 10
    assert probe(tmp_path / "out.mp4").has_audio


def _video_pts(path):
    """Each frame's presentation time (s) from the first one, in order."""
    import av

    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        pts = sorted(p.pts for p in container.demux(stream) if p.pts is not None)
        return [(t - pts[0]) * stream.time_base for t in pts]


def _fail_faces(tools: Tools, rows: Rows, batch: FrameBatch) -> FrameBatch:
    """A test step: a frame with a face to swap fails (as a frame whose step raises would)."""
    for row in sorted(set(batch.faces.frame_index.tolist())):
        chain.guarded(batch.errors, int(row), "test", _raise, None)
    return dataclasses.replace(batch)


def _raise() -> None:
    raise ValueError("this frame fails")


def test_a_failing_frame_passes_through_unchanged_and_counted(monkeypatch, first_run, tmp_path, runner_media,
                                                              scrfd_path):
    monkeypatch.setattr(steps, "STEPS", (*steps.STEPS, Step("fail", "target_mask", _fail_faces, ("crops",), ())))
    report = run_job([JobItem((runner_media["source"],), runner_media["clip"], tmp_path / "out.mp4")],
                     job_config(scrfd_path), output_root=tmp_path, runner="local")
    item = report.items[0]
    failing = 48 - len(NO_FACE)
    assert item.status == "done" and item.frames == 48 and item.frames_failed == failing
    assert "test: ValueError: this frame fails" in item.error and f"{failing} of 48 frame(s) failed" in item.error
    src = [f.frame.astype(np.float32) for f in decode_all(runner_media["clip"])]
    failed = [f.frame.astype(np.float32) for f in decode_all(tmp_path / "out.mp4")]
    swapped = [f.frame.astype(np.float32) for f in decode_all(first_run[1] / "clip.mp4")]
    assert len(failed) == 48
    for i in (0, 20, 40):  # passed through: only coding noise, far closer to the source than a swap
        assert float(((failed[i] - src[i]) ** 2).sum()) < 0.5 * float(((swapped[i] - src[i]) ** 2).sum()), i


def test_an_output_that_is_an_input_is_refused_before_work(tmp_path, runner_media, scrfd_path):
    clip = tmp_path / "clip.mp4"
    clip.write_bytes(runner_media["clip"].read_bytes())
    before = clip.read_bytes()
    report = run_job([JobItem((runner_media["source"],), clip, clip)], job_config(scrfd_path), output_root=tmp_path,
                     force=True, runner="local")
    assert report.items[0].status == "failed" and "refusing to overwrite an input" in report.items[0].error
    assert clip.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["clip.mp4"]


def test_the_local_runner_never_imports_ray(tmp_path, runner_media, scrfd_path):
    script = f"""
import sys
from pathlib import Path
from fusion_ray.runners.job import JobItem, run_job
from tests.runners.conftest import job_config
report = run_job([JobItem((Path({str(runner_media['source'])!r}),), Path({str(runner_media['image'])!r}),
                  Path({str(tmp_path / 'o.png')!r}))], job_config(Path({str(scrfd_path)!r})),
                 output_root=Path({str(tmp_path)!r}), runner="local")
print(report.items[0].status, "ray" in sys.modules)
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split()[-2:] == ["done", "False"]


def test_auto_picks_ray_for_a_cluster_or_a_large_job(runner_media, scrfd_path, tmp_path):
    plan = plan_job([JobItem((runner_media["source"],), runner_media["clip"], tmp_path / "o.mp4")],
                    job_config(scrfd_path))
    local = LocalConfig(auto_ray_frames=100)
    assert choose_runner("auto", plan, local, None, {}) == "local"  # 48 frames
    assert choose_runner("auto", plan, local, "auto", {}) == "ray"
    assert choose_runner("auto", plan, local, None, {"RAY_ADDRESS": "ray://h:10001"}) == "ray"
    assert choose_runner("auto", plan, LocalConfig(auto_ray_frames=40), None, {}) == "ray"
    assert choose_runner("local", plan, LocalConfig(auto_ray_frames=0), "auto", {}) == "local"


def test_auto_counts_the_items_planned_later_as_the_planned_ones(runner_media, scrfd_path, tmp_path):
    from fusion_ray.runners.job import job_frames

    items = [JobItem((runner_media["source"],), runner_media["clip"], tmp_path / f"o{n}.mp4") for n in range(5)]
    plan = plan_job(items, job_config(scrfd_path), on_driver=2)
    assert [p.planned for p in plan.items] == [True, True, False, False, False]
    assert job_frames(plan) == 5 * 48
    assert choose_runner("auto", plan, LocalConfig(auto_ray_frames=200), None, {}) == "ray"
