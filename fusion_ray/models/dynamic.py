"""Make a model's batch dimension dynamic, and prove that its outputs did not change.

Exports such as inswapper_128 and GFPGAN 1.4 declare batch 1 although most of their graphs
compute per sample. :func:`make_batch_dynamic` rewrites the first dimension of every graph
input and output to the symbolic ``batch``, drops the stale intermediate shapes
(``value_info``; ONNX Runtime infers them again), keeps every initializer in its order (the
inswapper ``emap`` stays the last one), marks the model with the metadata
``fusion_ray.batch_dynamic = "true"``, and then proves the rewrite: it runs the original
model on ``check_batch`` random inputs one at a time and the rewritten model once on all of
them stacked, and requires the outputs to agree within ``atol``. A graph that bakes the batch
size in (a ``Reshape`` to ``[1, -1]``, a reduction over the batch axis, ...) fails the proof;
then nothing is written and :class:`~fusion_ray.errors.ModelError` says so.

The destination appears only once the proof has passed (temp file in the same folder, then
``os.replace``). Models up to the 2 GB protobuf limit are supported (the real inswapper is
554 MB); peak memory is about three times the model size.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

from fusion_ray.errors import ModelError
from fusion_ray.fsutil import atomic_path

BATCH_DIM = "batch"
#: Metadata key set to "true" on rewritten models (provenance; not a stand-in label).
METADATA_KEY = "fusion_ray.batch_dynamic"

_ORT_DTYPES: dict[str, type[np.generic]] = {
    "tensor(float)": np.float32,
    "tensor(float16)": np.float16,
    "tensor(double)": np.float64,
    "tensor(int64)": np.int64,
    "tensor(int32)": np.int32,
    "tensor(int8)": np.int8,
    "tensor(uint8)": np.uint8,
    "tensor(bool)": np.bool_,
}


@dataclass(frozen=True)
class DynamicReport:
    """What :func:`make_batch_dynamic` did.

    ``dst`` is None when nothing was written (the model was already batch-dynamic);
    ``max_abs_diff`` is then NaN because no proof was run.
    """

    src: Path
    dst: Path | None
    inputs: dict[str, tuple[int | str, ...]]
    outputs: dict[str, tuple[int | str, ...]] = field(default_factory=dict)
    max_abs_diff: float = float("nan")
    check_batch: int = 0
    already_dynamic: bool = False


def make_batch_dynamic(src: Path, dst: Path, *, check_batch: int = 4, atol: float = 1e-4,
                       seed: int = 0, threads: int = 2,
                       input_shapes: Mapping[str, Sequence[int]] | None = None) -> DynamicReport:
    """Write ``src`` with a dynamic batch dimension to ``dst`` after proving outputs unchanged.

    ``input_shapes`` gives per-sample shapes (without the batch) for inputs whose other
    dimensions are symbolic, e.g. ``{"input.1": (3, 640, 640)}`` for a dynamic-size detector.
    Random check inputs: images (rank 4) uniform in [0, 1]; rank-2 float inputs unit-norm
    Gaussian rows (like a latent); integer inputs in [0, 10). Raises ModelError when the model
    cannot be read, ``dst`` is ``src``, or the proof fails; then nothing is written to ``dst``
    (a file already there is left as it was).
    """
    src, dst = Path(src), Path(dst)
    if check_batch < 2:
        raise ValueError(f"check_batch must be at least 2, got {check_batch}")
    if dst.resolve() == src.resolve():
        raise ModelError(f"refusing to rewrite {src} in place; give a different destination")
    try:
        model = onnx.load(str(src))
    except Exception as exc:  # onnx raises DecodeError, OSError, ValueError, ...
        raise ModelError(f"cannot read {src} as ONNX: {exc}") from exc

    graph = model.graph
    initializer_names = {init.name for init in graph.initializer}
    inputs = [vi for vi in graph.input if vi.name not in initializer_names]  # IR < 4 lists weights
    outputs = list(graph.output)
    if not inputs or not outputs:
        raise ModelError(f"{src}: the graph has no inputs or no outputs")
    for vi in [*inputs, *outputs]:
        if not vi.type.HasField("tensor_type") or len(vi.type.tensor_type.shape.dim) == 0:
            raise ModelError(f"{src}: {vi.name!r} is not a tensor with a leading batch dimension")

    if all(not _dim_is_fixed(vi.type.tensor_type.shape.dim[0]) for vi in [*inputs, *outputs]):
        return DynamicReport(src=src, dst=None, inputs=_shapes(inputs), outputs=_shapes(outputs),
                             check_batch=check_batch, already_dynamic=True)

    per_call_batch = _original_batch(src, inputs)
    for vi in [*inputs, *outputs]:
        dim = vi.type.tensor_type.shape.dim[0]
        dim.Clear()
        dim.dim_param = BATCH_DIM
    del graph.value_info[:]  # intermediate shapes may carry the old batch; ORT re-infers them
    _set_metadata(model, METADATA_KEY, "true")
    new_inputs, new_outputs = _shapes(inputs), _shapes(outputs)

    dst.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(dst) as tmp:
        tmp.write_bytes(model.SerializeToString())
        del model, graph, inputs, outputs  # free the proto before the sessions load the weights
        max_diff = _prove(src, tmp, per_call_batch, check_batch=check_batch, atol=atol, seed=seed,
                          threads=threads, input_shapes=input_shapes or {})
    return DynamicReport(src=src, dst=dst, inputs=new_inputs, outputs=new_outputs,
                         max_abs_diff=max_diff, check_batch=check_batch, already_dynamic=False)


def _set_metadata(model: onnx.ModelProto, key: str, value: str) -> None:
    for entry in model.metadata_props:
        if entry.key == key:
            entry.value = value
            return
    entry = model.metadata_props.add()
    entry.key, entry.value = key, value


def _dim_is_fixed(dim: onnx.TensorShapeProto.Dimension) -> bool:
    return dim.HasField("dim_value")


def _shapes(infos: Sequence[onnx.ValueInfoProto]) -> dict[str, tuple[int | str, ...]]:
    return {vi.name: tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or "?")
                           for d in vi.type.tensor_type.shape.dim)
            for vi in infos}


def _original_batch(src: Path, inputs: Sequence[onnx.ValueInfoProto]) -> int:
    """The batch the original model takes per call (its fixed leading input dimension)."""
    fixed = {vi.type.tensor_type.shape.dim[0].dim_value for vi in inputs
             if _dim_is_fixed(vi.type.tensor_type.shape.dim[0])}
    if len(fixed) > 1:
        raise ModelError(f"{src}: inputs disagree on the batch size ({sorted(fixed)})")
    return fixed.pop() if fixed else 1


def _session(path: Path, threads: int) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = max(1, threads)
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    return ort.InferenceSession(str(path), sess_options=options, providers=["CPUExecutionProvider"])


def _random_input(rng: np.random.Generator, name: str, ort_type: str, shape: Sequence[int]) -> np.ndarray:
    dtype = _ORT_DTYPES.get(ort_type)
    if dtype is None:
        raise ModelError(f"cannot make check inputs for {name!r} of type {ort_type}")
    if np.issubdtype(dtype, np.floating):
        if len(shape) == 2:
            rows = rng.standard_normal(shape)
            rows /= np.maximum(np.linalg.norm(rows, axis=1, keepdims=True), 1e-12)
            return rows.astype(dtype)
        return rng.uniform(0.0, 1.0, shape).astype(dtype)
    if dtype is np.bool_:
        return rng.integers(0, 2, shape).astype(np.bool_)
    return rng.integers(0, 10, shape).astype(dtype)


def _prove(src: Path, rewritten: Path, per_call_batch: int, *, check_batch: int, atol: float,
           seed: int, threads: int, input_shapes: Mapping[str, Sequence[int]]) -> float:
    """Looped original vs one batched call of the rewrite; the max abs difference."""
    bakes = (f"{src}: this graph bakes the batch size in, so its batch dimension cannot be made "
             "dynamic")
    try:
        original = _session(src, threads)
    except Exception as exc:  # onnxruntime raises untyped errors
        raise ModelError(f"cannot load {src}: {exc}") from exc
    rng = np.random.default_rng(seed)
    calls: list[dict[str, np.ndarray]] = []
    for _ in range(check_batch):
        feeds: dict[str, np.ndarray] = {}
        for arg in original.get_inputs():
            sample_shape = list(input_shapes.get(arg.name, arg.shape[1:]))
            if not all(isinstance(d, int) and d > 0 for d in sample_shape):
                raise ModelError(f"{src}: input {arg.name!r} has symbolic dimensions {arg.shape}; "
                                 "pass input_shapes with its per-sample shape")
            feeds[arg.name] = _random_input(rng, arg.name, arg.type, [per_call_batch, *sample_shape])
        calls.append(feeds)
    output_names = [o.name for o in original.get_outputs()]
    try:
        looped = [original.run(output_names, feeds) for feeds in calls]
    except Exception as exc:
        raise ModelError(f"{src}: the original model failed on random check inputs: {exc}") from exc
    del original
    expected = [np.concatenate([outs[i] for outs in looped], axis=0) for i in range(len(output_names))]
    stacked = {name: np.concatenate([feeds[name] for feeds in calls], axis=0) for name in calls[0]}
    try:
        batched = _session(rewritten, threads).run(output_names, stacked)
    except Exception as exc:
        raise ModelError(f"{bakes}: at batch {check_batch * per_call_batch} it fails ({exc})") from exc
    max_diff = 0.0
    for name, want, got in zip(output_names, expected, batched, strict=True):
        got = np.asarray(got)
        if got.shape != want.shape:
            raise ModelError(f"{bakes}: output {name!r} has shape {got.shape} at batch "
                             f"{check_batch * per_call_batch}, expected {want.shape}")
        if want.size == 0:
            continue
        if np.issubdtype(want.dtype, np.floating):
            nan_want, nan_got = np.isnan(want), np.isnan(got)
            if not np.array_equal(nan_want, nan_got):
                raise ModelError(f"{bakes}: output {name!r} has NaNs in different places batched")
            diff = float(np.max(np.abs(np.where(nan_want, 0, want.astype(np.float64) - got))))
        else:
            diff = float(np.max(np.abs(want.astype(np.float64) - got.astype(np.float64))))
        if not diff <= atol:
            raise ModelError(f"{bakes}: output {name!r} differs by up to {diff:.3g} between one "
                             f"batched call and {check_batch} single calls (atol {atol:g})")
        max_diff = max(max_diff, diff)
    return max_diff
