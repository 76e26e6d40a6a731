"""The frame-level engine for the image command: one frame in, one frame out, per-stage timings.

A thin composition of :mod:`fusion_ray.core`: a :class:`ModelSet`, the crop layouts and the
swap backend, chained by the core's typed functions. The Ray Data stages and the Serve
deployments call the same core functions on batches.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np

from fusion_ray.config import EngineConfig
from fusion_ray.core import chain, identity
from fusion_ray.core.facebatch import FaceBatch
from fusion_ray.core.layout import CropLayout, enhance_layout, swap_layout
from fusion_ray.core.modelset import Component, ModelInfo, ModelSet, required_components
from fusion_ray.core.provenance import Provenance
from fusion_ray.core.swapper import SwapBackend, swap_backend
from fusion_ray.models.store import ModelStore
from fusion_ray.types import Embedding, Face, Frame, SourceIdentity, check_frame

__all__ = ["Component", "Engine", "FrameResult", "ModelInfo", "required_components", "timed"]


@dataclass
class FrameResult:
    """One processed frame and what happened to it."""

    frame: Frame
    faces_detected: int
    faces_swapped: int
    timings_ms: dict[str, float] = field(default_factory=dict)


@contextmanager
def timed(timings: dict[str, float], stage: str) -> Iterator[None]:
    """Add the block's wall time in ms to ``timings[stage]``."""
    start = time.perf_counter()
    try:
        yield
    finally:
        timings[stage] = timings.get(stage, 0.0) + (time.perf_counter() - start) * 1000.0


class Engine:
    """The models of an :class:`EngineConfig` and the swap chain over one frame."""

    def __init__(self, cfg: EngineConfig, models: ModelSet | None = None) -> None:
        self.cfg = cfg
        self.models = models if models is not None else ModelSet()
        self.swap_layout: CropLayout = swap_layout(cfg)
        self.enhance_layout: CropLayout = enhance_layout(cfg)
        self._backend: SwapBackend | None = None

    @classmethod
    def load(cls, cfg: EngineConfig, *, components: Sequence[Component] | None = None,
             cpu_budget: float | None = None, store: ModelStore | None = None) -> Engine:
        """Load the components ``cfg`` needs (or just ``components``) with sessions sized to ``cpu_budget``."""
        return cls(cfg, ModelSet.load(cfg, components, cpu_budget=cpu_budget, store=store))

    @property
    def model_info(self) -> dict[str, ModelInfo]:
        return self.models.info

    @property
    def stand_in_models(self) -> list[str]:
        """Names of loaded models that are fusion_ray stand-ins, not the real weights."""
        return self.models.stand_in_models

    @property
    def provenance(self) -> Provenance:
        return Provenance.of(self.models.info)

    @property
    def backend(self) -> SwapBackend:
        """The swap backend (built on first use: an engine without its swapper fails only here)."""
        if self._backend is None:
            self._backend = swap_backend(self.cfg, self.models)
        return self._backend

    # ------------------------------------------------------------ building blocks
    def detect(self, frame: Frame) -> list[Face]:
        """Faces in the frame by descending score; [] when there is none."""
        return self.models.need_detector().detect(frame)

    def swap_crops(self, crops: np.ndarray, identities: SourceIdentity | Sequence[SourceIdentity]) -> np.ndarray:
        """Swap a batch of target crops; one identity for all or one per crop."""
        rows = [identities] * len(crops) if isinstance(identities, SourceIdentity) else list(identities)
        if len(rows) != len(crops):
            raise ValueError(f"expected one identity per crop ({len(crops)}), got {len(rows)}")
        backend = self.backend
        for row in rows:
            backend.check_identity(row)
        return backend.swap(crops, rows)

    def prepare_source(self, images: Sequence[Frame], names: Sequence[str] | None = None) -> SourceIdentity:
        """Embed the largest face of each source image once; several images average into one identity."""
        return identity.prepare_source(self.models, self.cfg, images, names)

    def prepare_reference(self, image: Frame, name: str = "reference image") -> Embedding:
        """The embedding of the largest face in the reference image."""
        return identity.prepare_reference(self.models, self.cfg, image, name)

    # ---------------------------------------------------------------- whole frame
    def process_frame(self, frame: Frame, source: SourceIdentity,
                      reference: Embedding | None = None) -> FrameResult:
        """Detect, select, swap, optionally enhance, and paste back. No face: the frame unchanged."""
        check_frame(frame)
        timings: dict[str, float] = {}
        errors = [""]
        selection = chain.Selection.of(self.cfg.selection, reference)
        with timed(timings, "detect"):
            found = chain.detect_select(self.models.need_detector(), [frame], errors, [selection],
                                        embedder=self.models.embedder, source_ids=[""])
        _raise_first(errors)
        if not len(found.faces):
            return FrameResult(frame.copy(), int(found.faces_detected[0]), 0, timings)
        with timed(timings, "align"):
            faces = chain.align([frame], found.faces, self.swap_layout, errors, "align")
        with timed(timings, "swap"):
            faces = chain.swap(self.backend, faces, {"": source}, errors)
        _raise_first(errors)
        with timed(timings, "paste"):
            out = chain.paste([frame], faces, self.swap_layout, errors)[0]
        if self.cfg.enhance.enabled:
            out = self._enhance(out, faces, timings, errors)
        _raise_first(errors)
        return FrameResult(out, int(found.faces_detected[0]), len(faces), timings)

    def _enhance(self, frame: Frame, faces: FaceBatch, timings: dict[str, float], errors: list[str]) -> Frame:
        with timed(timings, "enhance_align"):
            crops = chain.align_for_enhance([frame], faces, self.enhance_layout, errors)
        with timed(timings, "enhance"):
            enhanced = chain.enhance(self.models.need_enhancer(), crops, self.cfg.enhance.blend)
        with timed(timings, "enhance_paste"):
            return chain.paste([frame], enhanced, self.enhance_layout, errors, "enhance_paste")[0]


def _raise_first(errors: list[str]) -> None:
    """In-process, a frame's failure is the caller's error (the image command reports it)."""
    if errors[0]:
        raise ValueError(errors[0])
