"""Stand-in ONNX models: the real models' interfaces without their weights.

The real weights (non-commercial insightface models, 174 MB to 554 MB each) cannot be
downloaded in tests or CI, so this module writes small deterministic ONNX graphs with the
EXACT input/output names, shapes, dtypes and value ranges of the real models. They are NOT
real models: they detect, recognise, swap and restore nothing. Every stand-in carries the
metadata ``fusion_ray.stand_in = "true"``, ``fusion_ray.stand_in_of = <name>`` and
``fusion_ray.variant = "light" | "cost_faithful"`` and says so in its doc string.

Interfaces (from insightface / FaceFusion, see DESIGN.md section 3):

- ``arcface_w600k_r50``: ``input.1`` float32 [N, 3, 112, 112] ((x - 127.5) / 127.5, RGB) ->
  ``683`` float32 [N, 512], not L2-normalised (norms about 20). The names ``input.1`` / ``683``
  are what independent ONNX Runtime clients of insightface's w600k_r50.onnx hard-code, and
  ReSwapper's weight-transfer script reads its initializers as ``685``, ``686``, ... (the graph
  numbering continues after ``683``); not checked against the file itself.
- ``inswapper_128``: ``target`` float32 [1, 3, 128, 128] (RGB in [0, 1]) and ``source`` float32
  [1, 512] (the latent) -> ``output`` float32 [1, 3, 128, 128] in [0, 1]. The graph's LAST
  initializer is the 512x512 ``emap`` (clients compute latent = normed embedding @ emap and
  normalise it). The batch dimension is fixed at 1 as in the real export, but nothing in the
  graph bakes it in, so :func:`fusion_ray.models.dynamic.make_batch_dynamic` can batch it.
- ``gfpgan_1.4``: ``input`` float32 [1, 3, 512, 512] in [-1, 1] -> ``output`` float32
  [1, 3, 512, 512] in [-1, 1]; batch-agnostic graph.

Two variants of each:

- ``light`` (default): a few cheap ops, for the test suite and CPU benchmarks. ArcFace:
  8x8 average pooling, per-sample standardisation, random Fourier features (cos(x W + b)), so
  that embeddings of different faces are nearly orthogonal while the same input gives the same
  output and small pixel noise a small change. inswapper: the target, lightly smoothed, plus
  0.25 * tanh of a 16x16 colour pattern computed from the source latent and upsampled, clipped
  to [0, 1]. GFPGAN: a fixed mild depthwise sharpening, clipped to [-1, 1].
- ``cost_faithful``: the light graph plus a branch of Conv layers mirroring the real
  architecture's layer shapes (so its compute per call is that of the real model), whose result
  is added to the output with weight 1e-3 (ArcFace: 1e-2) after a Tanh, so ORT cannot prune it.
  Conv weights are generated inside the graph (Range -> Sin -> Sin, one tensor per distinct
  shape, shared by the layers of that shape), so files stay small; ORT folds them into
  constants when the session is created. Compute is faithful; weight memory is not (it is far
  smaller than the real model's).

Real-model compute, per image, ``REAL_MODEL_GFLOPS`` (FLOPs = 2 x multiply-accumulates):

- arcface_w600k_r50: 6.3 GMACs = 12.6 GFLOPs at 112x112. Source: insightface
  ``recognition/arcface_torch/README.md`` lists "FLOPs 6.3" for r50; its ``flops.py`` computes
  that figure with ptflops, which counts MACs. An analytic count of iresnet50 (conv layers of
  3/4/14/3 IBasicBlocks, 64-512 channels, plus the 25088x512 FC) gives 6.31 GMACs.
- inswapper_128: ~174.6 GMACs = ~349 GFLOPs at 128x128. No public figure found. Derived
  analytically from the architecture that ReSwapper (github.com/somanchiu/ReSwapper,
  ``StyleTransferModel_128.py``; its PR #10 loads the weights of inswapper_128.onnx into it):
  encoder convs 3->128 (7x7) and 128->256 at 128x128, 256->512 and 512->1024 stride 2, six
  style blocks of two 1024->1024 3x3 convs at 32x32 (116 GMACs), and a decoder 1024->512 at
  64x64, 512->256 and 256->128 at 128x128, 128->3 (7x7). Check: that architecture has 138.5 M
  parameters = 554 MB in float32, the size of inswapper_128.onnx.
- gfpgan_1.4: ~197.8 GMACs = ~396 GFLOPs at 512x512. No public figure found. Derived
  analytically from TencentARC/GFPGAN ``gfpgan/archs/gfpganv1_clean_arch.py`` and
  ``stylegan2_clean_arch.py`` with GFPGANer's settings for v1.4 (arch "clean", out_size 512,
  channel_multiplier 2, sft_half, different_w): U-Net encoder/decoder with SFT condition convs
  85.0 GMACs, StyleGAN2 decoder 112.8 GMACs. Check: 86.4 M parameters = 346 MB in float32
  (GFPGANv1.4.pth is 348 MB; the ONNX export, without the unused style MLP, 340 MB).

:func:`graph_gflops` counts Conv/ConvTranspose/MatMul/Gemm FLOPs (2 x MACs) from inferred
shapes; the cost-faithful stand-ins land within a few percent of the figures above.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from fusion_ray.errors import ModelError
from fusion_ray.fsutil import atomic_write_bytes

STANDIN_NAMES: tuple[str, ...] = ("arcface_w600k_r50", "inswapper_128", "gfpgan_1.4")
VARIANTS: tuple[str, ...] = ("light", "cost_faithful")

#: Real-model compute per image in GFLOPs (= 2 x GMACs); sources in the module docstring.
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

_NAME_SALT = {"arcface_w600k_r50": 1, "inswapper_128": 2, "gfpgan_1.4": 3}
_FLOAT = TensorProto.FLOAT


# --------------------------------------------------------------------------------------------
# Graph-building helpers
# --------------------------------------------------------------------------------------------


class _Graph:
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


def _value_info(name: str, shape: Sequence[int | str]) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, _FLOAT, list(shape))


def _finish(name: str, variant: str, seed: int, graph: _Graph,
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
    helper.set_model_props(model, {
        f"{META_PREFIX}stand_in": "true",
        f"{META_PREFIX}stand_in_of": name,
        f"{META_PREFIX}variant": variant,
        f"{META_PREFIX}seed": str(seed),
        f"{META_PREFIX}builder_version": BUILDER_VERSION,
        f"{META_PREFIX}real_model_gflops": f"{REAL_MODEL_GFLOPS[name]:g}",
    })
    onnx.checker.check_model(model)
    return model


# --------------------------------------------------------------------------------------------
# ArcFace w600k_r50
# --------------------------------------------------------------------------------------------

_ARC_POOL = 8             # 112 / 8 = 14x14 grid, 588 features
_ARC_SIGMA = 8.0          # RBF width on standardised features (sqrt(588) ~ 24 = feature norm)
_ARC_AMPLITUDE = 1.375    # norm ~ amplitude * sqrt(256) ~ 22, like real ArcFace outputs


def _build_arcface(variant: str, rng: np.random.Generator) -> tuple[_Graph, list, list, list]:
    g = _Graph("arcface")
    x = "input.1"
    features = (112 // _ARC_POOL) ** 2 * 3
    pooled = g.op("AveragePool", [x], "pool", kernel_shape=[_ARC_POOL, _ARC_POOL],
                  strides=[_ARC_POOL, _ARC_POOL])
    flat = g.op("Flatten", [pooled], "flatten", axis=1)
    mean = g.op("ReduceMean", [flat], "mean", axes=[1], keepdims=1)
    centred = g.op("Sub", [flat, mean], "center")
    var = g.op("ReduceMean", [g.op("Mul", [centred, centred], "square")], "var", axes=[1], keepdims=1)
    std = g.op("Sqrt", [g.op("Add", [var, g.f32("eps", 1e-4)], "var_eps")], "std")
    z = g.op("Div", [centred, std], "standardise")
    proj_w = (rng.standard_normal((features, 512)) / _ARC_SIGMA).astype(np.float32)
    proj_b = rng.uniform(0.0, 2.0 * np.pi, 512).astype(np.float32)
    proj = g.op("Add", [g.op("MatMul", [z, g.const("proj_w", proj_w)], "project"),
                        g.const("proj_b", proj_b)], "project_bias")
    waves = g.op("Cos", [proj], "fourier")
    if variant == "light":
        g.op("Mul", [waves, g.f32("amplitude", _ARC_AMPLITUDE)], "scale", out="683")
    else:
        embedding = g.op("Mul", [waves, g.f32("amplitude", _ARC_AMPLITUDE)], "scale")
        branch = _iresnet50_branch(g, x)
        g.op("Add", [embedding, g.op("Mul", [branch, g.f32("branch_weight", 1e-2)], "branch_scale")],
             "combine", out="683")
    inputs = [_value_info("input.1", ["N", 3, 112, 112])]
    outputs = [_value_info("683", ["N", 512])]
    return g, inputs, outputs, []


def _iresnet50_branch(g: _Graph, x: str) -> str:
    """iresnet50's conv layer shapes at 112x112 (6.30 GMACs), ending in a (N, 512) vector."""
    h = g.gconv(x, 3, 64, 3, hint="stem")
    cin = 64
    for stage, (planes, blocks) in enumerate([(64, 3), (128, 4), (256, 14), (512, 3)]):
        for block in range(blocks):
            stride = 2 if block == 0 else 1
            y = g.gconv(h, cin, planes, 3, hint=f"s{stage}b{block}_conv1")
            y = g.gconv(y, planes, planes, 3, stride=stride, act=False, hint=f"s{stage}b{block}_conv2")
            if block == 0:
                shortcut = g.gconv(h, cin, planes, 1, stride=stride, act=False,
                                   hint=f"s{stage}b{block}_down")
            else:
                shortcut = h
            h = g.op("Tanh", [g.op("Add", [y, shortcut], f"s{stage}b{block}_res")], f"s{stage}b{block}_act")
            cin = planes
    pooled = g.op("GlobalAveragePool", [h], "branch_pool")
    return g.op("Flatten", [pooled], "branch_flat", axis=1)


