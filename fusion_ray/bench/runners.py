"""The local runner against the Ray runner, side by side, as a user runs them.

Each run is a ``fusion-ray job --runner local|ray`` process on the same files, the real SCRFD
detector and the classic swapper, with the default engine settings (tracking on): its wall time
(the process, imports and Ray's start-up included), the time to its first output frame and its
steady rate (frames after the first over the time after it) come from the job report. The
workloads are a generated multi-face 640x360 clip with audio (the shared group photo sweeping
over a background: three faces a frame), clips of it repeated (the crossover), and photo sets
made from the shared photos (1 to 3 faces each). With ``footage`` the clip is the three-face clip
of :mod:`fusion_ray.bench.footage` (faces that turn, cross and are covered; audio that starts
early) and the photo sets are PNG and JPEG photos of 0.5 to 2 megapixels; with ``check_every`` each
run's outputs are checked for faces the swap missed (the real detector on every N-th input frame).

With ``insightface_python`` (a Python with insightface) the runner ``insightface`` is insightface's
own loop over the same files (:mod:`fusion_ray.bench.insightface_loop`: one frame at a time,
``FaceAnalysis.get`` then ``INSwapper.get``; its model loading not counted), and every runner
uses the same model files: the given detector, and the embedder and inswapper of ``models_dir``
(real files, or labelled stand-ins) instead of the classic swapper.

``settings`` runs every workload on the local and Ray runners once per named set of extra
``fusion-ray job`` options (e.g. FaceFusion's mask options against the box mask alone).
"""

from __future__ import annotations

import shlex
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from fractions import Fraction
from pathlib import Path
from typing import Any

from fusion_ray.bench.footage import make_mixed_photo_set, unswapped_faces, write_group_video
from fusion_ray.bench.images import insightface_loop, make_image_set
from fusion_ray.bench.jobs import run_command
from fusion_ray.bench.tracking import load_detector
from fusion_ray.config import EngineConfig
from fusion_ray.errors import InputError
from fusion_ray.imageio import read_image
from fusion_ray.video import make_test_video

RUNNER_NAMES = ("local", "ray")
INSIGHTFACE = "insightface"


@dataclass(frozen=True)
class RunnerResult:
    workload: str
    runner: str
    frames: int
    wall_s: float
    """The process, start to exit."""
    first_frame_s: float | None
    """From the job's planning to its first output frame (the report's)."""
    steady_fps: float
    status: str
    setting: str = ""
    """The name of the extra job options the run had (empty: none)."""
    unswapped: str = ""
    """Faces the detector finds on the sampled input frames that the output left unchanged, of all
    it finds ("missed/found"; empty: not checked)."""


Setting = tuple[str, list[str]]
"""A name and the extra ``fusion-ray job`` options it stands for."""


def parse_setting(text: str) -> Setting:
    """``NAME=OPTIONS`` (shell-split), e.g. ``masks=--face-mask-types box occlusion``."""
    name, sep, options = text.partition("=")
    if not sep or not name.strip():
        raise InputError(f"--setting: expected NAME=OPTIONS, got {text!r}")
    return name.strip(), shlex.split(options)


def make_group_clips(folder: Path, count: int, photo: Path, *, frames: int) -> list[Path]:
    """``count`` 640x360 25 fps clips with audio of ``photo`` (a group photo) sweeping over a background."""
    folder.mkdir(parents=True, exist_ok=True)
    image = read_image(photo).frame
    return [make_test_video(folder / f"clip_{n:03d}.mp4", face_image=image, n_frames=frames, fps=Fraction(25),
                            size_wh=(640, 360), gop=25, seed=n) for n in range(count)]


def engine_args(scrfd: Path, models_dir: Path | None) -> list[str]:
    """The engine options of every run: the classic swapper, or the inswapper of ``models_dir``."""
    swapper = ["--swapper", "classic"] if models_dir is None else ["--swapper", "inswapper", "--models-dir",
                                                                   str(models_dir)]
    return [*swapper, "--model", f"scrfd_2.5g={scrfd}", "--providers", "cpu"]


def run_label(workload: str, runner: str, setting: Setting) -> str:
    """The name of one run's files."""
    return f"{workload}_{runner}_{setting[0]}".replace(" ", "_")


def output_folder(work: Path, workload: str, runner: str, setting: Setting) -> Path:
    """Where one run's outputs go."""
    return work / f"out_{run_label(workload, runner, setting)}"


def run_one(workload: str, runner: str, *, source: Path, targets: str, scrfd: Path, work: Path,
            models_dir: Path | None = None, setting: Setting = ("", [])) -> RunnerResult:
    """One ``fusion-ray job`` over ``targets`` (a glob) with ``runner`` and the setting's options."""
    label = run_label(workload, runner, setting)
    out = output_folder(work, workload, runner, setting)
    out.mkdir(parents=True, exist_ok=True)
    report = work / f"report_{label}.json"
    args = ["job", "--runner", runner, "--source-pattern", str(source), "--target-pattern", targets,
            "--output-pattern", "{target_name}.{target_extension}", "--output-root", str(out), "--report",
            str(report), *engine_args(scrfd, models_dir), *setting[1], "--no-progress-bars", "--force"]
    run = run_command(args, report)
    data: dict[str, Any] = run.report
    frames = int(data.get("frames", 0))
    first = data.get("driver", {}).get("first_frame_s")
    wall = float(data.get("wall_s", 0.0))
    steady = (frames - 1) / (wall - first) if first is not None and frames > 1 and wall > first else 0.0
    counts = data.get("counts", {})
    status = "ok" if run.code == 0 and set(counts) == {"done"} else f"exit {run.code}: {run.stderr[-300:]}"
    return RunnerResult(workload, runner, frames, run.wall_s, first, steady, status, setting[0])


