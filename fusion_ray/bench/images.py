"""Many images: the dataset job against insightface's own loop over the same files.

``make_image_set`` generates a photo dataset from face photos (each image a random crop,
scale and mirror of one of them, saved as JPEG); ``insightface_loop`` runs
:mod:`fusion_ray.bench.insightface_loop` with a Python that has insightface, on the same model
files as the job; ``image_job`` runs ``fusion-ray job``'s code on the files (Ray already
started, so its wall time excludes Ray's start-up). ``fusion-ray bench images`` runs them
side by side.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

import cv2
import numpy as np

from fusion_ray.config import EngineConfig
from fusion_ray.core.modelset import inspect_models
from fusion_ray.core.steps import required_components
from fusion_ray.errors import InputError
from fusion_ray.imageio import read_image
from fusion_ray.jobs.config import JobConfig
from fusion_ray.runners.job import JobItem, JobReport, run_job


def make_image_set(folder: Path, count: int, photos: Sequence[Path], seed: int = 0) -> list[Path]:
    """``count`` JPEGs in ``folder``: random crops (60 to 100% of a side), scales (0.5x to 1x)
    and mirrors of ``photos``; the same seed gives the same files."""
    rng = np.random.default_rng(seed)
    frames = [read_image(p).frame for p in photos]
    folder.mkdir(parents=True, exist_ok=True)
    files = []
    for n in range(count):
        frame = frames[n % len(frames)]
        h, w = frame.shape[:2]
        ch, cw = int(h * rng.uniform(0.6, 1.0)), int(w * rng.uniform(0.6, 1.0))
        y, x = int(rng.integers(0, h - ch + 1)), int(rng.integers(0, w - cw + 1))
        scale = rng.uniform(0.5, 1.0)
        image = cv2.resize(frame[y:y + ch, x:x + cw], (max(32, int(cw * scale)), max(32, int(ch * scale))),
                           interpolation=cv2.INTER_AREA)
        if rng.random() < 0.5:
            image = image[:, ::-1]
        path = folder / f"img_{n:05d}.jpg"
        cv2.imwrite(str(path), np.ascontiguousarray(image), [cv2.IMWRITE_JPEG_QUALITY, 90])
        files.append(path)
    return files


def insightface_loop(python: str, engine: EngineConfig, source: Path, out_dir: Path, files: Sequence[Path],
                     work_dir: Path) -> dict[str, float]:
    """insightface's loop on the job's own model files (detector, embedder, inswapper); the detector
    at FP32, the only precision insightface's loop runs."""
    fp32 = engine.models.model_copy(update={"precision": {**engine.models.precision, "detector": "fp32"}})
    fp32_engine = engine.model_copy(update={"models": fp32})
    models = inspect_models(fp32_engine, required_components(fp32_engine))
    paths = {name: Path(info.path) for name, info in models.items()}
    detector = next((p for n, p in paths.items() if n.startswith("scrfd")), None)
    embedder, swapper = paths.get("arcface_w600k_r50"), next((p for n, p in paths.items() if n.startswith("inswapper")), None)
    if detector is None or embedder is None or swapper is None:
        raise InputError(f"the insightface loop needs a detector, an embedder and an inswapper; found {sorted(paths)}")
    pack = work_dir / "insightface_root" / "models" / "fr"
    shutil.rmtree(pack, ignore_errors=True)
    pack.mkdir(parents=True)
    for path in (detector, embedder):
        (pack / path.name).symlink_to(path.resolve())
    out_dir.mkdir(parents=True, exist_ok=True)
    script = Path(__file__).with_name("insightface_loop.py")
    proc = subprocess.run([python, str(script), str(pack.parent.parent), str(swapper), str(source), str(out_dir),
                           *map(str, files)], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise InputError(f"the insightface loop failed: {proc.stderr.strip().splitlines()[-1:] or proc.returncode}")
    result: dict[str, float] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def image_job(cfg: JobConfig, source: Path, out_dir: Path, files: Sequence[Path]) -> JobReport:
    """The dataset job over ``files`` (outputs are JPEGs of the same names in ``out_dir``)."""
    items = [JobItem((source,), path, out_dir / path.name) for path in files]
    return run_job(items, cfg, output_root=out_dir, force=True)
