"""Stand-ins for the quality models' ONNX files: 2dfan4, xseg_1/2/3, bisenet_resnet_18/34 here, and the
swappers, embedding converters and enhancers from their registry rows (:mod:`standins_models`).

Like :mod:`fusion_ray.models.standins`: small deterministic graphs with the real models' input
and output names, shapes, layouts and value ranges, labelled ``fusion_ray.stand_in = "true"``.
They are NOT real models: they locate, segment and parse nothing. Light variant only.

- ``2dfan4``: ``input`` float32 [N, 3, 256, 256] (BGR / 255) -> ``landmarks`` [N, 68, 3] (x, y in
  64 px heatmap units, then the peak) and ``heatmaps`` [N, 68, 64, 64] in [0, 1]. The points are
  a fixed synthetic face (:func:`synthetic_face_68`) filling the box as FaceFusion crops it (its
  longest side 195 of 256 px); the heatmaps are Gaussian blobs there whose height is twice the
  crop's mean brightness (clipped to 1): a black crop scores 0. The output names are this
  project's (the real file's are not known here; the wrapper finds the outputs by rank).
- ``xseg_*``: ``input`` float32 [N, 256, 256, 3] (NHWC, BGR / 255) -> ``output`` [N, 256, 256, 1]
  in [0, 1]: a centred ellipse of "face", times 0 where the pixel is near black (so a dark object
  over the face reads as an occlusion).
- ``bisenet_resnet_*``: ``input`` float32 [N, 3, 512, 512] (RGB, ImageNet mean/std) -> ``output``
  [N, 19, 512, 512] logits: a fixed synthetic parse of an arcface_128-aligned face (skin, brows,
  eyes, nose, mouth, lips over background) whatever the input.
"""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import onnx

from fusion_ray.errors import ModelError
from fusion_ray.fsutil import atomic_write_bytes
from fusion_ray.models import capabilities
from fusion_ray.models.onnx_graph import Graph, float_value_info
from fusion_ray.models.registry_swappers import ENHANCER_SPECS, SWAPPER_SPECS
from fusion_ray.models.standins_models import build_from_spec

_FIXED_GRAPHS: tuple[str, ...] = ("2dfan4", "xseg_1", "xseg_2", "xseg_3", "bisenet_resnet_18", "bisenet_resnet_34")
QUALITY_STANDIN_NAMES: tuple[str, ...] = (
    *_FIXED_GRAPHS, *(s.name for s in (*SWAPPER_SPECS, *ENHANCER_SPECS)),
    *(name for capability in capabilities.CAPABILITIES for name in capability.standins))


def quality_standin_names() -> tuple[str, ...]:
    """:data:`QUALITY_STANDIN_NAMES` with the stand-ins of the capabilities as they are now."""
    now = (name for capability in capabilities.CAPABILITIES for name in capability.standins)
    return tuple(dict.fromkeys((*QUALITY_STANDIN_NAMES, *now)))

_EYE = (0.08, 0.03)
_MOUTH_OUTER = (0.18, 0.07)
_MOUTH_INNER = (0.12, 0.025)


def _ellipse_points(center: tuple[float, float], radii: tuple[float, float], degrees: list[float]) -> np.ndarray:
    angles = np.radians(degrees)
    return np.stack([center[0] + radii[0] * np.cos(angles), center[1] - radii[1] * np.sin(angles)], axis=1)


