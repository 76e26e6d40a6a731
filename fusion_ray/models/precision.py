"""Which precision each model runs at, and the file that gives it.

``resolve_precision`` turns a requested precision (``auto|fp32|fp16|int8``) into the one that
can run on the session's providers:

- ``auto``: INT8 for the detector on CPU (issue 19); FP16 on TensorRT (an fp16 engine from the
  fp32 file, when ``runtime.tensorrt_fp16``) and on CUDA (the registry's fp16 export,
  ``inswapper_128_fp16``, when present, else a converted copy, :mod:`fusion_ray.models.fp16`);
  FP32 otherwise.
- ``fp16`` on CPU runs FP32 (ONNX Runtime's CPU kernels gain nothing from fp16).
- ``int8`` (the detector only): the INT8 copy made by :func:`detector_int8`, on any provider.

:func:`detector_int8` finds or builds the cached INT8 detector (see
:mod:`fusion_ray.models.quantize`) from the calibration photos: ``models.calibration``, else
the ``calibration`` folder of the models directory, which an empty folder's first use fills
from ``models.calibration_seed`` (the command's own input). With no photo at all, or when the
build fails, it returns None and the detector runs FP32 with a warning.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np

from fusion_ray.config import DetectorConfig, ModelsConfig, Precision
from fusion_ray.fsutil import atomic_path
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


def _first_frames(path: Path) -> list[np.ndarray]:
    """An image, or a few frames from the start of a video (every 30th), as BGR frames."""
    image = cv2.imread(str(path), cv2.IMREAD_COLOR)
    if image is not None:
        return [image]
    frames: list[np.ndarray] = []
    capture = cv2.VideoCapture(str(path))
    try:
        index = 0
        while len(frames) < SEED_FRAMES_PER_VIDEO and capture.isOpened():
            ok, frame = capture.read()
            if not ok:
                break
            if index % SEED_VIDEO_STEP == 0:
                frames.append(frame)
            index += 1
    finally:
        capture.release()
    return frames


def seed_calibration(folder: Path, inputs: Sequence[Path], max_side: int = 1280) -> list[Path]:
    """Fill an empty calibration folder with the inputs' images (a video's first frames), shrunk
    to ``max_side``, as JPEGs named by content hash; returns the files written."""
    written: list[Path] = []
    for path in inputs:
        if not Path(path).is_file():
            continue
        for frame in _first_frames(Path(path)):
            scale = max_side / max(frame.shape[:2])
            if scale < 1.0:
                frame = cv2.resize(frame, None, fx=scale, fy=scale, interpolation=cv2.INTER_AREA)
            ok, data = cv2.imencode(".jpg", frame, [cv2.IMWRITE_JPEG_QUALITY, 92])
            if not ok:
                continue
            dest = folder / f"seed-{hashlib.sha256(data.tobytes()).hexdigest()[:16]}.jpg"
            try:
                with atomic_path(dest) as tmp:
                    tmp.write_bytes(data.tobytes())
            except OSError as exc:
                log.warning("cannot save calibration frames in %s: %s", folder, exc)
                return written
            written.append(dest)
    if written:
        log.warning("INT8 calibration: saved %d frame(s) of this input in %s (add your own photos there "
                    "for better coverage; the INT8 detector is rebuilt when the folder changes)", len(written), folder)
    return written


@dataclass(frozen=True)
class Int8Request:
    """What :func:`detector_int8` needs besides the located model."""

    models: ModelsConfig
    models_dir: Path
    detector: DetectorConfig
    recipe: cal.CalibrationRecipe = cal.CalibrationRecipe()


def detector_int8(located: LocatedModel, spec: ModelSpec, request: Int8Request,
                  progress: quantize.Progress | None = None, *, asked: bool = True) -> Path | None:
    """The INT8 copy of the detector at ``located``: cached, or built now (once); None when there
    are no calibration photos or the build fails (the caller runs FP32). ``asked``: INT8 was
    asked for by name (no photos is then a warning; under ``auto`` it is logged at info)."""
    photos = calibration_sources(request.models, request.models_dir)
    if not photos and not request.models.calibration and request.models.calibration_seed:
        photos = seed_calibration(calibration_folder(request.models_dir), request.models.calibration_seed)
    if not photos:
        log.log(logging.WARNING if asked else logging.INFO, "no calibration photos for the INT8 detector (put a few face photos in %s, or run "
                    "`fusion-ray models quantize --calibration PHOTOS`); running %s at FP32",
                    calibration_folder(request.models_dir), spec.name)
        return None
    source_sha = located.sha256 or sha256_file(located.path)
    bits = int8_weight_bits(request.models.int8_weight_bits)
    key = quantize.Int8Key(source_sha, cal.calibration_key(photos, request.recipe), bits)
    cached = quantize.find_cached(located.path, request.models_dir, key)
    if cached is not None:
        return cached
    frames = cal.read_photos(photos)
    if not frames:
        log.warning("none of the calibration photos %s can be read; running %s at FP32", photos, spec.name)
        return None
    calibration = list(cal.calibration_frames(frames, request.recipe))
    log.warning("building the INT8 detector from %s once, with %s (calibrating on %d frames made from %d "
                "photo(s)); later runs load it from the cache", located.path.name,
                describe_bits(bits, request.models.int8_weight_bits), len(calibration), len(frames))

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
