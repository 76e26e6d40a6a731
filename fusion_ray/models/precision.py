"""Which precision each model runs at, and the file that gives it.

``resolve_precision`` turns a requested precision (``auto|fp32|fp16|int8``) into the one that
can run on the session's providers:

- ``auto``: INT8 for the detector on CPU; FP16 on TensorRT (an fp16 engine from the
  fp32 file, when ``runtime.tensorrt_fp16``) and on CUDA (the registry's fp16 export,
  ``inswapper_128_fp16``, when present, else a converted copy, :mod:`fusion_ray.models.fp16`);
  FP32 otherwise.
- ``fp16`` on CPU runs FP32 (ONNX Runtime's CPU kernels gain nothing from fp16).
- ``int8`` (the detector only): the INT8 copy made by :func:`detector_int8`, on any provider.

:func:`detector_int8` finds or builds the cached INT8 detector (see
:mod:`fusion_ray.models.quantize`). Under ``auto`` it only *finds* one (any copy made from this
model for this CPU's weight width): building costs far more than it saves on one image or one
short clip, so a first run detects at FP32 and says how to build it once (``fusion-ray models
quantize``). Asked for by name (``int8``) it builds one when none fits, calibrated on
``models.calibration`` (photos or videos, files or folders), else the ``calibration`` folder of
the models directory, else the command's own inputs (``models.calibration_seed``). Calibration
frames are read into memory and never written anywhere: the cache keeps the model and a hash.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np

from fusion_ray.config import DetectorConfig, ModelsConfig, Precision
from fusion_ray.models import calibration as cal
from fusion_ray.models import quantize
from fusion_ray.models.cpu_int8 import describe as describe_bits
from fusion_ray.models.cpu_int8 import int8_weight_bits
from fusion_ray.models.hashes import sha256_file
from fusion_ray.models.registry import ModelKind, ModelSpec
from fusion_ray.models.store import LocatedModel

log = logging.getLogger(__name__)

RunPrecision = str
"""What ran: ``fp32``, ``fp16`` or ``int8``."""

SEED_FRAMES_PER_VIDEO = 4
SEED_VIDEO_STEP = 30


def resolve_precision(kind: ModelKind, requested: Precision, providers: Sequence[str], *,
                      has_fp16_form: bool, tensorrt_fp16: bool = True) -> RunPrecision:
    """The precision a model of ``kind`` runs at on ``providers`` (most preferred first)."""
    main = providers[0] if providers else "cpu"
    if requested == "auto":
        if main == "cpu":
            return "int8" if kind == "detector" else "fp32"
        if main == "tensorrt":
            return "fp16" if tensorrt_fp16 else "fp32"
        return "fp16" if has_fp16_form else "fp32"
    if requested == "fp16":
        if main == "cpu":
            log.info("precision fp16 on CPU runs fp32 (CPU kernels gain nothing from fp16)")
            return "fp32"
        if main == "cuda" and not has_fp16_form:
            log.warning("precision fp16 on CUDA needs an fp16 export of the model; none is registered, "
                        "running fp32 (TensorRT builds fp16 engines from the fp32 file)")
            return "fp32"
        return "fp16"
    return requested


def calibration_folder(models_dir: Path) -> Path:
    """The default calibration photos: ``<models dir>/calibration``."""
    return models_dir / "calibration"


def calibration_sources(cfg: ModelsConfig, models_dir: Path) -> list[Path]:
    """The calibration photos: the configured files and folders, else the default folder."""
    if not cfg.calibration:
        return cal.calibration_images(calibration_folder(models_dir))
    found: list[Path] = []
    for item in cfg.calibration:
        if item.is_dir():
            found.extend(cal.calibration_images(item))
        elif item.is_file():
            found.append(item)
        else:
            log.warning("calibration photo %s not found; skipped", item)
    return found


def _first_frames(path: Path, max_side: int = 1280) -> list[np.ndarray]:
    """An image, or a few frames from the start of a video (every 30th), as BGR frames shrunk to
    ``max_side`` (read into memory only)."""
    image = cv2.imread(str(path), cv2.IMREAD_COLOR)
    frames: list[np.ndarray] = [image] if image is not None else []
    capture = None if frames else cv2.VideoCapture(str(path))
    try:
        index = 0
        while capture is not None and len(frames) < SEED_FRAMES_PER_VIDEO and capture.isOpened():
            ok, frame = capture.read()
            if not ok:
                break
            if index % SEED_VIDEO_STEP == 0:
                frames.append(frame)
            index += 1
    finally:
        if capture is not None:
            capture.release()
    shrunk = []
    for frame in frames:
        scale = max_side / max(frame.shape[:2])
        if scale < 1.0:
            frame = cv2.resize(frame, None, fx=scale, fy=scale, interpolation=cv2.INTER_AREA)
        shrunk.append(np.ascontiguousarray(frame, np.uint8))
    return shrunk


def calibration_inputs(cfg: ModelsConfig, models_dir: Path) -> list[Path]:
    """What an INT8 build calibrates on: the configured files and folders, else the default folder's
    photos, else the command's own inputs."""
    found = calibration_sources(cfg, models_dir)
    return found or [p for p in cfg.calibration_seed if Path(p).is_file()]


