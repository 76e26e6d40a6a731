"""The swap chain, declared once: an ordered list of steps over a :class:`FrameBatch`.

    detect|track -> select -> align -> [target-crop masks] -> swap -> [swapped-crop masks] -> paste
                 (-> enhance_align -> enhance -> [enhance masks] -> paste_enhanced)

Each :class:`Step` (declared in :mod:`fusion_ray.capability`) is a typed function
``(Tools, Rows, FrameBatch) -> FrameBatch`` built on the functions of :mod:`fusion_ray.core.chain`.
It declares what it reads and writes, the model kind it needs, whether it wants a GPU and the
phase it belongs to. :data:`STEPS` lists the built-in ones in run order and the capabilities'
steps follow them (:func:`all_steps`); :class:`Chain` keeps those the config enables (a step
after them is placed by its phase, after the steps of that phase). Runners (the engine, the local
runner, the Ray Data stages, :class:`fusion_ray.core.frames.FrameChain` for ``fusion-ray live``
and the fused Serve placement) ask the chain what to run and decide only where each step runs:
adding a per-face step with a model of a new kind is one capability file
(:class:`fusion_ray.capability.Capability`: its rows, wrapper and step) named in
:data:`fusion_ray.models.capabilities.CAPABILITIES`, with no runner and no loader touched.

Per-face masks: a mask step adds its mask to the faces (``FaceBatch.with_mask``, combined by
element-wise minimum); paste blends through the result: the crop layouts' box masks (the swap's
and the enhancer's) and the area, mouth, occlusion and region masks
(:mod:`fusion_ray.core.quality_steps`, with the 68-point ``landmark`` step they read).

``Rows`` are what the steps read per frame and never change: each frame's selection and source
id, the identities, the frames whose faces were decided before the chain (a tracking read, or a
live stream's faces followed on crops: detect and select leave those frames' faces as they are),
and, where frames differ in them, each frame's detector canvas and enhancer blend.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from fusion_ray.capability import PHASES as PHASES
from fusion_ray.capability import Field as Field
from fusion_ray.capability import Phase as Phase
from fusion_ray.capability import Step as Step
from fusion_ray.capability import StepFn as StepFn
from fusion_ray.config import EngineConfig
from fusion_ray.core import chain
from fusion_ray.core.facebatch import FaceBatch, FrameBatch
from fusion_ray.core.layout import CropLayout, enhance_layout, source_crop_layout, swap_layout
from fusion_ray.core.modelset import Component, ModelSet
from fusion_ray.core.quality_steps import (
    area_mask_step,
    landmark_step,
    mouth_mask_step,
    occlusion_mask_step,
    region_mask_step,
    target_embed_step,
)
from fusion_ray.core.swapper import SwapBackend, swap_backend
from fusion_ray.models import capabilities
from fusion_ray.models.detector import DetectorCanvases, ScrfdDetector
from fusion_ray.types import Face, SourceIdentity


class Tools:
    """What the steps use, built once per worker: the config, the loaded models, the layouts
    and (on first use) the swap backend."""

    def __init__(self, cfg: EngineConfig, models: ModelSet) -> None:
        self.cfg = cfg
        self.models = models
        self.swap_layout: CropLayout = swap_layout(cfg)
        self.enhance_layout: CropLayout = enhance_layout(cfg)
        self._backend: SwapBackend | None = None
        self._canvases = DetectorCanvases(models.detector) if models.detector is not None else None

    def detector(self, size: int | None = None, *, square: bool = False) -> ScrfdDetector:
        """The detector at canvas ``size`` (None: the configured one), square with ``square``."""
        if self._canvases is None:
            self._canvases = DetectorCanvases(self.models.need_detector())
        return self._canvases.get(size, square=square)

    @property
    def backend(self) -> SwapBackend:
        if self._backend is None:
            self._backend = swap_backend(self.cfg, self.models)
        return self._backend


@dataclass(frozen=True)
class Rows:
    """Per-frame inputs of a batch that no step changes."""

    selections: Sequence[chain.Selection]
    source_ids: Sequence[str]
    identities: Mapping[str, SourceIdentity] = field(default_factory=dict)
    given: np.ndarray | None = None
    """Frames whose faces were decided before the chain (True: a tracking read brought them in
    ``FrameBatch.faces``; detect and select skip them)."""
    given_found: np.ndarray | None = None
    """Faces found on each given frame (its ``faces_detected``)."""
    canvases: Sequence[int | None] | None = None
    """Each frame's detector canvas size (None: the configured one; a live stream's smaller one)."""
    blends: Sequence[float | None] | None = None
    """Each frame's enhancer blend (None: that frame is not enhanced); None for all: the config's
    blend on every frame."""

    @classmethod
    def of(cls, n: int, selection: chain.Selection, identities: Mapping[str, SourceIdentity] | None = None,
           source_id: str = "") -> Rows:
        """``n`` frames with one selection and one source id."""
        return cls([selection] * n, [source_id] * n, dict(identities or {}))

    def is_given(self, row: int) -> bool:
        return self.given is not None and bool(self.given[row])

    def canvas(self, row: int) -> int | None:
        return None if self.canvases is None else self.canvases[row]

    def blend(self, row: int, configured: float) -> float | None:
        return configured if self.blends is None else self.blends[row]


def _unfailed(batch: FrameBatch) -> list[int]:
    return [r for r, e in enumerate(batch.errors) if e]


# ------------------------------------------------------------------ the steps
def detect_step(tools: Tools, rows: Rows, batch: FrameBatch) -> FrameBatch:
    """Every face of the frames not given (their faces come from a tracking read)."""
    todo = [r for r in range(len(batch.frames)) if not rows.is_given(r) and not batch.errors[r]]
    found: dict[int, list[Face]] = {}
    for size in dict.fromkeys(rows.canvas(r) for r in todo):  # each detector canvas once
        found.update(chain.detect_faces(tools.detector(size), batch.frames, batch.errors,
                                        [r for r in todo if rows.canvas(r) == size], rows.selections,
                                        embedder=tools.models.embedder, angles=tools.cfg.detector.angles))
    detected = np.zeros(len(batch.frames), np.int32)
    if rows.given is not None and rows.given_found is not None:
        detected = np.where(rows.given, np.asarray(rows.given_found, np.int32), 0).astype(np.int32)
    for row, faces in found.items():
        detected[row] = len(faces)
    per_frame = [found.get(r, []) for r in range(len(batch.frames))]
    fresh = FaceBatch.from_faces(per_frame, rows.source_ids)
    return replace(batch, faces=FaceBatch.merge([_given(batch.faces, rows), fresh])).counted(faces_detected=detected)


def _given(faces: FaceBatch, rows: Rows) -> FaceBatch:
    if rows.given is None or not len(faces):
        return FaceBatch.empty()
    return faces.take(np.flatnonzero(np.asarray(rows.given, bool)[faces.frame_index]))


def select_step(tools: Tools, rows: Rows, batch: FrameBatch) -> FrameBatch:
    """The faces to swap of each frame (:func:`fusion_ray.core.chain.select`); a given frame's
    faces were chosen by its tracking read."""
    given = _given(batch.faces, rows)
    found = {r: batch.faces.of_frame(r).faces() for r in range(len(batch.frames))
             if not rows.is_given(r) and not batch.errors[r]}
    chosen = chain.select(found, rows.selections, batch.errors)
    fresh = FaceBatch.from_faces([chosen.get(r, []) for r in range(len(batch.frames))], rows.source_ids)
    return replace(batch, faces=FaceBatch.merge([given, fresh]))


def align_step(tools: Tools, rows: Rows, batch: FrameBatch) -> FrameBatch:
    faces = chain.align(batch.frames, batch.faces, tools.swap_layout, batch.errors, "align")
    return replace(batch, faces=faces).counted(faces_selected=faces.counts(len(batch.frames)))


def swap_step(tools: Tools, rows: Rows, batch: FrameBatch) -> FrameBatch:
    return replace(batch, faces=chain.swap(tools.backend, batch.faces, rows.identities, batch.errors))


def box_mask_step(tools: Tools, rows: Rows, batch: FrameBatch) -> FrameBatch:
    """The swap layout's box (or the classic swapper's ellipse) mask, on every face."""
    return _with_layout_mask(batch, tools.swap_layout)


def _with_layout_mask(batch: FrameBatch, layout: CropLayout) -> FrameBatch:
    if not len(batch.faces):
        return batch
    mask = np.broadcast_to(layout.mask, (len(batch.faces), *layout.mask.shape))
    return replace(batch, faces=batch.faces.with_mask(mask))


def paste_step(tools: Tools, rows: Rows, batch: FrameBatch) -> FrameBatch:
    frames = chain.paste(batch.frames, batch.faces, tools.swap_layout, batch.errors)
    faces = batch.faces.without_frames(_unfailed(batch))
    return replace(batch, frames=frames, faces=faces).counted(faces_swapped=faces.counts(len(frames)))


def _blends(tools: Tools, rows: Rows, faces: FaceBatch) -> list[float | None]:
    """Each face's enhancer blend (its frame's)."""
    return [rows.blend(int(r), tools.cfg.enhance.blend) for r in faces.frame_index]


def enhance_align_step(tools: Tools, rows: Rows, batch: FrameBatch) -> FrameBatch:
    """The enhancer's crops of the faces of the frames to enhance (the others leave the enhancement)."""
    faces = batch.faces.take(np.flatnonzero([b is not None for b in _blends(tools, rows, batch.faces)]))
    return replace(batch, faces=chain.align_for_enhance(batch.frames, faces, tools.enhance_layout, batch.errors))