# --------------------------------------------------------------------------------------------
# inswapper_128
# --------------------------------------------------------------------------------------------

_SMOOTH_3X3 = np.array([[1, 2, 1], [2, 4, 2], [1, 2, 1]], dtype=np.float32) / 16.0


def _emap(rng: np.random.Generator) -> np.ndarray:
    """A seeded near-orthogonal 512x512 matrix (orthogonal factor of a Gaussian, sign-fixed)."""
    q, r = np.linalg.qr(rng.standard_normal((512, 512)))
    q = q * np.sign(np.diag(r))[None, :]
    return np.ascontiguousarray(q, dtype=np.float32)


def _build_inswapper(variant: str, rng: np.random.Generator) -> tuple[_Graph, list, list, list]:
    g = _Graph("inswapper")
    target, source = "target", "source"
    smooth_w = np.broadcast_to(_SMOOTH_3X3, (3, 1, 3, 3)).copy()
    padded = g.op("Pad", [target, g.i64("pads", [0, 0, 1, 1, 0, 0, 1, 1])], "pad", mode="reflect")
    smoothed = g.conv(padded, g.const("smooth_w", smooth_w), group=3, hint="smooth")
    base = g.op("Add", [g.op("Mul", [target, g.f32("keep", 0.8)], "keep_target"),
                        g.op("Mul", [smoothed, g.f32("mix", 0.2)], "mix_smooth")], "base")
    # Identity pattern: (N, 512) latent -> (N, 3, 16, 16) -> 128x128, amplitude 0.25.
    # The projection is emap @ pattern_w, folded by ORT at load: it makes the graph use the emap
    # (ORT warns about initializers that no node reads) without changing the interface.
    pattern_w = (2.0 * rng.standard_normal((512, 3 * 16 * 16))).astype(np.float32)
    projection = g.op("MatMul", ["emap", g.const("pattern_w", pattern_w)], "pattern_w_emap")
    pattern = g.op("MatMul", [source, projection], "pattern")
    grid = g.op("Reshape", [pattern, g.i64("grid_shape", [-1, 3, 16, 16])], "grid")
    upsampled = g.resize(grid, 8.0, "upsample")
    delta = g.op("Mul", [g.op("Tanh", [upsampled], "squash"), g.f32("strength", 0.25)], "delta")
    swapped = g.op("Add", [base, delta], "swap")
    if variant == "cost_faithful":
        branch = _inswapper_branch(g, target, source)
        swapped = g.op("Add", [swapped, g.op("Mul", [branch, g.f32("branch_weight", 1e-3)], "branch_scale")],
                       "combine")
    g.op("Clip", [swapped, g.f32("lo", 0.0), g.f32("hi", 1.0)], "clip", out="output")
    emap = numpy_helper.from_array(_emap(rng), "emap")
    inputs = [_value_info("target", [1, 3, 128, 128]), _value_info("source", [1, 512])]
    outputs = [_value_info("output", [1, 3, 128, 128])]
    return g, inputs, outputs, [emap]  # emap goes LAST among the initializers


