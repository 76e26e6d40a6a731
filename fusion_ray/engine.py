"""The frame-level engine: one frame in, one frame out, with per-stage timings.

Every surface uses it: the image command runs it in-process; the Ray Data stages and the
Serve deployments call its building blocks (``detect``, ``align_for_swap``, ``swap_crops``,
``paste_swapped``, ``align_for_enhance``, ``enhance_crops``, ``paste_enhanced``) on batches.
An engine loads only the components it is asked for, so a CPU detect actor never holds the
swapper and a GPU swap actor never holds the detector.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from fusion_ray.config import EngineConfig
from fusion_ray.errors import FusionRayError, NoFaceError
from fusion_ray.models.detector import ScrfdDetector
from fusion_ray.models.embedder import ArcFaceEmbedder, l2_normalise
from fusion_ray.models.enhancer import GfpganEnhancer
from fusion_ray.models.registry import get_spec
from fusion_ray.models.session import create_session
from fusion_ray.models.store import ModelStore, resolve_models_dir
from fusion_ray.models.swapper import InswapperSwapper, read_emap
from fusion_ray.ops.align import align_face
from fusion_ray.ops.blend import poisson_paste
from fusion_ray.ops.classic import classic_face_mask, classic_swap_crop
from fusion_ray.ops.mask import box_mask
from fusion_ray.ops.paste import paste_back
from fusion_ray.ops.select import select_faces
from fusion_ray.types import (
    AffineMatrix,
    Crop,
    Embedding,
    Face,
    Frame,
    Mask,
    SourceIdentity,
    check_frame,
)

log = logging.getLogger(__name__)

Component = Literal["detector", "embedder", "swapper", "enhancer"]
ALL_COMPONENTS: tuple[Component, ...] = ("detector", "embedder", "swapper", "enhancer")
CLASSIC_TEMPLATE = "arcface_128"


def required_components(cfg: EngineConfig) -> set[Component]:
    """The components a full frame-to-frame run with ``cfg`` needs."""
    needed: set[Component] = {"detector", "swapper"}
    if cfg.swap.swapper == "inswapper" or cfg.selection.mode == "reference":
        needed.add("embedder")
    if cfg.enhance.enabled:
        needed.add("enhancer")
    return needed


@dataclass(frozen=True)
class ModelInfo:
    """Which file a component was loaded from and how (for logs, metadata and reports)."""

    name: str
    path: str
    status: str
    providers: tuple[str, ...]
    stand_in: bool


@dataclass
class FrameResult:
    """One processed frame and what happened to it."""

    frame: Frame
    faces_detected: int
    faces_swapped: int
    timings_ms: dict[str, float] = field(default_factory=dict)


@contextmanager
def _timed(timings: dict[str, float], stage: str) -> Iterator[None]:
    start = time.perf_counter()
    try:
        yield
    finally:
        timings[stage] = timings.get(stage, 0.0) + (time.perf_counter() - start) * 1000.0


class Engine:
    """Loads the models named by an :class:`EngineConfig` and runs the swap chain on frames."""

    def __init__(self, cfg: EngineConfig, *, detector: ScrfdDetector | None = None,
                 embedder: ArcFaceEmbedder | None = None, swapper: InswapperSwapper | None = None,
                 enhancer: GfpganEnhancer | None = None,
                 model_info: dict[str, ModelInfo] | None = None) -> None:
        self.cfg = cfg
        self.detector = detector
        self.embedder = embedder
        self.inswapper = swapper
        self.enhancer = enhancer
        self.model_info = dict(model_info or {})
        if cfg.swap.swapper == "classic":
            self.swap_template = CLASSIC_TEMPLATE
            self.swap_crop_size = cfg.swap.classic_crop_size
            self.swap_mask: Mask = classic_face_mask(self.swap_crop_size, cfg.swap.mask_blur)
        else:
            spec = get_spec(cfg.models.swapper)
            assert spec.template is not None
            self.swap_template = spec.template
            self.swap_crop_size = spec.crop_size
            self.swap_mask = box_mask(self.swap_crop_size, padding=cfg.swap.mask_padding, blur=cfg.swap.mask_blur)
        enhance_spec = get_spec(cfg.models.enhancer)
        assert enhance_spec.template is not None
        self.enhance_template = enhance_spec.template
        self.enhance_crop_size = enhance_spec.crop_size
        self.enhance_mask: Mask = box_mask(self.enhance_crop_size, blur=0.3)

    # ----------------------------------------------------------------- loading
    @classmethod
    def load(cls, cfg: EngineConfig, *, components: Sequence[Component] | None = None,
             cpu_budget: float | None = None, store: ModelStore | None = None) -> Engine:
        """Load the components ``cfg`` needs (or just ``components``) with sessions sized to ``cpu_budget``."""
        wanted = set(components) if components is not None else required_components(cfg)
        if store is None:
            store = ModelStore(resolve_models_dir(cfg.models.models_dir), overrides=dict(cfg.models.paths))
        info: dict[str, ModelInfo] = {}

        def open_model(name: str):  # type: ignore[no-untyped-def]
            located = store.locate(name)
            session, sinfo = create_session(located.path, cfg.runtime, cpu_budget=cpu_budget)
            return located, session, sinfo

        def record(name: str, located, sinfo, stand_in: bool) -> None:  # type: ignore[no-untyped-def]
            info[name] = ModelInfo(name, str(located.path), located.status, sinfo.providers, stand_in)
            if stand_in:
                log.warning("model %s at %s is a STAND-IN generated by fusion_ray, not the real model: "
                            "outputs made with it are not real face swaps", name, located.path)

        detector = embedder = swapper = enhancer = None
        if "detector" in wanted:
            located, session, sinfo = open_model(cfg.models.detector)
            detector = ScrfdDetector(session, get_spec(cfg.models.detector), cfg.detector)
            record(cfg.models.detector, located, sinfo, detector.stand_in)
        if "embedder" in wanted:
            located, session, sinfo = open_model(cfg.models.embedder)
            embedder = ArcFaceEmbedder(session, get_spec(cfg.models.embedder))
            record(cfg.models.embedder, located, sinfo, embedder.stand_in)
        if "swapper" in wanted and cfg.swap.swapper == "inswapper":
            located, session, sinfo = open_model(cfg.models.swapper)
            swapper = InswapperSwapper(session, get_spec(cfg.models.swapper), read_emap(located.path))
            record(cfg.models.swapper, located, sinfo, swapper.stand_in)
        if "enhancer" in wanted:
            located, session, sinfo = open_model(cfg.models.enhancer)
            enhancer = GfpganEnhancer(session, get_spec(cfg.models.enhancer))
            record(cfg.models.enhancer, located, sinfo, enhancer.stand_in)
        return cls(cfg, detector=detector, embedder=embedder, swapper=swapper, enhancer=enhancer, model_info=info)

    @property
    def stand_in_models(self) -> list[str]:
        """Names of loaded models that are fusion_ray stand-ins, not the real weights."""
        return sorted(name for name, item in self.model_info.items() if item.stand_in)

    def _need(self, component: Component):  # type: ignore[no-untyped-def]
        model = {"detector": self.detector, "embedder": self.embedder,
                 "swapper": self.inswapper, "enhancer": self.enhancer}[component]
        if model is None:
            raise FusionRayError(f"this engine was loaded without its {component}")
        return model

    # --------------------------------------------------------- building blocks
    def detect(self, frame: Frame) -> list[Face]:
        """Faces in the frame by descending score; [] when there is none."""
        detector: ScrfdDetector = self._need("detector")
        return detector.detect(frame)

    def embed_faces(self, frame: Frame, faces: Sequence[Face]) -> list[Face]:
        """The faces with their ArcFace embeddings (needed by reference selection)."""
        if not faces:
            return []
        embedder: ArcFaceEmbedder = self._need("embedder")
        return embedder.embed_faces(frame, faces)

    def select(self, faces: Sequence[Face], reference: Embedding | None = None) -> list[Face]:
        """The faces the selection config chooses."""
        sel = self.cfg.selection
        return select_faces(faces, sel.mode, index=sel.index, reference=reference, max_distance=sel.max_distance)

    def align_for_swap(self, frame: Frame, landmarks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Swap crops (N, S, S, 3) and their affine matrices (N, 2, 3) for (N, 5, 2) landmarks."""
        return _align_many(frame, landmarks, self.swap_template, self.swap_crop_size)

    def swap_crops(self, crops: np.ndarray, identities: SourceIdentity | Sequence[SourceIdentity]) -> np.ndarray:
        """Swap a batch of target crops; one identity for all or one per crop."""
        if len(crops) == 0:
            return crops.copy()
        rows = [identities] * len(crops) if isinstance(identities, SourceIdentity) else list(identities)
        if len(rows) != len(crops):
            raise ValueError(f"expected one identity per crop ({len(crops)}), got {len(rows)}")
        if self.cfg.swap.swapper == "classic":
            out = []
            for crop, identity in zip(crops, rows, strict=True):
                if identity.crop is None or identity.crop.shape != crop.shape:
                    raise ValueError("classic swap needs a source crop of the swap crop size")
                out.append(classic_swap_crop(identity.crop, crop, self.swap_mask))
            return np.stack(out)
        swapper: InswapperSwapper = self._need("swapper")
        latent_of: dict[int, np.ndarray] = {}
        for identity in rows:
            if id(identity) not in latent_of:
                latent_of[id(identity)] = self._latent(swapper, identity)
        return swapper.swap(crops, np.stack([latent_of[id(identity)] for identity in rows]))

    @staticmethod
    def _latent(swapper: InswapperSwapper, identity: SourceIdentity) -> np.ndarray:
        if identity.latent is not None:
            return identity.latent
        if identity.embedding is None:
            raise ValueError("inswapper needs a source identity with an embedding")
        return swapper.latent(identity.embedding)

    def paste_swapped(self, frame: Frame, crops: np.ndarray, affines: np.ndarray) -> Frame:
        """The frame with each swapped crop pasted back (ROI only)."""
        out = frame
        poisson = self.cfg.swap.swapper == "classic" and self.cfg.swap.poisson
        for crop, affine in zip(crops, affines, strict=True):
            paste = poisson_paste if poisson else paste_back
            out = paste(out, crop, affine, self.swap_mask)
        return out if len(crops) else frame.copy()

    def align_for_enhance(self, frame: Frame, landmarks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Enhancer crops (N, 512, 512, 3) and their affine matrices for (N, 5, 2) landmarks."""
        return _align_many(frame, landmarks, self.enhance_template, self.enhance_crop_size)

    def enhance_crops(self, crops: np.ndarray) -> np.ndarray:
        enhancer: GfpganEnhancer = self._need("enhancer")
        return enhancer.enhance(crops, self.cfg.enhance.blend)

    def paste_enhanced(self, frame: Frame, crops: np.ndarray, affines: np.ndarray) -> Frame:
        out = frame.copy()
        for crop, affine in zip(crops, affines, strict=True):
            out = paste_back(out, crop, affine, self.enhance_mask)
        return out

    # ------------------------------------------------------------ identities
    def prepare_source(self, images: Sequence[Frame], names: Sequence[str] | None = None) -> SourceIdentity:
        """Embed the largest face of each source image once; several images average into one identity."""
        if not images:
            raise NoFaceError("no source image given")
        labels = list(names) if names is not None else [f"source #{i + 1}" for i in range(len(images))]
        faces: list[Face] = []
        for image, label in zip(images, labels, strict=True):
            check_frame(image, label)
            found = self.detect(image)
            if not found:
                raise NoFaceError(f"no face found in source image {label}")
            faces.append(max(found, key=lambda f: f.area))
        embedding = None
        if self.embedder is not None:
            vectors = np.stack([self.embedder.embed_faces(img, [f])[0].embedding for img, f in zip(images, faces, strict=True)])  # type: ignore[misc]
            embedding = l2_normalise(vectors.mean(axis=0, keepdims=True))[0]
        latent = crop = None
        if self.cfg.swap.swapper == "classic":
            best = int(np.argmax([f.score for f in faces]))
            crop, _ = align_face(images[best], faces[best].landmarks_5, self.swap_template, self.swap_crop_size)
        else:
            if embedding is None:
                raise FusionRayError("the inswapper needs the embedder to prepare a source")
            # Without the swapper loaded here (a driver preparing sources for a pipeline), the
            # swap stage derives the latent from the embedding.
            latent = self.inswapper.latent(embedding) if self.inswapper is not None else None
        return SourceIdentity(embedding=embedding, latent=latent, crop=crop, num_images=len(images))

    def prepare_reference(self, image: Frame, name: str = "reference image") -> Embedding:
        """The embedding of the largest face in the reference image."""
        found = self.detect(check_frame(image, name))
        if not found:
            raise NoFaceError(f"no face found in {name}")
        face = max(found, key=lambda f: f.area)
        embedded = self.embed_faces(image, [face])[0]
        assert embedded.embedding is not None
        return embedded.embedding

    # ----------------------------------------------------------- whole frame
    def process_frame(self, frame: Frame, identity: SourceIdentity,
                      reference: Embedding | None = None) -> FrameResult:
        """Detect, select, swap, optionally enhance, and paste back. No face: the frame unchanged."""
        check_frame(frame)
        timings: dict[str, float] = {}
        with _timed(timings, "detect"):
            faces = self.detect(frame)
        if faces and self.cfg.selection.mode == "reference":
            with _timed(timings, "embed"):
                faces = self.embed_faces(frame, faces)
        chosen = self.select(faces, reference)
        if not chosen:
            return FrameResult(frame.copy(), len(faces), 0, timings)
        landmarks = landmarks_of(chosen)
        with _timed(timings, "align"):
            crops, affines = self.align_for_swap(frame, landmarks)
        with _timed(timings, "swap"):
            swapped = self.swap_crops(crops, identity)
        with _timed(timings, "paste"):
            out = self.paste_swapped(frame, swapped, affines)
        if self.cfg.enhance.enabled:
            with _timed(timings, "enhance_align"):
                e_crops, e_affines = self.align_for_enhance(out, landmarks)
            with _timed(timings, "enhance"):
                enhanced = self.enhance_crops(e_crops)
            with _timed(timings, "enhance_paste"):
                out = self.paste_enhanced(out, enhanced, e_affines)
        return FrameResult(out, len(faces), len(chosen), timings)


def landmarks_of(faces: Sequence[Face]) -> np.ndarray:
    """(N, 5, 2) float32 landmarks of the faces."""
    if not faces:
        return np.zeros((0, 5, 2), np.float32)
    return np.stack([face.landmarks_5 for face in faces]).astype(np.float32)


def _align_many(frame: Frame, landmarks: np.ndarray, template: str,
                crop_size: int) -> tuple[np.ndarray, np.ndarray]:
    crops: list[Crop] = []
    affines: list[AffineMatrix] = []
    for points in np.asarray(landmarks, np.float32).reshape(-1, 5, 2):
        crop, matrix = align_face(frame, points, template, crop_size)
        crops.append(crop)
        affines.append(matrix)
    if not crops:
        return np.zeros((0, crop_size, crop_size, 3), np.uint8), np.zeros((0, 2, 3), np.float64)
    return np.stack(crops), np.stack(affines)
