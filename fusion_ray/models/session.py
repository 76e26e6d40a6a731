"""The one place ONNX Runtime sessions are created.

Providers are chosen by availability (TensorRT with an engine and a timing cache, then CUDA with
the configured cuDNN algorithm search, then CPU) or forced by config; thread counts come from the caller's CPU budget (insightface issue
2899: sessions defaulting to every core of the host ran 185x slower in a 4-CPU container).
Sessions are created inside the process that uses them and are never pickled.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import onnxruntime as ort

from fusion_ray.config import RuntimeConfig
from fusion_ray.errors import ModelError
from fusion_ray.fsutil import user_cache_dir

log = logging.getLogger(__name__)

_ORT_NAMES = {
    "tensorrt": "TensorrtExecutionProvider",
    "cuda": "CUDAExecutionProvider",
    "cpu": "CPUExecutionProvider",
}


@functools.lru_cache(maxsize=1)
def cuda_device_count() -> int:
    """Number of CUDA devices the driver reports (0 when there is no driver or no GPU)."""
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return 0
    count = ctypes.c_int(0)
    if lib.cuInit(0) != 0 or lib.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return 0
    return int(count.value)


@functools.lru_cache(maxsize=1)
def tensorrt_available() -> bool:
    """Whether the TensorRT runtime library can be loaded."""
    for name in ("libnvinfer.so.10", "libnvinfer.so.8", "libnvinfer.so"):
        try:
            ctypes.CDLL(name)
            return True
        except OSError:
            continue
    return False


def resolve_providers(runtime: RuntimeConfig) -> list[str]:
    """Provider short names ("tensorrt", "cuda", "cpu") to use, most preferred first."""
    built = set(ort.get_available_providers())
    if runtime.providers is not None:
        wanted: list[str] = list(runtime.providers)
        missing = [p for p in wanted if _ORT_NAMES[p] not in built]
        if missing:
            raise ModelError(f"execution providers {missing} are not in this onnxruntime build "
                             f"(available: {sorted(built)})")
        if any(p in ("cuda", "tensorrt") for p in wanted) and cuda_device_count() == 0:
            raise ModelError(f"providers {wanted} were asked for, but no CUDA device is visible")
        forced: list[str] = list(wanted)
        return forced if "cpu" in forced else [*forced, "cpu"]
    chosen: list[str] = []
    if cuda_device_count() > 0:
        if _ORT_NAMES["tensorrt"] in built and tensorrt_available():
            chosen.append("tensorrt")
        if _ORT_NAMES["cuda"] in built:
            chosen.append("cuda")
    chosen.append("cpu")
    return chosen


def threads_for_budget(cpu_budget: float | None, runtime: RuntimeConfig) -> int:
    """Intra-op threads: the configured count, else the CPU budget rounded up (at least 1)."""
    if runtime.intra_op_threads is not None:
        return runtime.intra_op_threads
    if cpu_budget is None or cpu_budget <= 0:
        return 1
    return max(1, math.ceil(cpu_budget))


@dataclass(frozen=True)
class SessionInfo:
    """What a session was created with (for logs and benchmark reports)."""

    path: Path
    providers: tuple[str, ...]
    intra_op_threads: int


def tensorrt_cache_dir(model_path: Path, runtime: RuntimeConfig) -> Path:
    """Where TensorRT engines are cached, created if needed.

    The configured directory (a ModelError if it cannot be created); else ``trt_cache`` beside
    the model; else, when that folder cannot be written (read-only shared model storage), the
    per-user cache (``~/.cache/fusion_ray/trt_cache``).
    """
    if runtime.tensorrt_cache_dir is not None:
        try:
            runtime.tensorrt_cache_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ModelError(f"cannot create the TensorRT engine cache {runtime.tensorrt_cache_dir}: {exc}") from exc
        return runtime.tensorrt_cache_dir
    beside = model_path.parent / "trt_cache"
    try:
        beside.mkdir(parents=True, exist_ok=True)
        if os.access(beside, os.W_OK):
            return beside
    except OSError:
        pass
    fallback = user_cache_dir() / "trt_cache"
    log.warning("cannot write the TensorRT engine cache beside the model (%s); using %s", beside, fallback)
    fallback.mkdir(parents=True, exist_ok=True)
    return fallback


def provider_options(providers: list[str], runtime: RuntimeConfig, model_path: Path, *,
                     precision: str = "fp32") -> list[Any]:
    """The ``providers`` argument of an InferenceSession, with the documented options.

    TensorRT: fp16 engines at precision ``fp16`` (``trt_fp16_enable``), INT8 for a QDQ model at
    ``int8`` (``trt_int8_enable``), an engine cache and a timing cache in
    :func:`tensorrt_cache_dir` (``trt_engine_cache_enable/path``,
    ``trt_timing_cache_enable/path``). CUDA: ``cudnn_conv_algo_search`` from the config.
    """
    args: list[Any] = []
    for name in providers:
        if name == "tensorrt":
            cache = str(tensorrt_cache_dir(Path(model_path), runtime))
            args.append((_ORT_NAMES[name], {
                "device_id": runtime.device_id,
                "trt_fp16_enable": precision == "fp16",
                "trt_int8_enable": precision == "int8",
                "trt_engine_cache_enable": True,
                "trt_engine_cache_path": cache,
                "trt_timing_cache_enable": runtime.tensorrt_timing_cache,
                "trt_timing_cache_path": cache,
            }))
        elif name == "cuda":
            args.append((_ORT_NAMES[name], {"device_id": runtime.device_id,
                                            "cudnn_conv_algo_search": runtime.cudnn_conv_algo_search}))
        else:
            args.append(_ORT_NAMES[name])
    return args


def create_session(path: Path, runtime: RuntimeConfig, *, cpu_budget: float | None,
                   precision: str | None = None) -> tuple[ort.InferenceSession, SessionInfo]:
    """Create an inference session for ``path`` with providers and threads from ``runtime``.

    ``precision`` sets the TensorRT engine's precision (None: fp16 when ``runtime.tensorrt_fp16``).
    """
    providers = resolve_providers(runtime)
    threads = threads_for_budget(cpu_budget, runtime)
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3
    if precision is None:
        precision = "fp16" if runtime.tensorrt_fp16 else "fp32"
    provider_args = provider_options(providers, runtime, Path(path), precision=precision)
    try:
        session = ort.InferenceSession(str(path), sess_options=options, providers=provider_args)
    except Exception as exc:  # onnxruntime raises several untyped errors for bad files
        raise ModelError(f"cannot load model {path}: {exc}") from exc
    info = SessionInfo(Path(path), tuple(session.get_providers()), threads)
    log.debug("session %s providers=%s threads=%d", path.name, info.providers, threads)
    return session, info


class NotPicklable:
    """Mixin for model wrappers: they hold live sessions, which must never be pickled."""

    def __reduce__(self) -> Any:
        raise TypeError(f"{type(self).__name__} holds an onnxruntime session and cannot be pickled; "
                        "create it inside the worker that uses it")


def read_metadata(session: ort.InferenceSession) -> dict[str, str]:
    """The model's custom metadata (stand-in models carry their label there)."""
    return dict(session.get_modelmeta().custom_metadata_map)

