"""The registry of standard face-swap models: metadata as data, read by the wrappers.

Every fact a wrapper needs about a model file lives here, once: file name, download URL and
its CRC32 ``.hash`` URL, the alignment template and crop size, the input normalisation and
colour order, and the licence. Wrappers read a :class:`ModelSpec`; they never branch on a
model's name or guess its type from its input shapes.

Normalisation is in pixel units: ``model_input = (pixel - mean) / std`` with ``pixel`` in
``[0, 255]`` in ``color_order`` channel order.

Sources: FaceFusion's model sets (``create_static_model_set``) and insightface's model zoo;
the files are release assets of ``github.com/facefusion/facefusion-assets``, tag
``models-3.0.0``, each with a ``<stem>.hash`` file beside it holding the file's CRC32 as
8 lower-case hex digits.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from fusion_ray.errors import ModelError
from fusion_ray.models.registry_quality import QUALITY_SPECS
from fusion_ray.models.registry_swappers import ENHANCER_SPECS, SWAPPER_SPECS
from fusion_ray.models.spec import TEMPLATE_NAMES as TEMPLATE_NAMES
from fusion_ray.models.spec import ColorOrder as ColorOrder
from fusion_ray.models.spec import ModelKind as ModelKind
from fusion_ray.models.spec import ModelSpec as ModelSpec
from fusion_ray.models.spec import TemplateName as TemplateName

ASSETS_RELEASE_URL = "https://github.com/facefusion/facefusion-assets/releases/download/models-3.0.0"
"""Base URL of the release that hosts the model files and their ``.hash`` files."""

INSIGHTFACE_LICENCE = "insightface: non-commercial research purposes only"
INSIGHTFACE_LICENCE_URL = "https://github.com/deepinsight/insightface#license"
GFPGAN_LICENCE = "Apache-2.0"
GFPGAN_LICENCE_URL = "https://github.com/TencentARC/GFPGAN/blob/master/LICENSE"


def _asset(file_name: str) -> str:
    return f"{ASSETS_RELEASE_URL}/{file_name}"


_SPECS: tuple[ModelSpec, ...] = (
    ModelSpec(
        name="scrfd_2.5g",
        file_name="scrfd_2.5g.onnx",
        url=_asset("scrfd_2.5g.onnx"),
        hash_url=_asset("scrfd_2.5g.hash"),
        kind="detector",
        template=None,
        crop_size=640,
        mean=(127.5, 127.5, 127.5),
        std=(128.0, 128.0, 128.0),
        color_order="RGB",
        licence=INSIGHTFACE_LICENCE,
        licence_url=INSIGHTFACE_LICENCE_URL,
        approx_size_mb=3.3,
        description=(
            "SCRFD 2.5G face detector with 5 landmarks (insightface); 1x3xHxW input, H and W "
            "multiples of 32, 9 outputs (scores, boxes, landmarks for strides 8/16/32). "
            "RGB as insightface feeds it (FaceFusion feeds BGR)."
        ),
    ),
    ModelSpec(
        name="arcface_w600k_r50",
        file_name="arcface_w600k_r50.onnx",
        url=_asset("arcface_w600k_r50.onnx"),
        hash_url=_asset("arcface_w600k_r50.hash"),
        kind="embedder",
        template="arcface_112_v2",
        crop_size=112,
        mean=(127.5, 127.5, 127.5),
        std=(127.5, 127.5, 127.5),
        color_order="RGB",
        licence=INSIGHTFACE_LICENCE,
        licence_url=INSIGHTFACE_LICENCE_URL,
        approx_size_mb=174.0,
        description=(
            "ArcFace ResNet-50 trained on WebFace600K (insightface buffalo_l); Nx3x112x112 in, "
            "Nx512 identity embedding out, L2-normalise it."
        ),
    ),
    ModelSpec(
        name="inswapper_128",
        file_name="inswapper_128.onnx",
        url=_asset("inswapper_128.onnx"),
        hash_url=_asset("inswapper_128.hash"),
        kind="swapper",
        template="arcface_128",
        crop_size=128,
        mean=(0.0, 0.0, 0.0),
        std=(255.0, 255.0, 255.0),
        color_order="RGB",
        licence=INSIGHTFACE_LICENCE + " (inswapper licensing: contact@insightface.ai)",
        licence_url=INSIGHTFACE_LICENCE_URL,
        approx_size_mb=554.0,
        source_form="inswapper_latent",
        description=(
            "insightface inswapper, fp32; inputs 'target' 1x3x128x128 and 'source' 1x512 "
            "latent (normed embedding @ emap, the graph's last 512x512 initializer, then "
            "normalised); output RGB in [0, 1]."
        ),
        fp16_form="inswapper_128_fp16",
    ),
    ModelSpec(
        name="inswapper_128_fp16",
        file_name="inswapper_128_fp16.onnx",
        url=_asset("inswapper_128_fp16.onnx"),
        hash_url=_asset("inswapper_128_fp16.hash"),
        kind="swapper",
        template="arcface_128",
        crop_size=128,
        mean=(0.0, 0.0, 0.0),
        std=(255.0, 255.0, 255.0),
        color_order="RGB",
        licence=INSIGHTFACE_LICENCE + " (inswapper licensing: contact@insightface.ai)",
        licence_url=INSIGHTFACE_LICENCE_URL,
        approx_size_mb=277.0,
        source_form="inswapper_latent",
        description="inswapper_128 with fp16 weights: half the size, same inputs and outputs.",
    ),
    ModelSpec(
        name="gfpgan_1.4",
        file_name="gfpgan_1.4.onnx",
        url=_asset("gfpgan_1.4.onnx"),
        hash_url=_asset("gfpgan_1.4.hash"),
        kind="enhancer",
        template="ffhq_512",
        crop_size=512,
        mean=(127.5, 127.5, 127.5),
        std=(127.5, 127.5, 127.5),
        color_order="RGB",
        licence=GFPGAN_LICENCE,
        licence_url=GFPGAN_LICENCE_URL,
        approx_size_mb=340.0,
        output_range=(-1.0, 1.0),
        description=(
            "GFPGAN v1.4 face restoration (TencentARC); 'input' 1x3x512x512, 'output' same in "
            "[-1, 1] (clip, then back to pixels); blend with the original crop."
        ),
    ),
)

_OPTIONAL: tuple[ModelSpec, ...] = (*QUALITY_SPECS, *SWAPPER_SPECS, *ENHANCER_SPECS)
_BY_NAME: Mapping[str, ModelSpec] = MappingProxyType({spec.name: spec for spec in (*_SPECS, *_OPTIONAL)})


def all_specs() -> tuple[ModelSpec, ...]:
    """Every registered model, in a stable order (detector, embedder, swappers, enhancer)."""
    return _SPECS


def model_names() -> tuple[str, ...]:
    """The registered model names, in the order of :func:`all_specs`."""
    return tuple(spec.name for spec in _SPECS)


def optional_specs() -> tuple[ModelSpec, ...]:
    """The models outside the standard set: issue 18's landmarkers, occluders, parsers, swappers,
    embedding converters and enhancers."""
    return _OPTIONAL


def get_spec(name: str) -> ModelSpec:
    """The spec registered under ``name``; :class:`ModelError` naming the known models if none."""
    try:
        return _BY_NAME[name]
    except KeyError:
        known = ", ".join(_BY_NAME)
        raise ModelError(f"unknown model {name!r}; known models: {known}") from None
