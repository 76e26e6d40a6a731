"""The one builder of registry rows for the ONNX files FaceFusion hosts.

Every such file is a release asset of ``github.com/facefusion/facefusion-assets`` named
``<name>.onnx``, with its CRC32 in ``<name>.hash`` beside it; a row differs from the next only
in the facts a wrapper reads. The standard set (``registry.py``), the quality models
(``registry_quality.py``) and the swappers, converters and enhancers (``registry_swappers.py``)
all build their rows here. Normalisation is in pixel units (see :mod:`fusion_ray.models.spec`):
a scalar ``mean`` / ``std`` stands for the same value on the three channels.
"""

from __future__ import annotations

from fusion_ray.models.spec import (
    ColorOrder,
    Layout,
    ModelKind,
    ModelSpec,
    SourceForm,
    TemplateName,
)

Triple = tuple[float, float, float]

ASSETS = "https://github.com/facefusion/facefusion-assets/releases/download"
"""Base of the release URLs: ``{ASSETS}/{release}/{file}``."""


def _triple(value: float | Triple) -> Triple:
    return value if isinstance(value, tuple) else (value,) * 3


def facefusion_row(name: str, release: str, kind: ModelKind, size: int, mean: float | Triple, std: float | Triple,
                   licence: tuple[str, str], mb: float, description: str, *, color_order: ColorOrder = "RGB",
                   layout: Layout = "NCHW", template: TemplateName | None = None,
                   source_form: SourceForm | None = None, converter: str | None = None,
                   normalise_embeddings: bool = True, source_template: TemplateName | None = None, source_size: int = 0,
                   output_range: tuple[float, float] = (0.0, 1.0), weight_input: bool = False,
                   default_set: bool = False, fp16_form: str | None = None) -> ModelSpec:
    """A row for ``<name>.onnx`` from facefusion-assets release ``release`` (e.g. ``models-3.1.0``);
    ``licence`` is (text, URL), ``mb`` the approximate size (0: not known here)."""
    return ModelSpec(name=name, file_name=f"{name}.onnx", url=f"{ASSETS}/{release}/{name}.onnx",
                     hash_url=f"{ASSETS}/{release}/{name}.hash", kind=kind, template=template, crop_size=size,
                     mean=_triple(mean), std=_triple(std), color_order=color_order,
                     licence=licence[0], licence_url=licence[1], approx_size_mb=mb, description=description,
                     layout=layout, source_form=source_form, converter=converter,
                     normalise_embeddings=normalise_embeddings, source_template=source_template,
                     source_size=source_size, output_range=output_range, weight_input=weight_input,
                     default_set=default_set, fp16_form=fp16_form)
