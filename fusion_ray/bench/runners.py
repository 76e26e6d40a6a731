"""The local runner against the Ray runner, side by side, as a user runs them (issue 17).

Each run is a ``fusion-ray job --runner local|ray`` process on the same files, the real SCRFD
detector and the classic swapper, with the default engine settings (tracking on): its wall time
(the process, imports and Ray's start-up included), the time to its first output frame and its
steady rate (frames after the first over the time after it) come from the job report. The
workloads are a generated multi-face 640x360 clip with audio (the shared group photo sweeping
over a background: three faces a frame), clips of it repeated (the crossover), and photo sets
made from the shared photos (1 to 3 faces each).
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

from fusion_ray.bench.images import make_image_set
from fusion_ray.bench.jobs import run_command
from fusion_ray.imageio import read_image
from fusion_ray.video import make_test_video

RUNNER_NAMES = ("local", "ray")


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


def make_group_clips(folder: Path, count: int, photo: Path, *, frames: int) -> list[Path]:
    """``count`` 640x360 25 fps clips with audio of ``photo`` (a group photo) sweeping over a background."""
    folder.mkdir(parents=True, exist_ok=True)
    image = read_image(photo).frame
    return [make_test_video(folder / f"clip_{n:03d}.mp4", face_image=image, n_frames=frames, fps=Fraction(25),
                            size_wh=(640, 360), gop=25, seed=n) for n in range(count)]


def run_one(workload: str, runner: str, *, source: Path, targets: str, scrfd: Path, work: Path) -> RunnerResult:
    """One ``fusion-ray job`` over ``targets`` (a glob) with ``runner``."""
    out = work / f"out_{workload}_{runner}"
    out.mkdir(parents=True, exist_ok=True)
    report = work / f"report_{workload}_{runner}.json"
    args = ["job", "--runner", runner, "--source-pattern", str(source), "--target-pattern", targets,
            "--output-pattern", "{target_name}.{target_extension}", "--output-root", str(out), "--report",
            str(report), "--swapper", "classic", "--model", f"scrfd_2.5g={scrfd}", "--providers", "cpu",
            "--no-progress-bars", "--force"]
    run = run_command(args, report)
    data: dict[str, Any] = run.report
    frames = int(data.get("frames", 0))
    first = data.get("driver", {}).get("first_frame_s")
    wall = float(data.get("wall_s", 0.0))
    steady = (frames - 1) / (wall - first) if first is not None and frames > 1 and wall > first else 0.0
    counts = data.get("counts", {})
    status = "ok" if run.code == 0 and set(counts) == {"done"} else f"exit {run.code}: {run.stderr[-300:]}"
    return RunnerResult(workload, runner, frames, run.wall_s, first, steady, status)


def bench_runners(*, photos: Sequence[Path], group_photo: Path, scrfd: Path, clip_frames: int = 275,
                  clip_counts: Sequence[int] = (1,), image_counts: Sequence[int] = (50,),
                  runners: Sequence[str] = RUNNER_NAMES, work_dir: Path | None = None) -> list[dict[str, Any]]:
    """Every workload through every runner, one after the other (same files, same settings)."""
    with tempfile.TemporaryDirectory(prefix="fusion_ray_bench_runners.") as tmp:
        work = work_dir or Path(tmp)
        results = []
        for count in clip_counts:
            folder = work / f"clips_{count}"
            make_group_clips(folder, count, group_photo, frames=clip_frames)
            for runner in runners:
                results.append(run_one(f"{count} clip(s) x {clip_frames} frames", runner, source=photos[0],
                                       targets=str(folder / "*.mp4"), scrfd=scrfd, work=work))
        for count in image_counts:
            folder = work / f"images_{count}"
            make_image_set(folder, count, photos)
            for runner in runners:
                results.append(run_one(f"{count} photos", runner, source=photos[0], targets=str(folder / "*.jpg"),
                                       scrfd=scrfd, work=work))
        return [asdict(r) for r in results]


def render_markdown(results: Sequence[dict[str, Any]]) -> str:
    lines = ["| workload | runner | frames | wall s | first frame s | steady frames/s | status |",
             "|---|---|---:|---:|---:|---:|---|"]
    for r in results:
        first = "-" if r["first_frame_s"] is None else f"{r['first_frame_s']:.2f}"
        lines.append(f"| {r['workload']} | {r['runner']} | {r['frames']} | {r['wall_s']:.1f} | {first} | "
                     f"{r['steady_fps']:.1f} | {r['status']} |")
    return "\n".join(lines)
