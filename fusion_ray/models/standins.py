"""Stand-in ONNX models: the real models' interfaces without their weights.

The real weights (non-commercial insightface models, 174 MB to 554 MB each) cannot be
downloaded in tests or CI, so this module writes small deterministic ONNX graphs with the
EXACT input/output names, shapes, dtypes and value ranges of the real models. They are NOT
real models: they detect, recognise, swap and restore nothing. Every stand-in carries the
metadata ``fusion_ray.stand_in = "true"``, ``fusion_ray.stand_in_of = <name>`` and
``fusion_ray.variant = "light" | "cost_faithful"`` and says so in its doc string.

Interfaces (from insightface / FaceFusion):

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

:func:`fusion_ray.models.onnx_info.graph_gflops` counts Conv/ConvTranspose/MatMul/Gemm FLOPs
(2 x MACs) from inferred shapes; the cost-faithful stand-ins land within a few percent of the
figures above. The graphs are written with :class:`fusion_ray.models.onnx_graph.Graph`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

from fusion_ray.errors import ModelError
from fusion_ray.fsutil import atomic_write_bytes
from fusion_ray.models.onnx_graph import BUILDER_VERSION as BUILDER_VERSION
from fusion_ray.models.onnx_graph import IR_VERSION as IR_VERSION
from fusion_ray.models.onnx_graph import META_PREFIX as META_PREFIX
from fusion_ray.models.onnx_graph import OPSET as OPSET
from fusion_ray.models.onnx_graph import REAL_MODEL_FLOP_SOURCES as REAL_MODEL_FLOP_SOURCES
from fusion_ray.models.onnx_graph import REAL_MODEL_GFLOPS as REAL_MODEL_GFLOPS
from fusion_ray.models.onnx_graph import Graph, finish_standin, float_value_info
from fusion_ray.models.onnx_info import is_stand_in_metadata, read_model_metadata

STANDIN_NAMES: tuple[str, ...] = ("arcface_w600k_r50", "inswapper_128", "gfpgan_1.4")
VARIANTS: tuple[str, ...] = ("light", "cost_faithful")

_NAME_SALT = {"arcface_w600k_r50": 1, "inswapper_128": 2, "gfpgan_1.4": 3}

# --------------------------------------------------------------------------------------------
# The model around a graph
# --------------------------------------------------------------------------------------------


# --------------------------------------------------------------------------------------------
# ArcFace w600k_r50
# --------------------------------------------------------------------------------------------

_ARC_POOL = 8             # 112 / 8 = 14x14 grid, 588 features
_ARC_SIGMA = 8.0          # RBF width on standardised features (sqrt(588) ~ 24 = feature norm)
_ARC_AMPLITUDE = 1.375    # norm ~ amplitude * sqrt(256) ~ 22, like real ArcFace outputs


def _build_arcface(variant: str, rng: np.random.Generator) -> tuple[Graph, list, list, list]:
    g = Graph("arcface")
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
    inputs = [float_value_info("input.1", ["N", 3, 112, 112])]
    outputs = [float_value_info("683", ["N", 512])]
    return g, inputs, outputs, []


def _iresnet50_branch(g: Graph, x: str) -> str:
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


def _build_inswapper(variant: str, rng: np.random.Generator) -> tuple[Graph, list, list, list]:
    g = Graph("inswapper")
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
    inputs = [float_value_info("target", [1, 3, 128, 128]), float_value_info("source", [1, 512])]
    outputs = [float_value_info("output", [1, 3, 128, 128])]
    return g, inputs, outputs, [emap]  # emap goes LAST among the initializers


def _inswapper_branch(g: Graph, target: str, source: str) -> str:
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


def _build_gfpgan(variant: str, rng: np.random.Generator) -> tuple[Graph, list, list, list]:
    del rng  # the light GFPGAN stand-in is a fixed filter
    g = Graph("gfpgan")
    x = "input"
    padded = g.op("Pad", [x, g.i64("pads", [0, 0, 1, 1, 0, 0, 1, 1])], "pad", mode="reflect")
    sharpen_w = np.broadcast_to(_SHARPEN_3X3, (3, 1, 3, 3)).copy()
    restored = g.conv(padded, g.const("sharpen_w", sharpen_w), group=3, hint="sharpen")
    if variant == "cost_faithful":
        branch = _gfpgan_branch(g, x)
        restored = g.op("Add", [restored, g.op("Mul", [branch, g.f32("branch_weight", 1e-3)], "branch_scale")],
                        "combine")
    g.op("Clip", [restored, g.f32("lo", -1.0), g.f32("hi", 1.0)], "clip", out="output")
    inputs = [float_value_info("input", [1, 3, 512, 512])]
    outputs = [float_value_info("output", [1, 3, 512, 512])]
    return g, inputs, outputs, []


_UNET_CH = {4: 256, 8: 256, 16: 256, 32: 256, 64: 256, 128: 128, 256: 64, 512: 32}
_DECODER_CH = {4: 512, 8: 512, 16: 512, 32: 512, 64: 512, 128: 256, 256: 128, 512: 64}


def _gfpgan_branch(g: Graph, x: str) -> str:
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
        from fusion_ray.models.standins_quality import make_quality_standin, quality_standin_names

        if name in quality_standin_names():
            return make_quality_standin(name, variant=variant, seed=seed)
        raise ModelError(f"no stand-in for model {name!r}; expected one of "
                         f"{', '.join((*STANDIN_NAMES, *quality_standin_names()))}")
    if variant not in VARIANTS:
        raise ModelError(f"unknown stand-in variant {variant!r}; expected one of {', '.join(VARIANTS)}")
    rng = np.random.default_rng([int(seed), _NAME_SALT[name]])
    graph, inputs, outputs, extra = _BUILDERS[name](variant, rng)
    return finish_standin(name, variant, seed, graph, inputs, outputs, extra)


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
    if not is_stand_in_metadata(metadata):
        return None
    return {key[len(META_PREFIX):]: value for key, value in metadata.items() if key.startswith(META_PREFIX)}


def is_stand_in(path: Path) -> bool:
    """Whether the ONNX file at ``path`` is a fusion_ray stand-in."""
    return read_stand_in_label(path) is not None
