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
from typing import Any

from fusion_ray.errors import ConfigError, ModelError
from fusion_ray.models import capabilities
from fusion_ray.models.registry_quality import QUALITY_SPECS
from fusion_ray.models.registry_rows import ASSETS, facefusion_row
from fusion_ray.models.registry_swappers import ENHANCER_SPECS, SWAPPER_SPECS
from fusion_ray.models.spec import TEMPLATE_NAMES as TEMPLATE_NAMES
from fusion_ray.models.spec import ColorOrder as ColorOrder
from fusion_ray.models.spec import ModelKind as ModelKind
from fusion_ray.models.spec import ModelSpec as ModelSpec
from fusion_ray.models.spec import TemplateName as TemplateName

RELEASE = "models-3.0.0"
ASSETS_RELEASE_URL = f"{ASSETS}/{RELEASE}"
"""Base URL of the release that hosts the model files and their ``.hash`` files."""

INSIGHTFACE_LICENCE = "insightface: non-commercial research purposes only"
INSIGHTFACE_LICENCE_URL = "https://github.com/deepinsight/insightface#license"
GFPGAN_LICENCE = "Apache-2.0"
GFPGAN_LICENCE_URL = "https://github.com/TencentARC/GFPGAN/blob/master/LICENSE"
INSIGHTFACE = (INSIGHTFACE_LICENCE, INSIGHTFACE_LICENCE_URL)
INSWAPPER = (INSIGHTFACE_LICENCE + " (inswapper licensing: contact@insightface.ai)", INSIGHTFACE_LICENCE_URL)
HALF = 127.5


def _standard(name: str, kind: ModelKind, template: TemplateName | None, size: int, mean: float, std: float,
              licence: tuple[str, str], mb: float, description: str, **facts: Any) -> ModelSpec:
    return facefusion_row(name, RELEASE, kind, size, mean, std, licence, mb, description, template=template,
                          default_set=True, **facts)


_SPECS: tuple[ModelSpec, ...] = (
    _standard(
        "scrfd_2.5g", "detector", None, 640, HALF, 128.0, INSIGHTFACE, 3.3,
        "SCRFD 2.5G face detector with 5 landmarks (insightface); 1x3xHxW input, H and W "
        "multiples of 32, 9 outputs (scores, boxes, landmarks for strides 8/16/32). "
        "RGB as insightface feeds it (FaceFusion feeds BGR)."),
    _standard(
        "arcface_w600k_r50", "embedder", "arcface_112_v2", 112, HALF, HALF, INSIGHTFACE, 174.0,
        "ArcFace ResNet-50 trained on WebFace600K (insightface buffalo_l); Nx3x112x112 in, "
        "Nx512 identity embedding out, L2-normalise it."),
    _standard(
        "inswapper_128", "swapper", "arcface_128", 128, 0.0, 255.0, INSWAPPER, 554.0,
        "insightface inswapper, fp32; inputs 'target' 1x3x128x128 and 'source' 1x512 "
        "latent (normed embedding @ emap, the graph's last 512x512 initializer, then "
        "normalised); output RGB in [0, 1].",
        source_form="inswapper_latent", fp16_form="inswapper_128_fp16"),
    _standard(
        "inswapper_128_fp16", "swapper", "arcface_128", 128, 0.0, 255.0, INSWAPPER, 277.0,
        "inswapper_128 with fp16 weights: half the size, same inputs and outputs.",
        source_form="inswapper_latent"),
    _standard(
        "gfpgan_1.4", "enhancer", "ffhq_512", 512, HALF, HALF, (GFPGAN_LICENCE, GFPGAN_LICENCE_URL), 340.0,
        "GFPGAN v1.4 face restoration (TencentARC); 'input' 1x3x512x512, 'output' same in "
        "[-1, 1] (clip, then back to pixels); blend with the original crop.",
        output_range=(-1.0, 1.0)),
)

_OPTIONAL: tuple[ModelSpec, ...] = (*QUALITY_SPECS, *SWAPPER_SPECS, *ENHANCER_SPECS)
_BY_NAME: Mapping[str, ModelSpec] = MappingProxyType({spec.name: spec for spec in (*_SPECS, *_OPTIONAL)})


def _by_name() -> Mapping[str, ModelSpec]:
    """Every row by name: the ones here, then the capabilities' (read as they are now)."""
    by_name = dict(_BY_NAME)
    for spec in capabilities.capability_specs():
        by_name.setdefault(spec.name, spec)
    return by_name


def all_specs() -> tuple[ModelSpec, ...]:
    """Every registered model, in a stable order (detector, embedder, swappers, enhancer)."""
    return _SPECS


def optional_specs() -> tuple[ModelSpec, ...]:
    """The models outside the standard set: the landmarkers, occluders, parsers, swappers,
    embedding converters and enhancers, and the rows of the capabilities."""
    return (*_OPTIONAL, *capabilities.capability_specs())


def get_spec(name: str) -> ModelSpec:
    """The spec registered under ``name``; :class:`ModelError` naming the known models if none."""
    by_name = _by_name()
    try:
        return by_name[name]
    except KeyError:
        known = ", ".join(by_name)
        raise ModelError(f"unknown model {name!r}; known models: {known}") from None


def names_of_kind(kind: ModelKind) -> tuple[str, ...]:
    """Every registered model of ``kind`` (e.g. the swappers ``--face-swapper-model`` offers), the
    standard set's first."""
    return tuple(name for name, spec in _by_name().items() if spec.kind == kind)


def chosen_spec(name: str, kind: ModelKind, option: str) -> ModelSpec:
    """The row of ``name``, a model of ``kind`` chosen by ``option`` (e.g. ``--face-swapper-model``);
    :class:`ConfigError` naming the valid names when it is not one."""
    spec = _by_name().get(name)
    if spec is None or spec.kind != kind:
        raise ConfigError(f"{option} {name!r}: not a registered {kind}; expected one of "
                          f"{', '.join(names_of_kind(kind))}")
    return spec