def enhance_step(tools: Tools, rows: Rows, batch: FrameBatch) -> FrameBatch:
    """One enhancer call per distinct blend over the faces of the batch (a face whose frame is not
    enhanced keeps its crop), at the config's enhancer weight (a request's options may set it)."""
    faces = batch.faces.without_frames(_unfailed(batch))
    if not len(faces):
        return replace(batch, faces=faces)
    blends = _blends(tools, rows, faces)
    crops = faces.require_crops()[0].copy()
    for blend in dict.fromkeys(b for b in blends if b is not None):
        idx = np.flatnonzero([b == blend for b in blends])
        enhanced = chain.enhance(tools.models.need_enhancer(), faces.take(idx), blend, tools.cfg.enhance.weight)
        crops[idx] = enhanced.require_crops()[0]
    return replace(batch, faces=faces.with_crops(crops))


def enhance_mask_step(tools: Tools, rows: Rows, batch: FrameBatch) -> FrameBatch:
    return _with_layout_mask(batch, tools.enhance_layout)


def paste_enhanced_step(tools: Tools, rows: Rows, batch: FrameBatch) -> FrameBatch:
    frames = chain.paste(batch.frames, batch.faces, tools.enhance_layout, batch.errors, "paste_enhanced")
    return replace(batch, frames=frames, faces=batch.faces.without_frames(_unfailed(batch)))


