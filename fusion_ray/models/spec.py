"""The type of a registry row: everything known about one model file before it is opened.

Normalisation is in pixel units: ``model_input = (pixel - mean) / std`` with ``pixel`` in
``[0, 255]`` in ``color_order`` channel order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

ModelKind = str
"""A row's kind: a built-in one (``detector``, ``embedder``, ``swapper``, ``enhancer``,
``landmarker``, ``occluder``, ``parser``, ``converter``) or the kind a capability declares
(:class:`fusion_ray.capability.Capability`)."""
TemplateName = Literal["arcface_112_v1", "arcface_112_v2", "arcface_128", "ffhq_512", "mtcnn_512"]
ColorOrder = Literal["RGB", "BGR"]
Layout = Literal["NCHW", "NHWC"]
SourceForm = Literal["inswapper_latent", "embedding", "converted_embedding", "crop"]

TEMPLATE_NAMES: tuple[str, ...] = ("arcface_112_v1", "arcface_112_v2", "arcface_128", "ffhq_512", "mtcnn_512")
"""Alignment template names a spec may refer to (coordinates live in ``ops``)."""

CRC32_HASH_SOURCE = "crc32: the <stem>.hash file published beside the model"


@dataclass(frozen=True)
class ModelSpec:
    """Everything known about one model file before it is opened."""

    name: str
    """Registry key, e.g. ``"inswapper_128"``."""
    file_name: str
    """File name in the models directory, e.g. ``"inswapper_128.onnx"``."""
    url: str
    """HTTPS download URL of the model file."""
    hash_url: str
    """HTTPS URL of the ``<stem>.hash`` file (CRC32, 8 lower-case hex digits)."""
    kind: ModelKind
    template: TemplateName | None
    """Alignment template of the crop the model takes; ``None`` for the detector."""
    crop_size: int
    """Square input size in pixels (the detector's default input size for the detector)."""
    mean: tuple[float, float, float]
    """Per-channel mean in pixel units, in ``color_order``."""
    std: tuple[float, float, float]
    """Per-channel std in pixel units, in ``color_order``."""
    color_order: ColorOrder
    licence: str
    licence_url: str
    approx_size_mb: float
    """Approximate file size; 0 when not known here (optional rows whose files were not seen)."""
    description: str
    layout: Layout = "NCHW"
    """Image input layout (FaceFusion's xseg occluders take NHWC)."""
    hash_source: str = CRC32_HASH_SOURCE
    """Where the file's integrity check comes from (``hash_url`` is empty when none is published)."""
    source_form: SourceForm | None = None
    """Swappers: how the source face goes in (latent, embedding, converted embedding, image crop)."""
    converter: str | None = None
    """Swappers whose source is a converted ArcFace embedding: the converter model's name."""
    normalise_embeddings: bool = True
    """Swappers fed an embedding: L2-normalise it (after the converter) and, for the weight balance,
    the target's; FaceFusion does so for all but ghost."""
    source_template: TemplateName | None = None
    """Swappers given the source as an image crop: that crop's template (``source_size`` pixels)."""
    source_size: int = 0
    output_range: tuple[float, float] = (0.0, 1.0)
    """Swappers and enhancers: the output's value range, mapped to pixels [0, 255] in ``color_order``."""
    weight_input: bool = False
    """Enhancers with an optional ``weight`` input (float64, shape (1,))."""
    default_set: bool = True
    """Part of the standard set (``all_specs``, downloaded by ``models download``); the optional
    models (quality models, swappers, enhancers) are found by name (``get_spec``) and listed by ``optional_specs``."""
    fp16_form: str | None = None
    """Registry name of this model's fp16 export, used at precision fp16 on CUDA."""

    @property
    def hash_file_name(self) -> str:
        """Name of the CRC32 file published beside the model, ``<stem>.hash``."""
        stem = self.file_name.rsplit(".", 1)[0]
        return f"{stem}.hash"