def read_calibration(inputs: Sequence[Path]) -> list[np.ndarray]:
    """The inputs' frames (a video's first frames), in memory."""
    return [frame for path in inputs for frame in _first_frames(Path(path))]


@dataclass(frozen=True)
class Int8Request:
    """What :func:`detector_int8` needs besides the located model."""

    models: ModelsConfig
    models_dir: Path
    detector: DetectorConfig
    recipe: cal.CalibrationRecipe = cal.CalibrationRecipe()


def detector_int8(located: LocatedModel, spec: ModelSpec, request: Int8Request,
                  progress: quantize.Progress | None = None, *, asked: bool = True) -> Path | None:
    """The INT8 copy of the detector at ``located``: cached, or (``asked``: INT8 asked for by name)
    built now, once; None when there is none under ``auto``, no calibration input, or the build
    fails (the caller runs FP32)."""
    source_sha = located.sha256 or sha256_file(located.path)
    setting = request.models.int8_weight_bits
    bits = int8_weight_bits(setting)
    inputs = calibration_inputs(request.models, request.models_dir)
    frames = read_calibration(inputs)
    key = quantize.Int8Key(source_sha, cal.frames_key(frames, request.recipe), bits) if frames else None
    cached = quantize.find_cached(located.path, request.models_dir, key) if key is not None else None
    if cached is None and not asked:
        cached = quantize.find_any_cached(located.path, request.models_dir, source_sha, bits)
    if cached is not None:
        return cached
    if not asked:
        log.warning("%s runs at FP32: no INT8 copy is built yet (building one costs more than it saves on "
                    "a first run); `fusion-ray models quantize --calibration PHOTOS` builds it once, for "
                    "2 to 2.7x faster detection on this CPU", spec.name)
        return None
    if key is None:
        log.warning("no calibration input for the INT8 detector (give --calibration PHOTOS, or photos in "
                    "%s); running %s at FP32", calibration_folder(request.models_dir), spec.name)
        return None
    calibration = list(cal.calibration_frames(frames, request.recipe))
    log.warning("building the INT8 detector from %s once, with %s (calibrating in memory on %d frames made "
                "from %d input frame(s); only the model and a hash are kept)", located.path.name,
                describe_bits(bits, setting), len(calibration), len(frames))

    def to_blob(frame: np.ndarray) -> np.ndarray:
        return cal.frame_blob(frame, spec, request.detector)

    return quantize.build_cached(located.path, request.models_dir, key, calibration, to_blob,
                                 progress=progress or _log_progress(spec.name))


def _log_progress(name: str) -> quantize.Progress:
    """A progress callback that logs one line, when calibration is done."""
    def report(done: int, total: int) -> None:
        if done == total:
            log.warning("INT8 %s: calibrated on %d/%d frames, quantising", name, done, total)
    return report