def _enhancing(cfg: EngineConfig) -> bool:
    return cfg.enhance.enabled


def embeds_source(cfg: EngineConfig) -> bool:
    """Whether the swapper takes the source as an embedding (not as an image)."""
    return cfg.swap.swapper == "inswapper" and source_crop_layout(cfg) is None


def _weighting(cfg: EngineConfig) -> bool:
    """The swapper weight moves the source embedding towards (or away from) each target face's
    identity (swappers given the source as an image are not balanced)."""
    return embeds_source(cfg) and cfg.swap.weight != 0.5


def _reference_embeds(cfg: EngineConfig) -> tuple[Component, ...]:
    """Detection by reference embeds every face it finds."""
    return ("embedder",) if cfg.selection.mode == "reference" else ()


STEPS: tuple[Step, ...] = (
    Step("detect", "detect", detect_step, ("frame",), ("faces", "faces_detected"), model="detector",
         also=_reference_embeds),
    Step("select", "select", select_step, ("faces",), ("faces",)),
    # the 68-point landmarks (after select, so align cuts the crop on their 5 points)
    Step("landmark", "select", landmark_step, ("frame", "faces"), ("faces", "landmarks_68"), model="landmarker",
         enabled=lambda cfg: cfg.landmarker.model != "none"),
    Step("align", "align", align_step, ("frame", "faces"), ("crops", "faces_selected")),
    Step("target_embed", "align", target_embed_step, ("frame", "faces"), ("faces",), model="embedder",
         wants_gpu=True, enabled=_weighting),
    Step("area_mask", "target_mask", area_mask_step, ("crops", "landmarks_68"), ("masks",),
         enabled=lambda cfg: "area" in cfg.masks.types),
    Step("mouth_mask", "target_mask", mouth_mask_step, ("crops", "landmarks_68"), ("masks",),
         enabled=lambda cfg: cfg.masks.mouth_mask),
    Step("occlusion_mask", "target_mask", occlusion_mask_step, ("crops",), ("masks",), model="occluder",
         wants_gpu=True, enabled=lambda cfg: "occlusion" in cfg.masks.types),
    Step("swap", "swap", swap_step, ("crops", "identities"), ("crops",), model="swapper", wants_gpu=True),
    Step("mask", "swapped_mask", box_mask_step, ("crops",), ("masks",), enabled=lambda cfg: "box" in cfg.masks.types),
    Step("region_mask", "swapped_mask", region_mask_step, ("crops",), ("masks",), model="parser", wants_gpu=True,
         enabled=lambda cfg: "region" in cfg.masks.types),
    Step("paste", "paste", paste_step, ("frame", "crops", "masks"), ("frame", "faces_swapped")),
    Step("enhance_align", "enhance_align", enhance_align_step, ("frame", "faces"), ("crops",), enabled=_enhancing),
    Step("enhance", "enhance", enhance_step, ("crops",), ("crops",), model="enhancer", wants_gpu=True,
         enabled=_enhancing),
    Step("enhance_mask", "enhance_mask", enhance_mask_step, ("crops",), ("masks",), enabled=_enhancing),
    Step("paste_enhanced", "paste_enhanced", paste_enhanced_step, ("frame", "crops", "masks"), ("frame",),
         enabled=_enhancing),
)
"""Every built-in step, declared once and in run order (phase by phase; disabled ones are left out
by :meth:`Chain.of`). The capabilities' steps follow them (:func:`all_steps`)."""


