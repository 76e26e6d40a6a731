"""The job benchmarks' helpers (no Ray): generated media, progress parsing, the job command."""

from pathlib import Path

import cv2

from fusion_ray.bench.images import make_image_set
from fusion_ray.bench.jobs import Run, job_args, make_clips, pipeline_yaml
from fusion_ray.jobs.config import load_job_config
from fusion_ray.video import probe


def test_generated_images_and_clips_differ_and_repeat(tmp_path, images_dir):
    photos = sorted(images_dir.glob("*.jpg"))
    a = make_image_set(tmp_path / "a", 5, photos)
    b = make_image_set(tmp_path / "b", 5, photos)
    assert [p.read_bytes() for p in a] == [p.read_bytes() for p in b]  # the same seed, the same files
    assert len({p.read_bytes() for p in a}) == 5 and all(cv2.imread(str(p)) is not None for p in a)
    clips = make_clips(tmp_path / "c", 2, images_dir / "obama.jpg", frames=10)
    assert [probe(c).frame_count for c in clips] == [10, 10] and clips[0].read_bytes() != clips[1].read_bytes()


def test_the_last_progress_line_and_the_job_command(tmp_path):
    run = Run(1.0, -9, "x\rframes 12/300  4.0 frames/s\rframes 57/300  5.0 frames/s  ETA", {})
    assert run.last_progress == 57 and Run(1.0, 0, "", {}).last_progress == 0
    yaml = pipeline_yaml(tmp_path / "p.yaml", plan_on_driver=None, segment_seconds=2.0)
    cfg = load_job_config(yaml)  # what the job process reads
    assert cfg.pipeline.plan_on_driver is None and cfg.pipeline.segment_seconds == 2.0
    args = job_args(sources="s.jpg", targets="*.mp4", root="out", address="127.0.0.1:6379", pipeline=yaml,
                    report=Path("r.json"), engine=["--swapper", "classic"])
    assert args[0] == "job" and args[-2:] == ["--swapper", "classic"] and "--force" in args
