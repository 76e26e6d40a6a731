"""INT8 copies of the detector, made with ONNX Runtime's static quantisation and cached.

Recipe (the INT8 detector's trial, and ONNX Runtime's documented path for CNNs on CPU): convert the
graph to opset 13 (the insightface export is opset 11; per-channel QDQ needs the axis
attribute of QuantizeLinear that opset 13 brought), then ``quantize_static`` in QDQ format,
per-channel signed INT8 weights, unsigned INT8 activations, MinMax ranges from calibration
tensors made by :mod:`fusion_ray.models.calibration`, and the nine output heads (the Conv
that makes each score, box and landmark output, and what follows it) left in float. Measured
in BENCHMARKS.md section 13: calibrated on the three photos alone with the heads quantised,
recall was 31% (the trial saw 63 of 71); with the heads in float it was 100% from the
same three photos, so a user's weak calibration set cannot cost recall. The price is speed:
2.3x faster than FP32 per call instead of 2.7x.

Weights are 8-bit on CPUs with VNNI and 7-bit (``reduce_range``) on the others, where 8-bit
products saturate in ONNX Runtime's kernels (:mod:`fusion_ray.models.cpu_int8`); the width is
part of the key and the file name.

Cache: the INT8 file sits in the models directory, beside the source model (for a model named
by an override elsewhere too: that may be shared, read-only storage; when the models directory
cannot be written, in the per-user cache) as ``<stem>.int8.w<bits>.<source sha256[:16]>.<calibration hash[:16]>.onnx``,
with a ``.json`` record holding both full hashes and the INT8 file's own sha256. A new source
model or calibration set gives a new name (so a rebuild); the record is checked on every load
and a file that does not match it (truncated, overwritten) is rebuilt. The model is written
under a temporary name and renamed into place only once it loads and runs, so a failure (a
graph ONNX Runtime cannot quantise, a full disk) leaves no half-written file behind; the caller
then runs FP32 with a warning.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fusion_ray.fsutil import atomic_path, user_cache_dir
from fusion_ray.models.cpu_int8 import WeightBits
from fusion_ray.models.hashes import atomic_write_text, sha256_file

log = logging.getLogger(__name__)

RECIPE_VERSION = "opset13-qdq-perchannel-u8a-minmax-v2"
"""Names the quantisation settings (with the weight width); part of the cache record, so a change rebuilds."""


def recipe(weight_bits: WeightBits) -> str:
    """The recipe string recorded for a build with ``weight_bits``-bit signed weights."""
    return f"{RECIPE_VERSION}-s{weight_bits}w"

Progress = Callable[[int, int], None]
"""``progress(frames_done, frames_total)`` while calibrating."""


@dataclass(frozen=True)
class Int8Key:
    """What an INT8 copy is made from: the source model's sha256, the calibration hash and the
    weight width (8 on VNNI CPUs, 7 elsewhere)."""

    source_sha256: str
    calibration_key: str
    weight_bits: WeightBits = 8

    def file_name(self, source: Path) -> str:
        return (f"{source.stem}.int8.w{self.weight_bits}.{self.source_sha256[:16]}."
                f"{self.calibration_key[:16]}.onnx")


def record_of(path: Path) -> Path:
    """The record beside an INT8 file: ``<file>.json``."""
    return path.with_name(path.name + ".json")


def cache_dirs(models_dir: Path) -> list[Path]:
    """Where an INT8 copy may live: the models directory (beside the model it was made from,
    unless that is a file named by an override, which may sit in shared, read-only storage),
    then, when the models directory cannot be written, the per-user cache."""
    return [models_dir, user_cache_dir() / "int8"]


def check_cached(path: Path, key: Int8Key) -> bool:
    """Whether ``path`` is a complete INT8 copy for ``key``: its record names the same source and
    calibration hashes and the file's sha256 matches the one recorded. A file that exists but
    fails the check is logged (it is then rebuilt)."""
    if not path.is_file():
        return False
    try:
        record = json.loads(record_of(path).read_text())
        if not isinstance(record, dict):  # valid JSON that is not a record ([] or null): rebuilt
            raise ValueError(f"the record is a JSON {type(record).__name__}, not an object")
        ok = (record.get("source_sha256") == key.source_sha256
              and record.get("calibration_key") == key.calibration_key
              and record.get("recipe") == recipe(key.weight_bits)
              and record.get("sha256") == sha256_file(path))
    except (OSError, ValueError) as exc:
        log.warning("INT8 model %s has no readable record (%s); rebuilding it", path, exc)
        return False
    if not ok:
        log.warning("INT8 model %s does not match its record (corrupt or stale); rebuilding it", path)
    return bool(ok)


def find_cached(source: Path, models_dir: Path, key: Int8Key) -> Path | None:
    """A valid cached INT8 copy for ``key``, or None."""
    for folder in cache_dirs(models_dir):
        candidate = folder / key.file_name(source)
        if check_cached(candidate, key):
            return candidate
    return None


def find_any_cached(source: Path, models_dir: Path, source_sha256: str, weight_bits: WeightBits) -> Path | None:
    """The newest valid INT8 copy of ``source`` (this sha256) with ``weight_bits``-bit weights, from
    any calibration set (what ``auto`` takes: a copy the user built once)."""
    found: list[Path] = []
    for folder in cache_dirs(models_dir):
        pattern = f"{source.stem}.int8.w{weight_bits}.{source_sha256[:16]}.*.onnx"
        for candidate in sorted(folder.glob(pattern)) if folder.is_dir() else []:
            try:
                record = json.loads(record_of(candidate).read_text())
            except (OSError, ValueError):
                continue
            if isinstance(record, dict) and check_cached(candidate, Int8Key(source_sha256, str(
                    record.get("calibration_key", "")), weight_bits)):
                found.append(candidate)
    return max(found, key=lambda p: p.stat().st_mtime) if found else None


class _Reader:
    """An ``onnxruntime.quantization.CalibrationDataReader`` over ``items`` made into tensors one
    at a time, with the ``__len__``/``set_range`` that ``CalibStridedMinMax`` uses: ranges are
    then merged after every stride, so only one frame's activations are held at once.

    (``CalibMaxIntermediateOutputs`` is no substitute: in ONNX Runtime 1.31 MinMax drops the
    outputs collected so far when that count is reached, instead of merging their ranges.)
    """

    def __init__(self, input_name: str, items: Sequence[Any], to_blob: Callable[[Any], np.ndarray],
                 progress: Progress | None) -> None:
        self.input_name = input_name
        self.items = items
        self.to_blob = to_blob
        self.progress = progress
        self.position = self.end = 0
        self.done = 0

    def __len__(self) -> int:
        return len(self.items)

    def set_range(self, start_index: int, end_index: int) -> None:
        self.position, self.end = start_index, min(end_index, len(self.items))

    def get_next(self) -> dict[str, np.ndarray] | None:
        if self.position >= self.end:
            return None
        blob = self.to_blob(self.items[self.position])
        self.position += 1
        self.done += 1
        if self.progress is not None:
            self.progress(self.done, len(self.items))
        return {self.input_name: blob}


def output_heads(graph: Any) -> list[str]:
    """Names of the nodes from each graph output back to the Conv that makes it, that Conv
    included: SCRFD's score, box and landmark heads (kept in float)."""
    producer = {out: node for node in graph.node for out in node.output}
    names: list[str] = []
    for output in graph.output:
        node = producer.get(output.name)
        while node is not None:
            names.append(node.name)
            if node.op_type == "Conv" or not node.input:
                break
            node = producer.get(node.input[0])
    return names


