"""What a step of the chain and a capability are, declared low so that a capability file (a model
kind with its registry rows, its wrapper and its steps, listed in
:data:`fusion_ray.models.capabilities.CAPABILITIES`) can declare its step without importing the chain.

A :class:`Step` is a typed function ``(Tools, Rows, FrameBatch) -> FrameBatch`` and what it reads,
writes and needs (:mod:`fusion_ray.core.steps` declares the built-in ones in ``STEPS`` and runs
them). A :class:`Capability` is one model kind as a whole: the registry rows of its models, which
of them a config loads, how a session becomes its wrapper, the steps that use it and its
stand-ins. :data:`fusion_ray.models.capabilities.CAPABILITIES` lists them; the registry, the model
loader (:class:`fusion_ray.core.modelset.ModelSet`), the stand-ins and the chain read that list.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    import onnx
    import onnxruntime as ort

    from fusion_ray.config import EngineConfig
    from fusion_ray.core.facebatch import FrameBatch
    from fusion_ray.core.steps import Rows, Tools
    from fusion_ray.models.spec import ModelSpec

Component = str
"""A model kind a worker loads: a built-in one (``detector``, ``embedder``, ``swapper``,
``enhancer``, ``landmarker``, ``occluder``, ``parser``) or the kind a capability declares."""

Phase = Literal["detect", "select", "align", "target_mask", "swap", "swapped_mask", "paste",
                "enhance_align", "enhance", "enhance_mask", "paste_enhanced"]
PHASES: tuple[Phase, ...] = ("detect", "select", "align", "target_mask", "swap", "swapped_mask", "paste",
                             "enhance_align", "enhance", "enhance_mask", "paste_enhanced")
"""The chain's order; a step's phase places it."""

Field = Literal["frame", "faces", "crops", "masks", "identities", "faces_detected", "faces_selected",
                "faces_swapped", "landmarks_68"]
"""What a step reads or writes: the frames, the faces (positions), their crops (with the crop
matrices), their masks, the identities, per-frame counters."""

StepFn = Callable[["Tools", "Rows", "FrameBatch"], "FrameBatch"]


def _always(cfg: EngineConfig) -> bool:
    return True


def _nothing_else(cfg: EngineConfig) -> tuple[Component, ...]:
    return ()


@dataclass(frozen=True)
class Step:
    """One step of the chain (see :mod:`fusion_ray.core.steps`)."""

    name: str
    phase: Phase
    run: StepFn
    reads: tuple[Field, ...]
    writes: tuple[Field, ...]
    model: Component | None = None
    """The model kind it needs loaded (None: pure geometry)."""
    wants_gpu: bool = False
    enabled: Callable[[EngineConfig], bool] = field(default=_always, compare=False)
    """Whether a config runs it (one config field per optional step)."""
    also: Callable[[EngineConfig], tuple[Component, ...]] = field(default=_nothing_else, compare=False)
    """The model kinds it needs besides ``model`` under a config (detection by reference embeds)."""

    def components(self, cfg: EngineConfig) -> list[Component]:
        """The model kinds it loads under ``cfg``."""
        own: list[Component] = [] if self.model is None else [self.model]
        return list(dict.fromkeys([*own, *self.also(cfg)]))


@dataclass(frozen=True)
class Capability:
    """One model kind, declared in one file: its registry rows, how a config picks among them, its
    wrapper, its steps and its stand-ins."""

    name: str
    """What it is called in messages ("these options need the <name>")."""
    kind: Component
    """The model kind its rows have and its model is loaded under (``ModelSet[kind]``)."""
    specs: tuple[ModelSpec, ...]
    """Its registry rows (optional models: found by name, downloaded when asked for)."""
    rows: Callable[[EngineConfig], tuple[str, ...]]
    """The rows a config loads for its kind, in load order."""
    wrap: Callable[[ort.InferenceSession, ModelSpec, EngineConfig], Any]
    """The model wrapper of an opened row."""
    steps: tuple[Step, ...] = ()
    """Its steps, placed in the chain by their phase (after the built-in steps of that phase)."""
    standins: Mapping[str, Callable[[int], onnx.ModelProto]] = field(default_factory=dict)
    """A stand-in builder per model name (seed in, labelled stand-in graph out)."""