def synthetic_face_68() -> np.ndarray:
    """A (68, 2) face in iBUG 300-W order in unit box coordinates (x right, y down, [0, 1]).

    Jaw 0-16 from the image-left temple round the chin; brows 17-21 and 22-26; nose bridge 27-30
    and base 31-35; eyes 36-41 (image left) and 42-47; outer lips 48-59 from the left corner
    over the top; inner lips 60-67. For stand-ins and hand-made test cases.
    """
    jaw_t = np.pi - np.arange(17) * np.pi / 16
    jaw = np.stack([0.5 + 0.48 * np.cos(jaw_t), 0.35 + 0.6 * np.sin(jaw_t)], axis=1)
    brow_x = np.linspace(0.12, 0.45, 5)
    brow_y = 0.25 - 0.05 * np.sin(np.linspace(0.0, np.pi, 5))
    brows = np.concatenate([np.stack([brow_x, brow_y], 1), np.stack([1.0 - brow_x[::-1], brow_y[::-1]], 1)])
    bridge = np.stack([np.full(4, 0.5), np.linspace(0.35, 0.6, 4)], axis=1)
    base = np.stack([np.linspace(0.40, 0.60, 5), [0.66, 0.67, 0.68, 0.67, 0.66]], axis=1)
    eye_angles = [180.0, 120.0, 60.0, 0.0, 300.0, 240.0]
    eyes = np.concatenate([_ellipse_points((0.30, 0.38), _EYE, eye_angles),
                           _ellipse_points((0.70, 0.38), _EYE, eye_angles)])
    outer = _ellipse_points((0.5, 0.8), _MOUTH_OUTER, [180.0, 150.0, 120.0, 90.0, 60.0, 30.0, 0.0,
                                                       -30.0, -60.0, -90.0, -120.0, -150.0])
    inner = _ellipse_points((0.5, 0.8), _MOUTH_INNER, [180.0, 135.0, 90.0, 45.0, 0.0, -45.0, -90.0, -135.0])
    return np.concatenate([jaw, brows, bridge, base, eyes, outer, inner]).astype(np.float64)


def _build_2dfan4() -> tuple[Graph, list, list]:
    g = Graph("fan")
    x = "input"
    in_heatmap = (64.0 - 48.75) / 2.0 + synthetic_face_68() * 48.75  # box side 195/256 of the crop
    yy, xx = np.mgrid[0:64, 0:64].astype(np.float32)
    blobs = np.exp(-((xx[None] - in_heatmap[:, 0, None, None]) ** 2 + (yy[None] - in_heatmap[:, 1, None, None]) ** 2)
                   / (2 * 1.5**2))
    blobs = (blobs / blobs.max(axis=(1, 2), keepdims=True))[None].astype(np.float32)  # (1, 68, 64, 64), peak 1
    brightness = g.op("ReduceMean", [x], "brightness", axes=[1, 2, 3], keepdims=1)  # (N, 1, 1, 1)
    height = g.op("Clip", [g.op("Mul", [brightness, g.f32("two", 2.0)], "double"), g.f32("lo", 0.0),
                           g.f32("hi", 1.0)], "height")
    g.op("Mul", [g.const("blobs", blobs), height], "heat", out="heatmaps")
    points = np.concatenate([in_heatmap, np.zeros((68, 1))], axis=1)[None].astype(np.float32)  # (1, 68, 3)
    peak = g.op("Reshape", [height, g.i64("peak_shape", [-1, 1, 1])], "peak")  # (N, 1, 1)
    third = g.op("Mul", [peak, g.const("third_only", np.array([[[0.0, 0.0, 1.0]]], np.float32))], "peak_column")  # (N, 1, 3)
    g.op("Add", [g.const("points", points), third], "points_out", out="landmarks")
    inputs = [float_value_info("input", ["N", 3, 256, 256])]
    outputs = [float_value_info("landmarks", ["N", 68, 3]), float_value_info("heatmaps", ["N", 68, 64, 64])]
    return g, inputs, outputs


def _build_xseg() -> tuple[Graph, list, list]:
    g = Graph("xseg")
    x = "input"
    prior = np.zeros((64, 64), np.float32)
    cv2.ellipse(prior, (32, 35), (22, 27), 0.0, 0.0, 360.0, 1.0, thickness=-1)
    soft = cv2.GaussianBlur(prior, (0, 0), 2.0)[None, :, :, None]  # (1, 64, 64, 1)
    prior_full = g.op("Resize", [g.const("prior", soft), "", g.f32("scales", [1.0, 4.0, 4.0, 1.0])], "prior_up",
                      mode="linear")
    lightness = g.op("ReduceMean", [x], "lightness", axes=[3], keepdims=1)  # (N, 256, 256, 1)
    visible = g.op("Clip", [g.op("Mul", [g.op("Sub", [lightness, g.f32("dark", 0.08)], "above_dark"),
                                         g.f32("gain", 10.0)], "ramp"), g.f32("lo", 0.0), g.f32("hi", 1.0)], "visible")
    g.op("Mul", [prior_full, visible], "face", out="output")
    inputs = [float_value_info("input", ["N", 256, 256, 3])]
    outputs = [float_value_info("output", ["N", 256, 256, 1])]
    return g, inputs, outputs