def _inswapper_branch(g: _Graph, target: str, source: str) -> str:
    """inswapper_128's conv layer shapes (ReSwapper reconstruction), 174.6 GMACs; (N, 3, 128, 128)."""
    h = g.gconv(target, 3, 128, 7, hint="down1")
    h = g.gconv(h, 128, 256, 3, hint="down2")
    h = g.gconv(h, 256, 512, 3, stride=2, hint="down3")
    h = g.gconv(h, 512, 1024, 3, stride=2, hint="down4")
    style_w = g.generated_weight((512, 1024))
    style = g.op("Reshape", [g.op("MatMul", [source, style_w], "style"), g.i64("style_shape", [-1, 1024, 1, 1])],
                 "style_map")
    for block in range(6):
        y = g.gconv(h, 1024, 1024, 3, hint=f"style{block}_conv1")
        y = g.op("Add", [y, style], f"style{block}_mod")
        y = g.gconv(y, 1024, 1024, 3, act=False, hint=f"style{block}_conv2")
        h = g.op("Tanh", [g.op("Add", [y, h], f"style{block}_res")], f"style{block}_act")
    h = g.gconv(g.resize(h, 2.0, "up1_resize"), 1024, 512, 3, hint="up1")
    h = g.gconv(g.resize(h, 2.0, "up2_resize"), 512, 256, 3, hint="up2")
    h = g.gconv(h, 256, 128, 3, hint="up3")
    return g.gconv(h, 128, 3, 7, hint="to_rgb")