def all_steps() -> tuple[Step, ...]:
    """:data:`STEPS` and then the steps of every capability
    (:data:`fusion_ray.models.capabilities.CAPABILITIES`), each placed by its phase."""
    return (*STEPS, *capabilities.capability_steps())


def step_named(name: str) -> Step:
    """The step called ``name`` (of :func:`all_steps`)."""
    found = next((s for s in all_steps() if s.name == name), None)
    if found is None:
        raise KeyError(f"no step {name!r}; the steps are {[s.name for s in all_steps()]}")
    return found


def source_components(cfg: EngineConfig) -> tuple[Component, ...]:
    """The model kinds that make the identities the swap step reads (``Rows.identities``) from
    source images: the detector finds each source face, the embedder embeds it where the swapper
    takes an embedding (:mod:`fusion_ray.core.identity`)."""
    return ("detector", "embedder") if embeds_source(cfg) else ("detector",)


def required_components(cfg: EngineConfig) -> set[Component]:
    """The model kinds a full run with ``cfg`` loads: those of every step it runs and those that
    prepare its sources. The one place this is worked out (the engine's default models, a job's
    model check, the service's served models)."""
    return {*Chain.of(cfg).components(cfg), *source_components(cfg)}


@dataclass(frozen=True)
class Chain:
    """The steps a config runs, in chain order."""

    steps: tuple[Step, ...]

    @classmethod
    def of(cls, cfg: EngineConfig, steps: Sequence[Step] | None = None) -> Chain:
        """The enabled steps of ``steps`` (default :func:`all_steps`), ordered by phase."""
        chosen = [s for s in (all_steps() if steps is None else steps) if s.enabled(cfg)]
        return cls(tuple(sorted(chosen, key=lambda s: PHASES.index(s.phase))))

    @property
    def names(self) -> list[str]:
        return [s.name for s in self.steps]

    def part(self, after: Phase | None, until: Phase) -> Chain:
        """The steps after phase ``after`` (None: from the start) up to and including ``until``:
        one part of a placement that runs the chain in several places, one after the other."""
        low = -1 if after is None else PHASES.index(after)
        high = PHASES.index(until)
        return Chain(tuple(s for s in self.steps if low < PHASES.index(s.phase) <= high))

    def reads(self) -> set[Field]:
        """What the steps need from before them (read before any of them writes it)."""
        written: set[Field] = set()
        needed: set[Field] = set()
        for step in self.steps:
            needed |= set(step.reads) - written
            written |= set(step.writes)
        return needed

    def writes(self) -> set[Field]:
        return {w for step in self.steps for w in step.writes}

    def components(self, cfg: EngineConfig, *, skipping: Collection[Phase] = ()) -> list[Component]:
        """The model kinds the steps load, each once (``skipping``: less those of the steps of
        these phases, whose work was done elsewhere: decoders that track detect)."""
        return list(dict.fromkeys(c for s in self.steps if s.phase not in skipping for c in s.components(cfg)))

    def run(self, tools: Tools, rows: Rows, batch: FrameBatch,
            timings: dict[str, float] | None = None) -> FrameBatch:
        """Every step in order (``timings``: each step's wall time in ms is added)."""
        return run_steps(self.steps, tools, rows, batch, timings)


def run_steps(steps: Sequence[Step], tools: Tools, rows: Rows, batch: FrameBatch,
              timings: dict[str, float] | None = None) -> FrameBatch:
    """``steps`` in order over ``batch`` (the part of the chain one worker runs)."""
    for step in steps:
        start = time.perf_counter()
        batch = step.run(tools, rows, batch)
        if timings is not None:
            timings[step.name] = timings.get(step.name, 0.0) + (time.perf_counter() - start) * 1000.0
    return batch
