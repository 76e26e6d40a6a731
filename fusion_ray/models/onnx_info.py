"""Facts read from ONNX models: per-call compute (GFLOPs) and metadata.

:func:`graph_gflops` counts Conv/ConvTranspose/MatMul/Gemm FLOPs (2 x MACs) from inferred
shapes. :func:`read_model_metadata` reads a file's ``metadata_props`` by scanning the
top-level protobuf fields, seeking over the graph (hundreds of MB for real models) instead of
loading it.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import BinaryIO

import onnx

from fusion_ray.errors import ModelError

# --------------------------------------------------------------------------------------------
# FLOP counting
# --------------------------------------------------------------------------------------------


def graph_gflops(model: onnx.ModelProto | Path | str) -> float:
    """Per-call GFLOPs (2 x MACs) of the Conv, ConvTranspose, MatMul and Gemm nodes.

    Shapes come from ``onnx.shape_inference``; symbolic dimensions (the batch) count as 1, so
    for a batch-first model this is the cost per image. Elementwise ops, pooling and resizes
    are not counted (they are a small fraction in these models), nor are nodes computed from
    initializers alone (ORT folds them at load). Raises ModelError when a counted node's
    shapes cannot be inferred.
    """
    if not isinstance(model, onnx.ModelProto):
        model = onnx.load(str(model), load_external_data=False)
    try:
        return _count_gflops(onnx.shape_inference.infer_shapes(model))
    except ModelError:
        # Shapes computed at run time (Shape -> Gather -> Concat -> Reshape) need data
        # propagation, which is slow on large constant subgraphs: only when required.
        return _count_gflops(onnx.shape_inference.infer_shapes(model, data_prop=True))


def _count_gflops(inferred: onnx.ModelProto) -> float:
    shapes: dict[str, tuple[int, ...] | None] = {}
    graph = inferred.graph
    for info in [*graph.input, *graph.value_info, *graph.output]:
        shapes[info.name] = _static_shape(info)
    for init in graph.initializer:
        shapes[init.name] = tuple(int(d) for d in init.dims)

    def shape_of(name: str, node: onnx.NodeProto) -> tuple[int, ...]:
        shape = shapes.get(name)
        if shape is None:
            raise ModelError(f"cannot count FLOPs: shape of {name!r} (input/output of "
                             f"{node.op_type} node {node.name!r}) is unknown")
        return shape

    # Subgraphs fed only by initializers are folded into constants when ORT loads the model
    # (e.g. generated weights): they cost nothing per call and are not counted.
    constant = {init.name for init in graph.initializer}
    macs = 0
    for node in graph.node:
        if all(name in constant or not name for name in node.input):
            constant.update(node.output)
            continue
        if node.op_type == "Conv":
            weight = shape_of(node.input[1], node)
            out = shape_of(node.output[0], node)
            macs += math.prod(out) * math.prod(weight[1:])
        elif node.op_type == "ConvTranspose":
            x = shape_of(node.input[0], node)
            weight = shape_of(node.input[1], node)
            macs += math.prod(x) * math.prod(weight[1:])
        elif node.op_type == "MatMul":
            a = shape_of(node.input[0], node)
            out = shape_of(node.output[0], node)
            macs += math.prod(out) * a[-1]
        elif node.op_type == "Gemm":
            a = shape_of(node.input[0], node)
            out = shape_of(node.output[0], node)
            trans_a = any(attr.name == "transA" and attr.i for attr in node.attribute)
            macs += math.prod(out) * (a[0] if trans_a else a[-1])
    return 2.0 * macs / 1e9


def _static_shape(info: onnx.ValueInfoProto) -> tuple[int, ...] | None:
    tensor = info.type.tensor_type
    if not tensor.HasField("shape"):
        return None
    dims: list[int] = []
    for index, dim in enumerate(tensor.shape.dim):
        if dim.HasField("dim_value"):
            dims.append(int(dim.dim_value))
        elif index == 0:
            dims.append(1)  # symbolic batch: count per image
        else:
            return None
    return tuple(dims)


# --------------------------------------------------------------------------------------------
# Metadata
# --------------------------------------------------------------------------------------------


def read_model_metadata(path: Path) -> dict[str, str]:
    """``metadata_props`` of an ONNX file, read without loading its graph."""
    path = Path(path)
    try:
        with path.open("rb") as handle:
            entries = _scan_metadata_props(handle, os.fstat(handle.fileno()).st_size)
    except OSError as exc:
        raise ModelError(f"cannot read model {path}: {exc}") from exc
    except _WireError as exc:
        raise ModelError(f"{path} is not a readable ONNX model: {exc}") from exc
    metadata: dict[str, str] = {}
    for raw in entries:
        entry = onnx.StringStringEntryProto.FromString(raw)
        metadata[entry.key] = entry.value
    return metadata


class _WireError(Exception):
    """The bytes are not a well-formed protobuf message."""


_METADATA_FIELD = 14  # ModelProto.metadata_props


def _read_varint(handle: BinaryIO) -> int:
    result = 0
    for shift in range(0, 64, 7):
        byte = handle.read(1)
        if not byte:
            raise _WireError("truncated varint")
        result |= (byte[0] & 0x7F) << shift
        if not byte[0] & 0x80:
            return result
    raise _WireError("varint too long")


def _scan_metadata_props(handle: BinaryIO, size: int) -> list[bytes]:
    """Raw ``metadata_props`` entries of a serialized ModelProto, skipping other fields."""
    entries: list[bytes] = []
    seen_graph = False
    while handle.tell() < size:
        key = _read_varint(handle)
        field, wire_type = key >> 3, key & 7
        if field == 0:
            raise _WireError("field number 0")
        if wire_type == 0:
            _read_varint(handle)
        elif wire_type == 1:
            handle.seek(8, os.SEEK_CUR)
        elif wire_type == 5:
            handle.seek(4, os.SEEK_CUR)
        elif wire_type == 2:
            length = _read_varint(handle)
            if handle.tell() + length > size:
                raise _WireError("length runs past the end of the file")
            if field == _METADATA_FIELD:
                entries.append(handle.read(length))
            else:
                seen_graph = seen_graph or field == 7
                handle.seek(length, os.SEEK_CUR)
        else:
            raise _WireError(f"unsupported wire type {wire_type}")
    if handle.tell() != size:
        raise _WireError("trailing bytes")
    if not seen_graph:
        raise _WireError("no graph")
    return entries
