"""FP16 copies of models without a published fp16 export, for CUDA.

ONNX Runtime's own converter (``onnxruntime.transformers.float16``) turns weights and compute
to fp16 and keeps the inputs and outputs float32 (``keep_io_types``), so the wrappers feed and
read the copy exactly as the original. TensorRT needs no copy (it builds fp16 engines from the
fp32 file). The copy is cached in the models directory as ``<stem>.fp16.<source sha256[:16]>.onnx``
with a sha256 record beside it, checked on load (a file that does not match is made again),
and written under a temporary name and renamed into place; a model the converter cannot handle
runs at FP32 with a warning.
"""

from __future__ import annotations

import logging
from pathlib import Path

from fusion_ray.fsutil import atomic_path
from fusion_ray.models.hashes import read_hash_record, sha256_file, write_record
from fusion_ray.models.store import LocatedModel

log = logging.getLogger(__name__)


def fp16_path(located: LocatedModel, source_sha256: str, models_dir: Path) -> Path:
    return models_dir / f"{located.path.stem}.fp16.{source_sha256[:16]}.onnx"


def _valid(path: Path) -> bool:
    record = read_hash_record(path)
    if not path.is_file():
        return False
    if record is None or sha256_file(path) != record.sha256:
        log.warning("fp16 model %s does not match its record (corrupt or unfinished); making it again", path)
        return False
    return True


def fp16_copy(located: LocatedModel, models_dir: Path) -> Path | None:
    """The cached fp16 copy of ``located``, made now if missing or corrupt; None when it cannot be made."""
    dest = fp16_path(located, located.sha256 or sha256_file(located.path), models_dir)
    if _valid(dest):
        return dest
    try:
        import onnx
        from onnxruntime.transformers.float16 import convert_float_to_float16

        log.warning("converting %s to fp16 once (cached as %s)", located.path.name, dest.name)
        converted = convert_float_to_float16(onnx.load(str(located.path)), keep_io_types=True)
        with atomic_path(dest) as tmp:
            onnx.save(converted, str(tmp))
        write_record(dest, "generated", sha256_file(dest))
    except Exception as exc:  # the converter and onnx raise untyped errors; a full disk raises OSError
        for path in (dest, dest.with_name(dest.name + ".sha256")):
            path.unlink(missing_ok=True)
        log.warning("cannot make an fp16 copy of %s (%s: %s); running it at FP32", located.path.name,
                    type(exc).__name__, str(exc).splitlines()[0] if str(exc) else "")
        return None
    return dest