def run_insightface(workload: str, python: str, *, source: Path, files: Sequence[Path], scrfd: Path,
                    models_dir: Path, work: Path) -> RunnerResult:
    """insightface's own loop over ``files`` on the same model files (its model loading not counted)."""
    engine = EngineConfig.model_validate({"models": {"models_dir": str(models_dir), "paths": {"scrfd_2.5g": str(scrfd)}},
                                     "runtime": {"providers": ["cpu"]}})
    started = time.perf_counter()
    try:
        done = insightface_loop(python, engine, source, work / f"out_{workload}_insightface", files, work)
    except InputError as exc:
        return RunnerResult(workload, INSIGHTFACE, 0, time.perf_counter() - started, None, 0.0, str(exc))
    frames, wall, first = int(done["frames"]), float(done["wall_s"]), done.get("first_frame_s")
    steady = (frames - 1) / (wall - first) if first is not None and frames > 1 and wall > first else 0.0
    return RunnerResult(workload, INSIGHTFACE, frames, wall, first, steady, "ok")


def bench_runners(*, photos: Sequence[Path], group_photo: Path, scrfd: Path, clip_frames: int = 275,
                  clip_counts: Sequence[int] = (1,), image_counts: Sequence[int] = (50,),
                  runners: Sequence[str] = RUNNER_NAMES, work_dir: Path | None = None,
                  models_dir: Path | None = None, insightface_python: str | None = None,
                  settings: Sequence[Setting] = (("", []),), footage: bool = False,
                  check_every: int = 0) -> list[dict[str, Any]]:
    """Every workload through every runner, one after the other (same files, same settings)."""
    if INSIGHTFACE in runners and (insightface_python is None or models_dir is None):
        raise InputError("the insightface runner needs --insightface-python and --models-dir (its inswapper)")
    with tempfile.TemporaryDirectory(prefix="fusion_ray_bench_runners.") as tmp:
        work = work_dir or Path(tmp)
        workloads: list[tuple[str, list[Path]]] = []
        detector = load_detector(scrfd) if footage or check_every else None
        for count in clip_counts:
            folder = work / f"clips_{count}"
            if footage:
                assert detector is not None
                clips = [write_group_video(folder / f"clip_{n:03d}.mp4", photos[:3], detector, n_frames=clip_frames)
                         for n in range(count)]
                workloads.append((f"{count} three-face clip(s) x {clip_frames} frames", clips))
            else:
                workloads.append((f"{count} clip(s) x {clip_frames} frames",
                                  make_group_clips(folder, count, group_photo, frames=clip_frames)))
        for count in image_counts:
            if footage:
                workloads.append((f"{count} mixed photos", make_mixed_photo_set(work / f"images_{count}", count, photos)))
            else:
                workloads.append((f"{count} photos", make_image_set(work / f"images_{count}", count, photos)))
        results = []
        for workload, files in workloads:
            for runner in runners:
                if runner == INSIGHTFACE:
                    assert insightface_python is not None and models_dir is not None
                    results.append(run_insightface(workload, insightface_python, source=photos[0], files=files,
                                                   scrfd=scrfd, models_dir=models_dir, work=work))
                    continue
                targets = str(files[0].parent / "*")
                for setting in settings:
                    result = run_one(workload, runner, source=photos[0], targets=targets, scrfd=scrfd,
                                     work=work, models_dir=models_dir, setting=setting)
                    if check_every and detector is not None and result.status == "ok":
                        out = output_folder(work, workload, runner, setting)
                        found = unswapped_faces([(f, out / f.name) for f in files], detector, every=check_every)
                        result = replace(result, unswapped=f"{found['unswapped']}/{found['faces']}")
                    results.append(result)
        return [asdict(r) for r in results]


def render_markdown(results: Sequence[dict[str, Any]]) -> str:
    """One row per run; with insightface's loop in the run, each row's speed-up over it (its wall
    time over the row's, the loop's model loading not counted, the row's process whole)."""
    loop = {r["workload"]: r["wall_s"] for r in results if r["runner"] == INSIGHTFACE and r["status"] == "ok"}
    lines = ["| workload | runner | frames | wall s | first frame s | steady frames/s | vs insightface | faces unswapped | status |",
             "|---|---|---:|---:|---:|---:|---:|---:|---|"]
    for r in results:
        first = "-" if r["first_frame_s"] is None else f"{r['first_frame_s']:.2f}"
        base = loop.get(r["workload"])
        ratio = f"{base / r['wall_s']:.2f}x" if base and r["wall_s"] > 0 else "-"
        runner = f"{r['runner']} ({r['setting']})" if r.get("setting") else r["runner"]
        lines.append(f"| {r['workload']} | {runner} | {r['frames']} | {r['wall_s']:.1f} | {first} | "
                     f"{r['steady_fps']:.1f} | {ratio} | {r.get('unswapped') or '-'} | {r['status']} |")
    return "\n".join(lines)
