"""A small ONNX graph builder: nodes and initializers with unique, descriptive names.

Used by :mod:`fusion_ray.models.standins` (and a capability's own stand-in) to write the stand-in
models, each finished by :func:`finish_standin` with its label. Besides plain ops it has
a few composite layers (conv, resize) and *generated* weights: pseudo-random tensors computed
inside the graph from a ``Range``, so a model with hundreds of MB of conv weights is a small
file (ONNX Runtime folds them into constants when the session is created).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

#: Real-model compute per image in GFLOPs (= 2 x GMACs); sources in REAL_MODEL_FLOP_SOURCES and fusion_ray.models.standins.
REAL_MODEL_GFLOPS: dict[str, float] = {
    "arcface_w600k_r50": 12.6,
    "inswapper_128": 349.1,
    "gfpgan_1.4": 395.6,
}

#: Where each ``REAL_MODEL_GFLOPS`` figure comes from.
REAL_MODEL_FLOP_SOURCES: dict[str, str] = {
    "arcface_w600k_r50": "insightface arcface_torch README: r50 '6.3' (ptflops MACs) -> 12.6 GFLOPs; "
                         "analytic iresnet50 count 6.31 GMACs",
    "inswapper_128": "analytic count of the ReSwapper StyleTransferModel_128 reconstruction of "
                     "inswapper_128 (174.6 GMACs); its 138.5 M params match the 554 MB file",
    "gfpgan_1.4": "analytic count of GFPGANv1Clean (out 512, channel_multiplier 2) from the "
                  "TencentARC/GFPGAN sources (197.8 GMACs); its 86.4 M params match the ~340 MB file",
}

OPSET = 17
IR_VERSION = 8  # readable by onnxruntime >= 1.10
BUILDER_VERSION = "1"
META_PREFIX = "fusion_ray."

def finish_standin(name: str, variant: str, seed: int, graph: Graph,
            inputs: list[onnx.ValueInfoProto], outputs: list[onnx.ValueInfoProto],
            extra_initializers: Sequence[onnx.TensorProto] = ()) -> onnx.ModelProto:
    description = (f"fusion_ray STAND-IN for {name} ({variant} variant): NOT a real model. "
                   "Same input/output names, shapes, dtypes and value ranges as the real model, "
                   "deterministic made-up weights; for tests and benchmarks only.")
    onnx_graph = helper.make_graph(graph.nodes, f"fusion_ray_standin_{name}", inputs, outputs,
                                   initializer=[*graph.initializers, *extra_initializers],
                                   doc_string=description)
    model = helper.make_model(onnx_graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="fusion_ray.standins", producer_version=BUILDER_VERSION,
                              doc_string=description)
    model.ir_version = IR_VERSION
    props = {
        f"{META_PREFIX}stand_in": "true",
        f"{META_PREFIX}stand_in_of": name,
        f"{META_PREFIX}variant": variant,
        f"{META_PREFIX}seed": str(seed),
        f"{META_PREFIX}builder_version": BUILDER_VERSION,
    }
    if name in REAL_MODEL_GFLOPS:
        props[f"{META_PREFIX}real_model_gflops"] = f"{REAL_MODEL_GFLOPS[name]:g}"
    helper.set_model_props(model, props)
    onnx.checker.check_model(model)
    return model


def float_value_info(name: str, shape: Sequence[int | str]) -> onnx.ValueInfoProto:
    """A float32 graph input/output ``name`` of ``shape`` (strings are symbolic dimensions)."""
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, list(shape))


class Graph:
    """Accumulates nodes and initializers with unique, descriptive names."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self._count = 0
        self._generated: dict[tuple[int, ...], str] = {}

    def _name(self, hint: str) -> str:
        self._count += 1
        return f"{self.prefix}/{hint}_{self._count}"

    def const(self, hint: str, value: np.ndarray) -> str:
        name = self._name(hint)
        self.initializers.append(numpy_helper.from_array(np.array(value, order="C"), name))
        return name

    def f32(self, hint: str, value: float | Sequence[float]) -> str:
        return self.const(hint, np.asarray(value, dtype=np.float32))

    def i64(self, hint: str, value: Sequence[int]) -> str:
        return self.const(hint, np.asarray(value, dtype=np.int64))

    def op(self, op_type: str, inputs: Sequence[str], hint: str | None = None, *,
           out: str | None = None, **attrs: Any) -> str:
        # Node names never start with "Sub"/"Mul": insightface guesses the input normalisation
        # of recognition models from such names in the first nodes.
        name = out if out is not None else self._name(hint or op_type.lower())
        self.nodes.append(helper.make_node(op_type, list(inputs), [name], name=f"{name}:node", **attrs))
        return name

    # A few composite layers -----------------------------------------------------------------

    def conv(self, x: str, weight: str, *, bias: str | None = None, stride: int = 1, pad: int = 0,
             group: int = 1, hint: str = "conv") -> str:
        inputs = [x, weight] if bias is None else [x, weight, bias]
        return self.op("Conv", inputs, hint, strides=[stride, stride], pads=[pad] * 4, group=group)

    def resize(self, x: str, factor: float, hint: str = "resize") -> str:
        scales = self.f32("scales", [1.0, 1.0, factor, factor])
        return self.op("Resize", [x, "", scales], hint, mode="linear")

    def generated_weight(self, shape: Sequence[int]) -> str:
        """A pseudo-random weight computed in the graph (tiny file; ORT folds it at load).

        One tensor per distinct shape, shared by every layer of that shape. Values are
        ``sin(43758.5453 * sin(12.9898 * i + phase)) * sqrt(3 / fan_in)``: roughly uniform
        noise of variance 1.5 / fan_in (not low-rank, unlike a plain sinusoid).
        """
        key = tuple(int(s) for s in shape)
        if key in self._generated:
            return self._generated[key]
        count = math.prod(key)
        if count >= 2**24:
            raise ValueError(f"generated weight {key} too large for float32 indices")
        fan_in = math.prod(key[1:])
        phase = 0.7071 * (len(self._generated) + 1)
        idx = self.op("Range", [self.f32("zero", 0.0), self.f32("count", float(count)),
                                self.f32("one", 1.0)], "w_index")
        arg = self.op("Add", [self.op("Mul", [idx, self.f32("freq", 12.9898)], "w_scaled"),
                              self.f32("phase", phase)], "w_phase")
        noise = self.op("Sin", [self.op("Mul", [self.op("Sin", [arg], "w_sin"),
                                                self.f32("amp", 43758.5453)], "w_amp")], "w_noise")
        scaled = self.op("Mul", [noise, self.f32("gain", math.sqrt(3.0 / fan_in))], "w_gain")
        weight = self.op("Reshape", [scaled, self.i64("w_shape", key)], "weight")
        self._generated[key] = weight
        return weight

    def gconv(self, x: str, cin: int, cout: int, k: int, *, stride: int = 1,
              act: bool = True, hint: str = "conv") -> str:
        """Conv with a generated weight ('same' padding), then Tanh (bounded activations)."""
        y = self.conv(x, self.generated_weight((cout, cin, k, k)), stride=stride, pad=k // 2, hint=hint)
        return self.op("Tanh", [y], f"{hint}_act") if act else y
