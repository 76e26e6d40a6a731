"""``run_bench``: the serial loops, the pipeline and the sweep, in one process, on the same
frames and the same model files, collected into one :class:`BenchReport`."""

from __future__ import annotations

import datetime as _dt
import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path

from fusion_ray.bench.machine import load_average, machine_info
from fusion_ray.bench.models import BenchModels, Variant, prepare_models
from fusion_ray.bench.pipeline import run_pipeline
from fusion_ray.bench.report import BenchReport, VideoSpec
from fusion_ray.bench.serial import Canvas, run_serial
from fusion_ray.bench.sweep import DEFAULT_BATCHES, SWEEP_ROLES, run_sweep
from fusion_ray.config import EngineConfig
from fusion_ray.errors import InputError
from fusion_ray.imageio import read_image
from fusion_ray.jobs.config import JobConfig, PipelineConfig
from fusion_ray.video import make_test_video, probe

log = logging.getLogger(__name__)

PARTS: tuple[str, ...] = ("serial", "pipeline", "sweep")
ENV_ASSETS = ("FUSION_RAY_ASSETS", "FUSION_RAY_TEST_ASSETS")


def shared_assets_dir() -> Path | None:
    """The shared assets (photos, real SCRFD): $FUSION_RAY_ASSETS, $FUSION_RAY_TEST_ASSETS, or
    ``../shared/assets`` beside the repository checkout; None when none exists."""
    for var in ENV_ASSETS:
        value = os.environ.get(var, "").strip()
        if value:
            return Path(value) if Path(value).is_dir() else None
    repo = Path(__file__).resolve().parents[2]
    candidate = repo.parent / "shared" / "assets"
    return candidate if candidate.is_dir() else None


@dataclass
class BenchOptions:
    """What to run. Defaults: every part, a generated 640x360 300-frame 29.97 fps video,
    cost-faithful stand-ins for absent models, both serial-loop canvases."""

    engine: EngineConfig
    pipeline: PipelineConfig
    work_dir: Path
    standins: Variant = "cost_faithful"
    parts: tuple[str, ...] = PARTS
    video: Path | None = None
    frames: int = 300
    size_wh: tuple[int, int] = (640, 360)
    fps: Fraction = Fraction(30000, 1001)
    face_image: Path | None = None
    sources: tuple[Path, ...] = ()
    loop_canvases: tuple[Canvas, ...] = ("square", "fit")
    loop_cpu_budget: float | None = None
    address: str | None = None
    ray_num_cpus: int | None = None
    batch_dynamic: bool = True
    detector_fallback: Path | None = None
    sweep_batches: tuple[int, ...] = DEFAULT_BATCHES
    sweep_repeats: int = 3
    sweep_warmup: int = 1
    sweep_caps: Mapping[str, int] = field(default_factory=dict)
    sweep_threads: int | None = None
    sweep_roles: tuple[str, ...] = SWEEP_ROLES
    memory_interval_s: float = 0.5
    memory_pss: bool = False
    """Also sample PSS (costly: perturbs throughput; for memory checks)."""
    command: str = "fusion-ray bench pipeline"


Progress = Callable[[str], None]


def _default_asset(name: str) -> Path | None:
    assets = shared_assets_dir()
    path = assets / name if assets is not None else None
    return path if path is not None and path.is_file() else None


def resolve_inputs(options: BenchOptions) -> tuple[tuple[Path, ...], Path | None, Path | None]:
    """(sources, face image for the generated video, detector fallback) with shared-asset defaults."""
    sources = options.sources or tuple(p for p in [_default_asset("images/biden.jpg")] if p is not None)
    face = options.face_image or _default_asset("images/obama.jpg")
    detector = options.detector_fallback or _default_asset("models/scrfd_2.5g.onnx")
    needs_frames = any(part in options.parts for part in ("serial", "pipeline"))
    if needs_frames and not sources:
        raise InputError("no source face image: pass --source PATH (the shared assets were not found)")
    if needs_frames and options.video is None and face is None:
        raise InputError("no face photo for the generated video: pass --face-image PATH or --video PATH")
    for path in (*sources, *([face] if face else []), *([options.video] if options.video else [])):
        if not path.is_file():
            raise InputError(f"file not found: {path}")
    return sources, face, detector


