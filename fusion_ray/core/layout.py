"""``CropLayout``: where a model's crop comes from (template, size) and how it goes back (mask).

Pure values and functions: no models are needed to cut or paste crops, so paste stages,
Serve's ingress and metadata writers never load a model to know the geometry.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fusion_ray.config import EngineConfig
from fusion_ray.errors import ConfigError
from fusion_ray.models.registry import ModelSpec, chosen_spec, get_spec
from fusion_ray.ops.align import align_face
from fusion_ray.ops.blend import poisson_paste
from fusion_ray.ops.classic import classic_face_mask
from fusion_ray.ops.mask import box_mask
from fusion_ray.ops.paste import paste_back
from fusion_ray.ops.pixel_boost import boost_factor
from fusion_ray.types import Frame, Mask

CLASSIC_TEMPLATE = "arcface_128"
ENHANCE_MASK_BLUR = 0.3


@dataclass(frozen=True)
class CropLayout:
    """A crop's alignment template, its size in pixels and the mask it is pasted back with."""

    template: str
    size: int
    mask: Mask
    poisson: bool = False
    """Paste with Poisson blending instead of the feathered mask (classic swapper option)."""


def _model_layout(model: str | ModelSpec) -> tuple[str, int]:
    spec = get_spec(model) if isinstance(model, str) else model
    if spec.template is None:
        raise ValueError(f"{spec.name}: the registry gives no alignment template")
    return spec.template, spec.crop_size


def swapper_spec(cfg: EngineConfig) -> ModelSpec:
    """The row of the configured swap model (``--face-swapper-model``); ConfigError naming the
    valid names when ``models.swapper`` is not a swapper."""
    return chosen_spec(cfg.models.swapper, "swapper", "--face-swapper-model")


def enhancer_spec(cfg: EngineConfig) -> ModelSpec:
    """The row of the configured enhancer (``--face-enhancer-model``); ConfigError naming the
    valid names when ``models.enhancer`` is not an enhancer."""
    return chosen_spec(cfg.models.enhancer, "enhancer", "--face-enhancer-model")


def swap_layout(cfg: EngineConfig) -> CropLayout:
    """The swap crop: the classic swapper's own size and ellipse mask, or the swap model's (at the
    pixel boost size when one is set)."""
    swap = cfg.swap
    if swap.swapper == "classic":
        size = swap.classic_crop_size
        return CropLayout(CLASSIC_TEMPLATE, size, classic_face_mask(size, swap.mask_blur), poisson=swap.poisson)
    template, size = _model_layout(swapper_spec(cfg))
    if swap.pixel_boost is not None:  # the crop at k x the model size, swapped in k^2 tiles
        try:
            size *= boost_factor(swap.pixel_boost, size)
        except ValueError as exc:
            raise ConfigError(f"--face-swapper-pixel-boost for {cfg.models.swapper}: {exc}") from None
    return CropLayout(template, size, box_mask(size, padding=swap.mask_padding, blur=swap.mask_blur))


def enhance_layout(cfg: EngineConfig) -> CropLayout:
    """The enhancer crop (the row's template and size: ffhq_512 at 512 for GFPGAN) with a feathered
    box mask."""
    template, size = _model_layout(enhancer_spec(cfg))
    return CropLayout(template, size, box_mask(size, blur=ENHANCE_MASK_BLUR))


def source_crop_layout(cfg: EngineConfig) -> CropLayout | None:
    """The crop a source identity carries, when the swapper takes the source as an image: the
    classic swapper's swap crop, or a crop-fed row's source template and size (blendswap_256:
    arcface_112_v2 at 112; uniface_256: ffhq_512 at 256). None for embedding-fed swappers."""
    if cfg.swap.swapper == "classic":
        return swap_layout(cfg)
    spec = swapper_spec(cfg)
    if spec.source_form != "crop" or spec.source_template is None:
        return None
    return CropLayout(spec.source_template, spec.source_size, np.ones((spec.source_size,) * 2, np.float32))


def embed_layout(cfg: EngineConfig) -> CropLayout:
    """The embedder crop (arcface_112_v2 for ArcFace); it is never pasted back."""
    template, size = _model_layout(cfg.models.embedder)
    return CropLayout(template, size, np.ones((size, size), np.float32))


def align_crops(frame: Frame, landmarks: np.ndarray, layout: CropLayout) -> tuple[np.ndarray, np.ndarray]:
    """Crops (N, S, S, 3) and their frame -> crop matrices (N, 2, 3) for (N, 5, 2) landmarks."""
    points = np.asarray(landmarks, np.float32).reshape(-1, 5, 2)
    if not len(points):
        return np.zeros((0, layout.size, layout.size, 3), np.uint8), np.zeros((0, 2, 3), np.float64)
    pairs = [align_face(frame, p, layout.template, layout.size) for p in points]
    return np.stack([c for c, _ in pairs]), np.stack([m for _, m in pairs])


def paste_crops(frame: Frame, crops: np.ndarray, affines: np.ndarray, layout: CropLayout,
                masks: np.ndarray | None = None) -> Frame:
    """A copy of the frame with each crop pasted back through its matrix (ROI only), blended
    through its own mask (``masks``: one per crop, the faces' combined masks) or the layout's."""
    out = frame
    paste = poisson_paste if layout.poisson else paste_back
    for k, (crop, affine) in enumerate(zip(crops, affines, strict=True)):
        out = paste(out, crop, affine, layout.mask if masks is None else masks[k])  # each paste returns a new frame
    return out if len(crops) else frame.copy()