# --------------------------------------------------------------------------------------------
# GFPGAN 1.4
# --------------------------------------------------------------------------------------------

_SHARPEN_3X3 = np.array([[0, -1, 0], [-1, 4, -1], [0, -1, 0]], dtype=np.float32) * 0.15
_SHARPEN_3X3[1, 1] += 1.0  # identity + 0.15 * Laplacian: a mild sharpen, sums to 1


def _build_gfpgan(variant: str, rng: np.random.Generator) -> tuple[_Graph, list, list, list]:
    del rng  # the light GFPGAN stand-in is a fixed filter
    g = _Graph("gfpgan")
    x = "input"
    padded = g.op("Pad", [x, g.i64("pads", [0, 0, 1, 1, 0, 0, 1, 1])], "pad", mode="reflect")
    sharpen_w = np.broadcast_to(_SHARPEN_3X3, (3, 1, 3, 3)).copy()
    restored = g.conv(padded, g.const("sharpen_w", sharpen_w), group=3, hint="sharpen")
    if variant == "cost_faithful":
        branch = _gfpgan_branch(g, x)
        restored = g.op("Add", [restored, g.op("Mul", [branch, g.f32("branch_weight", 1e-3)], "branch_scale")],
                        "combine")
    g.op("Clip", [restored, g.f32("lo", -1.0), g.f32("hi", 1.0)], "clip", out="output")
    inputs = [_value_info("input", [1, 3, 512, 512])]
    outputs = [_value_info("output", [1, 3, 512, 512])]
    return g, inputs, outputs, []


