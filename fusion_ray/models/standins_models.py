"""Stand-ins of the optional swappers, embedding converters and enhancers, built from their rows.

NOT real models (see :mod:`fusion_ray.models.standins`): each has the real model's input and
output names, layout, sizes and value ranges as its registry row gives them, with a batch
dimension left dynamic (the real exports' batch is not known here), and made-up weights:

- swappers: ``target`` (N, 3, S, S) normalised as the row says and ``source`` ((N, 512) embedding,
  or an (N, 3, s, s) RGB / 255 crop) -> ``output`` (N, 3, S, S) in the row's ``output_range``:
  the target's pixels, plus a pattern computed from the source (amplitude 10% of the range).
- converters: ``input`` (N, 512) -> ``output`` (N, 512), a fixed near-orthogonal map.
- enhancers: ``input`` (N, 3, S, S) in [-1, 1] (and ``weight`` (1,) float64 where the row has
  one) -> ``output`` (N, 3, S, S) in [-1, 1]: the input, clipped.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

from fusion_ray.models.onnx_graph import Graph, float_value_info
from fusion_ray.models.registry import get_spec
from fusion_ray.models.spec import ModelSpec

_PATTERN = 16


def _to_output_range(g: Graph, x: str, spec: ModelSpec) -> str:
    """Normalised model input -> the same pixels in the output range: lo + pixel / 255 * (hi - lo)."""
    lo, hi = spec.output_range
    std = np.asarray(spec.std, np.float32)
    mean = np.asarray(spec.mean, np.float32)
    scale = (std / 255.0 * (hi - lo)).reshape(1, 3, 1, 1)
    offset = (lo + mean / 255.0 * (hi - lo)).reshape(1, 3, 1, 1)
    return g.op("Add", [g.op("Mul", [x, g.const("to_range_scale", scale)], "scaled"),
                        g.const("to_range_offset", offset.astype(np.float32))], "in_range")


def _swapper(spec: ModelSpec, rng: np.random.Generator) -> tuple[Graph, list, list]:
    g = Graph("swapper")
    size = spec.crop_size
    lo, hi = spec.output_range
    base = _to_output_range(g, "target", spec)
    if spec.source_form == "crop":
        colour = g.op("ReduceMean", ["source"], "source_colour", axes=[2, 3], keepdims=1)  # (N, 3, 1, 1)
        pattern = g.op("Sub", [colour, g.f32("half", 0.5)], "centred")
        source_info = float_value_info("source", ["N", 3, spec.source_size, spec.source_size])
    else:
        weights = (2.0 * rng.standard_normal((512, 3 * _PATTERN * _PATTERN))).astype(np.float32)
        grid = g.op("Reshape", [g.op("MatMul", ["source", g.const("pattern_w", weights)], "pattern"),
                                g.i64("grid_shape", [-1, 3, _PATTERN, _PATTERN])], "grid")
        pattern = g.resize(grid, size / _PATTERN, "upsample")
        source_info = float_value_info("source", ["N", 512])
    delta = g.op("Mul", [g.op("Tanh", [pattern], "squash"), g.f32("strength", 0.1 * (hi - lo))], "delta")
    g.op("Clip", [g.op("Add", [base, delta], "swap"), g.f32("lo", lo), g.f32("hi", hi)], "clip", out="output")
    inputs = [float_value_info("target", ["N", 3, size, size]), source_info]
    return g, inputs, [float_value_info("output", ["N", 3, size, size])]


def _converter(rng: np.random.Generator) -> tuple[Graph, list, list]:
    g = Graph("converter")
    q, r = np.linalg.qr(rng.standard_normal((512, 512)))
    g.op("MatMul", ["input", g.const("map", (q * np.sign(np.diag(r))[None, :]).astype(np.float32))], "map",
         out="output")
    return g, [float_value_info("input", ["N", 512])], [float_value_info("output", ["N", 512])]


def _enhancer(spec: ModelSpec) -> tuple[Graph, list, list]:
    g = Graph("enhancer")
    size = spec.crop_size
    x = "input"
    inputs = [float_value_info("input", ["N", 3, size, size])]
    if spec.weight_input:
        inputs.append(helper.make_tensor_value_info("weight", TensorProto.DOUBLE, [1]))
        # The weight moves the output (0.5: none): a test can see which weight a call was given.
        shift = g.op("Mul", [g.op("Sub", [g.op("Cast", ["weight"], "weight_f32", to=TensorProto.FLOAT),
                                          g.f32("weight_half", 0.5)], "weight_centred"), g.f32("weight_gain", 0.5)],
                     "weight_shift")
        x = g.op("Add", [x, shift], "with_weight")
    g.op("Clip", [x, g.f32("lo", -1.0), g.f32("hi", 1.0)], "clip", out="output")
    return g, inputs, [float_value_info("output", ["N", 3, size, size])]


def build_from_spec(name: str, seed: int) -> tuple[Graph, list[onnx.ValueInfoProto], list[onnx.ValueInfoProto]]:
    """The stand-in graph of a swapper, converter or enhancer row."""
    spec = get_spec(name)
    rng = np.random.default_rng([int(seed), sum(name.encode())])
    if spec.kind == "swapper":
        return _swapper(spec, rng)
    if spec.kind == "converter":
        return _converter(rng)
    if spec.kind == "enhancer":
        return _enhancer(spec)
    raise ValueError(f"{name}: no stand-in builder for kind {spec.kind!r}")