def quantize_model(source: Path, dest: Path, items: Sequence[Any], to_blob: Callable[[Any], np.ndarray], *,
                   progress: Progress | None = None, float_heads: bool = True, weight_bits: WeightBits = 8) -> None:
    """Write the INT8 QDQ copy of ``source`` to ``dest`` (atomically), calibrated on
    ``to_blob(item)`` for each of ``items``, with ``weight_bits``-bit signed weights (7:
    ONNX Runtime's ``reduce_range``).

    Raises whatever ONNX Runtime or the file system raises; nothing is left at ``dest`` then.
    """
    import onnx
    import onnxruntime as ort
    from onnx import version_converter
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static

    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".int8-", dir=dest.parent) as work:
        opset13 = Path(work) / "opset13.onnx"
        model = onnx.load(str(source))
        input_name = model.graph.input[0].name
        converted = version_converter.convert_version(model, 13)
        onnx.save(converted, str(opset13))
        exclude = output_heads(converted.graph) if float_heads else []
        quantized = Path(work) / "int8.onnx"
        with _quiet_preprocess_hint():
            quantize_static(
                str(opset13), str(quantized), _Reader(input_name, items, to_blob, progress),
                quant_format=QuantFormat.QDQ, per_channel=True, weight_type=QuantType.QInt8,
                activation_type=QuantType.QUInt8, calibrate_method=CalibrationMethod.MinMax,
                nodes_to_exclude=exclude, reduce_range=weight_bits == 7,
                extra_options={"CalibStridedMinMax": 1, "CalibTensorRangeSymmetric": False})
        _smoke_test(ort, quantized, input_name)
        with atomic_path(dest) as tmp:
            tmp.write_bytes(quantized.read_bytes())


