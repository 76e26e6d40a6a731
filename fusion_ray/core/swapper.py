"""The swapper protocol and its backends: ``inswapper``, ``spec`` (every other swap model row:
hyperswap, simswap, ghost, hififace, blendswap, uniface) and ``classic`` (no model).

A backend swaps a batch of aligned target crops, one :class:`SourceIdentity` per crop. The
crop geometry is the backend's :class:`CropLayout` (the row's template, at its size or at the
pixel boost size); :func:`swap_backend` is the one place that chooses the backend.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Protocol

import numpy as np

from fusion_ray.config import EngineConfig
from fusion_ray.core.layout import CropLayout, swap_layout, swapper_spec
from fusion_ray.core.lru import LockedLru
from fusion_ray.core.modelset import ModelSet
from fusion_ray.models.spec_models import SpecSwapper
from fusion_ray.models.swapper import InswapperSwapper
from fusion_ray.ops.classic import classic_swap_crop
from fusion_ray.ops.color import LabSource, StatsWeight, lab_source
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


class SpecBackend:
    """A swap model row run by :class:`SpecSwapper`: its ``source`` input from the identity's
    embedding (through the row's converter; balanced against each target face with ``weight``) or,
    for blendswap and uniface, from the identity's source crop (:func:`source_crop_layout`)."""

    name = "spec"

    def __init__(self, model: SpecSwapper, layout: CropLayout, weight: float = DEFAULT_SWAPPER_WEIGHT) -> None:
        self.model = model
        self.layout = layout
        self.weight = weight

    @property
    def takes_crop(self) -> bool:
        return self.model.spec.source_form == "crop"

    def check_identity(self, identity: SourceIdentity) -> None:
        spec = self.model.spec
        if self.takes_crop:
            size = spec.source_size
            if identity.crop is None or identity.crop.shape != (size, size, 3):
                raise ValueError(f"{spec.name} needs a source identity with a {spec.source_template} crop of "
                                 f"{size} px (prepared with this swapper configured)")
        elif identity.embedding is None:
            raise ValueError(f"{spec.name} needs a source identity with an embedding")

    def sources(self, identities: Sequence[SourceIdentity], targets: np.ndarray | None) -> np.ndarray:
        """The ``source`` rows of the faces: one per distinct identity, repeated; per face when
        the weight balances each source against its target."""
        for identity in identities:
            self.check_identity(identity)
        if self.takes_crop:
            return self.model.source_rows(source_crops=np.stack([i.crop for i in identities]))  # type: ignore[misc]
        if targets is not None and self.weight != DEFAULT_SWAPPER_WEIGHT:
            embeddings = np.stack([i.embedding for i in identities])  # type: ignore[misc]
            return self.model.source_rows(embeddings, target_embeddings=targets, weight=self.weight)
        row_of: dict[int, int] = {}
        unique: list[SourceIdentity] = []
        for identity in identities:
            if id(identity) not in row_of:
                row_of[id(identity)] = len(unique)
                unique.append(identity)
        rows = self.model.source_rows(np.stack([i.embedding for i in unique]))  # type: ignore[misc]
        return rows[[row_of[id(identity)] for identity in identities]]

    def swap(self, crops: np.ndarray, identities: Sequence[SourceIdentity],
             targets: np.ndarray | None = None) -> np.ndarray:
        """Crops at the row's size, or at k x it (pixel boost: every tile of every face in one
        batched call, :func:`fusion_ray.ops.pixel_boost.boosted_call`)."""
        if len(crops) == 0:
            return crops.copy()
        sources = self.sources(identities, targets)
        k = boost_factor(crops.shape[1], self.model.spec.crop_size)
        return self.model.swap(crops, sources) if k == 1 else boosted_call(crops, k, self.model.swap, sources)


def crop_key(crop: np.ndarray) -> tuple[tuple[int, ...], bytes]:
    """A source crop's cache key: its shape and a 128-bit digest of its pixels (equal crops, and
    only they, share it: an identity unpickled anew in every Serve call still finds its entry)."""
    return crop.shape, hashlib.blake2b(np.ascontiguousarray(crop).data, digest_size=16).digest()


class ClassicBackend:
    """The model-free classic swap: the source crop, recoloured to each target crop.

    Each source crop is converted to Lab and measured once, then kept by its content
    (:func:`crop_key`; the last :data:`MAX_SOURCES`): a stream or a video swaps the same source
    into every face of every frame, and only the target's side is computed per face.
    """

    name = "classic"
    MAX_SOURCES = 32
    """Prepared sources kept (each the crop in Lab: 196 KB at 256 px)."""

    def __init__(self, layout: CropLayout) -> None:
        self.layout = layout
        self.weight = StatsWeight.of(layout.mask, (layout.size, layout.size))
        self._sources: LockedLru[tuple[tuple[int, ...], bytes], LabSource] = LockedLru(self.MAX_SOURCES)

    def check_identity(self, identity: SourceIdentity) -> None:
        size = self.layout.size
        if identity.crop is None or identity.crop.shape != (size, size, 3):
            raise ValueError("classic swap needs a source crop of the swap crop size")

    def source(self, identity: SourceIdentity) -> LabSource:
        """The identity's crop in Lab with its statistics (made on its first face, then kept)."""
        self.check_identity(identity)
        assert identity.crop is not None
        crop = identity.crop
        return self._sources.get(crop_key(crop), lambda _: lab_source(crop, self.weight))

    def swap(self, crops: np.ndarray, identities: Sequence[SourceIdentity],
             targets: np.ndarray | None = None) -> np.ndarray:
        if len(crops) == 0:
            return crops.copy()
        prepared: dict[int, LabSource] = {}  # each identity object of the call looked up once
        for identity in identities:
            if id(identity) not in prepared:
                prepared[id(identity)] = self.source(identity)
        return np.stack([classic_swap_crop(prepared[id(identity)], crop, self.weight)
                         for crop, identity in zip(crops, identities, strict=True)])


def swap_backend(cfg: EngineConfig, models: ModelSet) -> SwapBackend:
    """The configured backend: classic, or the backend of the swap model row ``models`` loaded
    (``--face-swapper-model``; the inswapper's own, or :class:`SpecBackend` for the others)."""
    layout = swap_layout(cfg)
    if cfg.swap.swapper == "classic":
        return ClassicBackend(layout)
    if swapper_spec(cfg).source_form == "inswapper_latent":
        return InswapperBackend(models.need_inswapper(), layout, cfg.swap.weight)
    return SpecBackend(models.need_spec_swapper(), layout, cfg.swap.weight)
