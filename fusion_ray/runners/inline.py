"""The frame-level engine (the inline runner): one frame in, one frame out, per-step timings.

A thin composition of :mod:`fusion_ray.core`: a :class:`ModelSet`, the crop layouts and the
swap backend, running the steps :class:`fusion_ray.core.steps.Chain` declares. The local
runner and the Ray Data stages run the same steps on batches.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from fusion_ray.config import EngineConfig
from fusion_ray.core import chain, identity
from fusion_ray.core.facebatch import FrameBatch
from fusion_ray.core.layout import CropLayout
from fusion_ray.core.modelset import Component, ModelInfo, ModelSet
from fusion_ray.core.provenance import Provenance
from fusion_ray.core.steps import Chain, Rows, Tools, required_components
from fusion_ray.core.swapper import SwapBackend
from fusion_ray.models.store import ModelStore
from fusion_ray.types import Embedding, Face, Frame, SourceIdentity, check_frame

__all__ = ["Component", "Engine", "FrameResult", "ModelInfo", "required_components"]


@dataclass
class FrameResult:
    """One processed frame and what happened to it."""

    frame: Frame
    faces_detected: int
    faces_swapped: int
    timings_ms: dict[str, float] = field(default_factory=dict)


class Engine:
    """The models of an :class:`EngineConfig` and the swap chain over one frame."""

    def __init__(self, cfg: EngineConfig, models: ModelSet | None = None) -> None:
        self.cfg = cfg
        self.models = models if models is not None else ModelSet()
        self.tools = Tools(cfg, self.models)
        self.swap_layout: CropLayout = self.tools.swap_layout
        self.enhance_layout: CropLayout = self.tools.enhance_layout
        self._chain: Chain | None = None

    @classmethod
    def load(cls, cfg: EngineConfig, *, components: Sequence[Component] | None = None,
             cpu_budget: float | None = None, store: ModelStore | None = None) -> Engine:
        """Load the components ``cfg`` needs (or just ``components``) with sessions sized to ``cpu_budget``."""
        wanted = required_components(cfg) if components is None else components
        return cls(cfg, ModelSet.load(cfg, wanted, cpu_budget=cpu_budget, store=store))

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
        return self.tools.backend

    # ------------------------------------------------------------ building blocks
    def detect(self, frame: Frame) -> list[Face]:
        """Faces in the frame by descending score; [] when there is none."""
        return self.models.need_detector().detect(frame)

    def prepare_source(self, images: Sequence[Frame], names: Sequence[str] | None = None) -> SourceIdentity:
        """Embed the largest face of each source image once; several images average into one identity."""
        return identity.prepare_source(self.models, self.cfg, images, names)

    def prepare_reference(self, image: Frame, name: str = "reference image") -> Embedding:
        """The embedding of the largest face in the reference image."""
        return identity.prepare_reference(self.models, self.cfg, image, name)

    # ---------------------------------------------------------------- whole frame
    @property
    def chain(self) -> Chain:
        """The steps this engine runs (:func:`fusion_ray.core.steps.all_steps` its config enables)."""
        if self._chain is None:
            self._chain = Chain.of(self.cfg)
        return self._chain

    def process_frame(self, frame: Frame, source: SourceIdentity,
                      reference: Embedding | None = None) -> FrameResult:
        """The chain's steps over one frame. No face: the frame unchanged."""
        check_frame(frame)
        timings: dict[str, float] = {}
        rows = Rows.of(1, chain.Selection.of(self.cfg.selection, reference), {"": source})
        done = self.chain.run(self.tools, rows, FrameBatch.of([frame]), timings)
        _raise_first(done.errors)
        out = done.frames[0]
        return FrameResult(out.copy() if out is frame else out, int(done.counter("faces_detected")[0]),
                           int(done.counter("faces_swapped")[0]), timings)


def _raise_first(errors: list[str]) -> None:
    """In-process, a frame's failure is the caller's error (the image command reports it)."""
    if errors[0]:
        raise ValueError(errors[0])