@contextlib.contextmanager
def _quiet_preprocess_hint() -> Iterator[None]:
    """Drop ONNX Runtime's root-logger hint to run its pre-processing (shape inference and graph
    fusions; the opset conversion above is the step this model needs)."""
    def drop(record: logging.LogRecord) -> bool:
        return "pre-processing" not in record.getMessage()

    root = logging.getLogger()
    root.addFilter(drop)
    try:
        yield
    finally:
        root.removeFilter(drop)


def _smoke_test(ort: Any, path: Path, input_name: str) -> None:
    """Load the INT8 model and run it once on a small canvas: every output finite."""
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    outputs = session.run(None, {input_name: np.zeros((1, 3, 64, 64), np.float32)})
    if not all(np.all(np.isfinite(o)) for o in outputs):
        raise ValueError(f"the INT8 model {path} gives non-finite outputs")


def write_record(path: Path, key: Int8Key, frames: int, seconds: float) -> None:
    """The cache record beside an INT8 file (written after the file, atomically)."""
    body = {"source_sha256": key.source_sha256, "calibration_key": key.calibration_key,
            "recipe": recipe(key.weight_bits), "weight_bits": key.weight_bits,
            "sha256": sha256_file(path), "calibration_frames": frames, "build_seconds": round(seconds, 1)}
    atomic_write_text(record_of(path), json.dumps(body, indent=2) + "\n")


def build_cached(source: Path, models_dir: Path, key: Int8Key, items: Sequence[Any],
                 to_blob: Callable[[Any], np.ndarray], *, progress: Progress | None = None) -> Path | None:
    """Build the INT8 copy for ``key`` in the first cache folder that takes it; None (with a
    warning naming the cause) when no folder does or the quantisation fails."""
    start = time.monotonic()
    failures: list[str] = []
    for folder in cache_dirs(models_dir):
        dest = folder / key.file_name(source)
        try:
            with _build_lock(dest):
                if record_of(dest).is_file() and check_cached(dest, key):
                    log.info("INT8 model %s was built by another worker meanwhile", dest.name)
                    return dest
                quantize_model(source, dest, items, to_blob, progress=progress, weight_bits=key.weight_bits)
                write_record(dest, key, len(items), time.monotonic() - start)
        except OSError as exc:  # a read-only folder or a full disk: try the next folder
            failures.append(f"{folder}: {exc}")
            _remove(dest)
            continue
        except Exception as exc:  # onnx / onnxruntime raise untyped errors for graphs they cannot handle
            _remove(dest)
            log.warning("cannot quantise %s to INT8 (%s: %s); running it at FP32", source.name,
                        type(exc).__name__, str(exc).splitlines()[0] if str(exc) else "")
            return None
        log.info("INT8 model written to %s in %.1f s", dest, time.monotonic() - start)
        return dest
    log.warning("cannot write an INT8 copy of %s (%s); running it at FP32", source.name, "; ".join(failures))
    return None


@contextlib.contextmanager
def _build_lock(dest: Path) -> Iterator[None]:
    """An exclusive lock on ``.<dest name>.lock`` beside ``dest`` while building it, so workers
    starting together (a job's actors) build it once and the others load it."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    with open(dest.parent / f".{dest.name}.lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _remove(dest: Path) -> None:
    for path in (dest, record_of(dest)):
        with contextlib.suppress(OSError):
            path.unlink()