def synthetic_parse_64() -> np.ndarray:
    """(19, 64, 64) logits of a synthetic parse of an arcface_128-aligned face (class ids as BiSeNet's)."""
    labels = np.zeros((64, 64), np.uint8)

    def blob(center: tuple[float, float], axes: tuple[float, float], label: int) -> None:
        cv2.ellipse(labels, (int(center[0] * 64), int(center[1] * 64)), (int(axes[0] * 64), int(axes[1] * 64)),
                    0.0, 0.0, 360.0, label, thickness=-1)

    blob((0.5, 0.55), (0.36, 0.45), 1)  # skin
    for side, (brow, eye) in enumerate(((2, 4), (3, 5))):
        x = 0.36 if side == 0 else 0.64
        blob((x, 0.32), (0.09, 0.02), brow)
        blob((x, 0.40), (0.06, 0.025), eye)
    blob((0.5, 0.56), (0.05, 0.08), 10)  # nose
    blob((0.5, 0.70), (0.11, 0.025), 12)  # upper lip
    blob((0.5, 0.75), (0.11, 0.025), 13)  # lower lip
    blob((0.5, 0.725), (0.09, 0.012), 11)  # mouth
    return (np.eye(19, dtype=np.float32)[labels] * 4.0).transpose(2, 0, 1)


def _build_bisenet() -> tuple[Graph, list, list]:
    g = Graph("bisenet")
    x = "input"
    logits = g.const("parse", synthetic_parse_64()[None])  # (1, 19, 64, 64)
    full = g.op("Resize", [logits, "", g.f32("scales", [1.0, 1.0, 8.0, 8.0])], "parse_up", mode="nearest")
    zero = g.op("Mul", [g.op("ReduceMean", [x], "batch_mean", axes=[1, 2, 3], keepdims=1), g.f32("zero", 0.0)],
                "batch_zero")
    g.op("Add", [full, zero], "logits", out="output")
    inputs = [float_value_info("input", ["N", 3, 512, 512])]
    outputs = [float_value_info("output", ["N", 19, 512, 512])]
    return g, inputs, outputs


def build_quality_standins(directory: Path, *, seed: int = 0) -> dict[str, Path]:
    """Write ``<name>.onnx`` for every name in :data:`QUALITY_STANDIN_NAMES` into ``directory`` (light)."""
    written = {}
    for name in QUALITY_STANDIN_NAMES:
        path = Path(directory) / f"{name}.onnx"
        atomic_write_bytes(path, make_quality_standin(name, seed=seed).SerializeToString())
        written[name] = path
    return written


def make_quality_standin(name: str, *, variant: str = "light", seed: int = 0) -> onnx.ModelProto:
    """The stand-in for one of :data:`QUALITY_STANDIN_NAMES` (light only)."""
    from fusion_ray.models.onnx_graph import finish_standin

    if variant != "light":
        raise ModelError(f"{name}: only a 'light' stand-in exists, got variant {variant!r}")
    built = next((c.standins[name] for c in capabilities.CAPABILITIES if name in c.standins), None)
    if built is not None:  # a capability builds its own
        return built(seed)
    if name == "2dfan4":
        graph, inputs, outputs = _build_2dfan4()
    elif name.startswith("xseg_") and name in QUALITY_STANDIN_NAMES:
        graph, inputs, outputs = _build_xseg()
    elif name.startswith("bisenet_") and name in QUALITY_STANDIN_NAMES:
        graph, inputs, outputs = _build_bisenet()
    elif name in QUALITY_STANDIN_NAMES:
        graph, inputs, outputs = build_from_spec(name, seed)
    else:
        raise ModelError(f"no stand-in for model {name!r}; expected one of {', '.join(QUALITY_STANDIN_NAMES)}")
    return finish_standin(name, variant, seed, graph, inputs, outputs)