_UNET_CH = {4: 256, 8: 256, 16: 256, 32: 256, 64: 256, 128: 128, 256: 64, 512: 32}
_DECODER_CH = {4: 512, 8: 512, 16: 512, 32: 512, 64: 512, 128: 256, 256: 128, 512: 64}


def _gfpgan_branch(g: _Graph, x: str) -> str:
    """GFPGANv1Clean's conv layer shapes at 512x512 (197.8 GMACs), ending in (N, 3, 512, 512).

    Plain convs stand in for the modulated ones (same MACs); the decoder starts from the
    encoder's 4x4 features instead of a learned constant so the graph stays batch-agnostic.
    """
    feat = g.gconv(x, 3, _UNET_CH[512], 1, hint="body_first")
    skips: list[str] = []
    cin = _UNET_CH[512]
    for res in (512, 256, 128, 64, 32, 16, 8):  # ResBlock down: res -> res / 2
        cout = _UNET_CH[res // 2]
        y = g.gconv(feat, cin, cin, 3, hint=f"down{res}_conv1")
        y = g.gconv(g.resize(y, 0.5, f"down{res}_resize"), cin, cout, 3, act=False, hint=f"down{res}_conv2")
        skip = g.gconv(g.resize(feat, 0.5, f"down{res}_skip_resize"), cin, cout, 1, act=False,
                       hint=f"down{res}_skip")
        feat = g.op("Tanh", [g.op("Add", [y, skip], f"down{res}_res")], f"down{res}_act")
        skips.insert(0, feat)
        cin = cout
    feat = bottom = g.gconv(feat, cin, _UNET_CH[4], 3, hint="final_conv")
    conditions: list[tuple[str, str]] = []
    cin = _UNET_CH[4]
    for i, res in enumerate((8, 16, 32, 64, 128, 256, 512)):  # ResBlock up: res / 2 -> res
        cout = _UNET_CH[res]
        feat = g.op("Add", [feat, skips[i]], f"up{res}_skip_add")
        y = g.gconv(feat, cin, cin, 3, hint=f"up{res}_conv1")
        y = g.gconv(g.resize(y, 2.0, f"up{res}_resize"), cin, cout, 3, act=False, hint=f"up{res}_conv2")
        skip = g.gconv(g.resize(feat, 2.0, f"up{res}_skip_resize"), cin, cout, 1, act=False,
                       hint=f"up{res}_skip")
        feat = g.op("Tanh", [g.op("Add", [y, skip], f"up{res}_res")], f"up{res}_act")
        scale = g.gconv(g.gconv(feat, cout, cout, 3, hint=f"scale{res}_a"), cout, cout, 3, hint=f"scale{res}_b")
        shift = g.gconv(g.gconv(feat, cout, cout, 3, hint=f"shift{res}_a"), cout, cout, 3, hint=f"shift{res}_b")
        conditions.append((scale, shift))
        cin = cout
    # StyleGAN2 decoder with channel-split SFT (the UNet has half the decoder's channels).
    out = g.gconv(bottom, _UNET_CH[4], _DECODER_CH[4], 3, hint="dec_input")
    out = g.gconv(out, _DECODER_CH[4], _DECODER_CH[4], 3, hint="dec_conv4")
    rgb = g.gconv(out, _DECODER_CH[4], 3, 1, act=False, hint="dec_rgb4")
    cin = _DECODER_CH[4]
    for (scale, shift), res in zip(conditions, (8, 16, 32, 64, 128, 256, 512), strict=True):
        cout = _DECODER_CH[res]
        out = g.gconv(g.resize(out, 2.0, f"dec{res}_resize"), cin, cout, 3, hint=f"dec{res}_conv1")
        half = g.i64(f"dec{res}_split", [cout // 2, cout // 2])
        same = g.op("Split", [out, half], f"dec{res}_split", axis=1)
        sft_in = same + "_b"
        g.nodes[-1].output.append(sft_in)
        sft = g.op("Add", [g.op("Mul", [sft_in, scale], f"dec{res}_sft_scale"), shift], f"dec{res}_sft_shift")
        out = g.op("Concat", [same, sft], f"dec{res}_sft", axis=1)
        out = g.gconv(out, cout, cout, 3, hint=f"dec{res}_conv2")
        rgb = g.op("Add", [g.resize(rgb, 2.0, f"dec{res}_rgb_resize"),
                           g.gconv(out, cout, 3, 1, act=False, hint=f"dec{res}_rgb")], f"dec{res}_rgb_add")
        cin = cout
    return g.op("Tanh", [rgb], "branch_out")


_BUILDERS = {
    "arcface_w600k_r50": _build_arcface,
    "inswapper_128": _build_inswapper,
    "gfpgan_1.4": _build_gfpgan,
}


# --------------------------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------------------------


def make_standin(name: str, *, variant: str = "light", seed: int = 0) -> onnx.ModelProto:
    """The stand-in for ``name`` as an in-memory ``ModelProto`` (deterministic for a seed)."""
    if name not in _BUILDERS:
        raise ModelError(f"no stand-in for model {name!r}; expected one of {', '.join(STANDIN_NAMES)}")
    if variant not in VARIANTS:
        raise ModelError(f"unknown stand-in variant {variant!r}; expected one of {', '.join(VARIANTS)}")
    rng = np.random.default_rng([int(seed), _NAME_SALT[name]])
    graph, inputs, outputs, extra = _BUILDERS[name](variant, rng)
    return _finish(name, variant, seed, graph, inputs, outputs, extra)


def build_standin(name: str, path: Path, *, variant: str = "light", seed: int = 0) -> Path:
    """Write the stand-in for ``name`` to ``path`` atomically (temp file + ``os.replace``)."""
    model = make_standin(name, variant=variant, seed=seed)
    path = Path(path)
    atomic_write_bytes(path, model.SerializeToString())
    return path


def build_all_standins(directory: Path, *, variant: str = "light", seed: int = 0) -> dict[str, Path]:
    """Write ``<name>.onnx`` for every name in ``STANDIN_NAMES`` into ``directory``."""
    directory = Path(directory)
    return {name: build_standin(name, directory / f"{name}.onnx", variant=variant, seed=seed)
            for name in STANDIN_NAMES}


def read_stand_in_label(path: Path) -> dict[str, str] | None:
    """The stand-in label (``fusion_ray.*`` metadata, prefix stripped), or None for other models.

    Reads only the model's top-level fields: the graph (hundreds of MB for real models) is
    skipped with a seek, never read. Raises ModelError if the file is not a readable ONNX model.
    """
    metadata = read_model_metadata(path)
    if metadata.get(f"{META_PREFIX}stand_in") != "true":
        return None
    return {key[len(META_PREFIX):]: value for key, value in metadata.items() if key.startswith(META_PREFIX)}


def is_stand_in(path: Path) -> bool:
    """Whether the ONNX file at ``path`` is a fusion_ray stand-in."""
    return read_stand_in_label(path) is not None


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
# File helpers
# --------------------------------------------------------------------------------------------


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