def prepare_video(options: BenchOptions, face: Path | None, sources: tuple[Path, ...]) -> VideoSpec:
    """The given video, or a generated one (re-used from the work directory when already there)."""
    if options.video is not None:
        info = probe(options.video)
        return VideoSpec(str(options.video), info.frame_count, info.width, info.height, str(info.fps), None,
                         [str(s) for s in sources])
    assert face is not None
    width, height = options.size_wh
    fps = Fraction(options.fps)
    path = options.work_dir / (f"bench_{face.stem}_{width}x{height}_{options.frames}f_"
                               f"{fps.numerator}_{fps.denominator}.mp4")
    if path.is_file():
        try:
            info = probe(path)
            reuse = info.frame_count == options.frames and info.size_wh == (width, height)
        except InputError:
            reuse = False
        if not reuse:
            path.unlink()
    if not path.is_file():
        make_test_video(path, face_image=read_image(face).frame, n_frames=options.frames, fps=fps,
                        size_wh=(width, height))
    info = probe(path)
    return VideoSpec(str(path), info.frame_count, info.width, info.height, str(info.fps), str(face),
                     [str(s) for s in sources])


def prepare(options: BenchOptions) -> tuple[BenchModels, tuple[Path, ...], Path | None]:
    """The models (stand-ins generated where absent) and the inputs, before anything is timed."""
    options.work_dir.mkdir(parents=True, exist_ok=True)
    sources, face, detector = resolve_inputs(options)
    models = prepare_models(options.engine, standins=options.standins, work_dir=options.work_dir,
                            batch_dynamic=options.batch_dynamic, detector_fallback=detector,
                            need_detector=any(part in options.parts for part in ("serial", "pipeline")))
    return models, sources, face


def run_bench(options: BenchOptions, progress: Progress | None = None) -> BenchReport:
    """Run the chosen parts and return the report (nothing is printed)."""
    unknown = set(options.parts) - set(PARTS)
    if unknown:
        raise ValueError(f"unknown parts {sorted(unknown)}; choose from {PARTS}")
    say = progress or (lambda message: None)
    machine = machine_info()
    created = _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
    models, sources, face = prepare(options)
    report = BenchReport(command=options.command, created=created, machine=machine, models=models)
    if models.stand_in_models:
        report.notes.append(models.stand_in_summary())
    cpus = options.loop_cpu_budget or float(os.cpu_count() or 1)
    if "serial" in options.parts or "pipeline" in options.parts:
        say("preparing the video")
        report.video = prepare_video(options, face, sources)
        video = Path(report.video.path)
        for canvas in options.loop_canvases if "serial" in options.parts else ():
            say(f"serial loop, {canvas} canvas")
            report.serial[canvas] = run_serial(video, sources, models.engine, canvas=canvas,
                                               work_dir=options.work_dir, cpu_budget=cpus,
                                               encode_options=options.pipeline.encode_options,
                                               memory_interval_s=options.memory_interval_s,
                                               memory_pss=options.memory_pss)
        if "pipeline" in options.parts:
            say("Ray Data pipeline")
            job = JobConfig(engine=models.engine, pipeline=options.pipeline)
            report.pipeline = run_pipeline(video, sources, job, work_dir=options.work_dir, address=options.address,
                                           num_cpus=options.ray_num_cpus, memory_interval_s=options.memory_interval_s,
                                           memory_pss=options.memory_pss)
        _check_same_work(report)
    if "sweep" in options.parts:
        report.sweep = run_sweep(models, batches=options.sweep_batches, repeats=options.sweep_repeats,
                                 warmup=options.sweep_warmup, caps=options.sweep_caps, roles=options.sweep_roles,
                                 threads=options.sweep_threads or int(cpus),
                                 progress=lambda name, batch: say(f"sweep {name} batch {batch}"))
    report.load_average_at_end = load_average()
    return report


def _check_same_work(report: BenchReport) -> None:
    """Notes when the runs did not process the same frames and faces (the comparison would lie)."""
    runs = {f"serial ({c})": (s.frames, s.faces_swapped) for c, s in report.serial.items()}
    if report.pipeline is not None:
        runs["pipeline"] = (report.pipeline.frames, report.pipeline.faces_swapped)
    if len(set(runs.values())) > 1:
        report.notes.append("the runs did not process the same work (frames, faces swapped): "
                            + ", ".join(f"{k}: {v}" for k, v in runs.items()))
    if report.pipeline is not None and report.pipeline.frames_failed:
        report.notes.append(f"the pipeline passed {report.pipeline.frames_failed} failed frame(s) through unchanged")
