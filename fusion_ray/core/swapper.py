"""The swapper protocol and its two backends: ``inswapper`` (a model) and ``classic`` (no model).

A backend swaps a batch of aligned target crops, one :class:`SourceIdentity` per crop. The
crop geometry is the backend's :class:`CropLayout`; choosing the backend is the only place
that looks at ``cfg.swap.swapper``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np

from fusion_ray.config import EngineConfig
from fusion_ray.core.layout import CropLayout, swap_layout
from fusion_ray.core.modelset import ModelSet
from fusion_ray.models.swapper import InswapperSwapper
from fusion_ray.ops.classic import classic_swap_crop
from fusion_ray.ops.pixel_boost import boost_factor, boosted_call
from fusion_ray.ops.source_weight import DEFAULT_SWAPPER_WEIGHT, balance_embedding
from fusion_ray.types import SourceIdentity


class SwapBackend(Protocol):
    """Swaps target crops (N, S, S, 3) with one identity per crop."""

    name: str
    layout: CropLayout

    def check_identity(self, identity: SourceIdentity) -> None:
        """ValueError when ``identity`` cannot drive this backend (an input problem, per frame)."""

    def swap(self, crops: np.ndarray, identities: Sequence[SourceIdentity],
             targets: np.ndarray | None = None) -> np.ndarray:
        """Swapped crops; a failure here is the model's (fatal), identities are checked before.
        ``targets``: the target faces' embeddings (N, D), for the swapper weight."""


class InswapperBackend:
    """inswapper_128: the source latent (from the identity's embedding) drives the model."""

    name = "inswapper"

    def __init__(self, model: InswapperSwapper, layout: CropLayout, weight: float = DEFAULT_SWAPPER_WEIGHT) -> None:
        self.model = model
        self.layout = layout
        self.weight = weight

    def check_identity(self, identity: SourceIdentity) -> None:
        if identity.latent is None and identity.embedding is None:
            raise ValueError("inswapper needs a source identity with an embedding")

    def latent(self, identity: SourceIdentity) -> np.ndarray:
        self.check_identity(identity)
        if identity.latent is not None:
            return identity.latent
        assert identity.embedding is not None
        return self.model.latent(identity.embedding)

    def swap(self, crops: np.ndarray, identities: Sequence[SourceIdentity],
             targets: np.ndarray | None = None) -> np.ndarray:
        """Crops at the model size, or at k x it (pixel boost): then every tile of every face goes
        to the model in one batched call (:func:`fusion_ray.ops.pixel_boost.boosted_call`). With
        ``targets`` and a weight other than 0.5, each source is balanced against its target face
        (:func:`fusion_ray.ops.source_weight.balance_embedding`)."""
        if len(crops) == 0:
            return crops.copy()
        if targets is not None and self.weight != DEFAULT_SWAPPER_WEIGHT:
            latents = self.balanced_latents(identities, targets)
        else:
            latent_of: dict[int, np.ndarray] = {}
            for identity in identities:
                if id(identity) not in latent_of:
                    latent_of[id(identity)] = self.latent(identity)
            latents = np.stack([latent_of[id(identity)] for identity in identities])
        k = boost_factor(crops.shape[1], self.model.spec.crop_size)
        return self.model.swap(crops, latents) if k == 1 else boosted_call(crops, k, self.model.swap, latents)


    def balanced_latents(self, identities: Sequence[SourceIdentity], targets: np.ndarray) -> np.ndarray:
        """One latent per face: its source embedding balanced against the face's own."""
        rows = []
        for identity, target in zip(identities, np.asarray(targets, np.float32), strict=True):
            if identity.embedding is None:
                raise ValueError("the swapper weight needs a source identity with an embedding")
            rows.append(self.model.latent(balance_embedding(identity.embedding, target, self.weight)))
        return np.stack(rows)


class ClassicBackend:
    """The model-free classic swap: the source crop, recoloured to each target crop."""

    name = "classic"

    def __init__(self, layout: CropLayout) -> None:
        self.layout = layout

    def check_identity(self, identity: SourceIdentity) -> None:
        size = self.layout.size
        if identity.crop is None or identity.crop.shape != (size, size, 3):
            raise ValueError("classic swap needs a source crop of the swap crop size")

    def swap(self, crops: np.ndarray, identities: Sequence[SourceIdentity],
             targets: np.ndarray | None = None) -> np.ndarray:
        if len(crops) == 0:
            return crops.copy()
        out = []
        for crop, identity in zip(crops, identities, strict=True):
            self.check_identity(identity)
            assert identity.crop is not None
            out.append(classic_swap_crop(identity.crop, crop, self.layout.mask))
        return np.stack(out)


def swap_backend(cfg: EngineConfig, models: ModelSet) -> SwapBackend:
    """The configured backend (the inswapper needs ``models.inswapper`` loaded)."""
    layout = swap_layout(cfg)
    if cfg.swap.swapper == "classic":
        return ClassicBackend(layout)
    return InswapperBackend(models.need_inswapper(), layout, cfg.swap.weight)
