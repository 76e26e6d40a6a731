"""Dataset jobs at scale: start-up against item count, resume after ``kill -9``,
object storage against local files, one job against one command per video.

Every job here is a ``fusion-ray job`` process joining one Ray cluster (``address``), as on a
real cluster: its driver's time to the first output frame and peak RSS are its own. The
generated media are small (the driver's work per item is what is measured, not the swap).
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

from fusion_ray.imageio import read_image
from fusion_ray.video import make_test_video

FUSION_RAY = [sys.executable, "-m", "fusion_ray.cli"]
PROGRESS = re.compile(r"frames (\d+)/(\d+)")


@dataclass(frozen=True)
class Run:
    """One command: its wall time, exit code, stderr and report (when it wrote one)."""

    wall_s: float
    code: int
    stderr: str
    report: dict[str, Any]

    @property
    def last_progress(self) -> int:
        """Frames done in the last progress line it printed (0 when none)."""
        found = PROGRESS.findall(self.stderr)
        return int(found[-1][0]) if found else 0


def make_clips(folder: Path, count: int, face: Path, *, frames: int, size_wh: tuple[int, int] = (192, 108),
               fps: Fraction = Fraction(25), gop: int = 25) -> list[Path]:
    """``count`` clips with a moving face and audio (seeds differ: no two are the same)."""
    folder.mkdir(parents=True, exist_ok=True)
    image = read_image(face).frame
    return [make_test_video(folder / f"clip_{n:04d}.mp4", face_image=image, n_frames=frames, fps=fps,
                            size_wh=size_wh, gop=gop, seed=n) for n in range(count)]


def run_command(args: Sequence[str], report: Path | None = None, env: dict[str, str] | None = None,
                kill_when: Callable[[], bool] | None = None, timeout_s: float = 3600) -> Run:
    """Run a ``fusion-ray`` command; with ``kill_when``, ``kill -9`` it once that is true."""
    start = time.perf_counter()
    proc = subprocess.Popen([*FUSION_RAY, *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env=env)
    if kill_when is not None:
        while proc.poll() is None and not kill_when() and time.perf_counter() - start < timeout_s:
            time.sleep(0.05)
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
    _, stderr = proc.communicate(timeout=timeout_s)
    wall = time.perf_counter() - start
    data = json.loads(report.read_text()) if report is not None and report.is_file() and proc.returncode == 0 else {}
    return Run(wall, proc.returncode, stderr, data)


def job_args(*, sources: str, targets: str, root: str, address: str, pipeline: Path, report: Path,
             output_pattern: str = "{target_name}.{target_extension}", engine: Sequence[str] = ()) -> list[str]:
    return ["job", "--source-pattern", sources, "--target-pattern", targets, "--output-pattern", output_pattern,
            "--output-root", root, "--address", address, "--pipeline-config", str(pipeline), "--report", str(report),
            "--no-progress-bars", "--force", *engine]


def pipeline_yaml(path: Path, **settings: Any) -> Path:
    """A pipeline config file with these ``pipeline`` settings (JSON is YAML)."""
    path.write_text(json.dumps({"pipeline": settings}))
    return path
