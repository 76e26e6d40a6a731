"""Ray Serve deployments over the typed core (:mod:`fusion_ray.core`).

- :class:`DetectorDeployment` (CPU): the chain's steps before the swap on one frame per call; also
  picks and cuts the source face of a source image for the embedder (``core.identity``).
- :class:`SwapperDeployment` (GPU when present): ``chain.swap`` with ``@serve.batch`` across
  concurrent requests (one backend call over every face of every request in the batch), and
  the ArcFace embedder with its own ``@serve.batch`` for source identities.
- :class:`EnhancerDeployment` (GPU when present): ``chain.enhance`` with ``@serve.batch`` (grouped by
  the requests' enhancer weights).
- :class:`ServiceStateDeployment` (one replica): the bounded source store and the merged metrics.

Sessions are created in the replicas (``ModelSet.load``) with threads sized
to the replica's CPU budget; nothing holding a session is ever pickled. Per-request source
identities travel with the swap call (a 512-d latent, 2 KB) and become the batch's identity
mapping, keyed by each request's source id: swapper replicas
keep no state, so any replica serves any request and a restarted replica loses nothing.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from dataclasses import dataclass
from typing import Any

import cv2
import numpy as np
from ray import serve

from fusion_ray.config import EngineConfig
from fusion_ray.core import chain, identity
from fusion_ray.core.facebatch import NO_TRACK, FaceBatch, FrameBatch
from fusion_ray.core.lru import LockedLru
from fusion_ray.core.modelset import Component, ModelInfo, ModelSet
from fusion_ray.core.redetect import CropBox, RoiResult, redetect
from fusion_ray.core.sources import SourceStore
from fusion_ray.core.steps import Chain, Rows, Tools
from fusion_ray.core.swapper import SwapBackend, swap_backend
from fusion_ray.core.tracking import TrackPrediction
from fusion_ray.facefusion_options import NO_OPTIONS, FaceFusionOptions, configured
from fusion_ray.live.backend import SourceStatus
from fusion_ray.models.detector import DetectorCanvases, ScrfdDetector
from fusion_ray.models.enhancer import blend_crops
from fusion_ray.serve.batching import AdaptiveWait
from fusion_ray.serve.metrics import MetricsStore, Snapshot
from fusion_ray.serve.quality import loaded_config, quality_components
from fusion_ray.serve.settings import BatchSettings, ServeSettings
from fusion_ray.types import SourceIdentity

log = logging.getLogger(__name__)

MAX_SETUPS = 16
"""Sets of request options whose steps (a detector replica) or swap backend (a swapper replica) are kept made."""


@dataclass(frozen=True)
class DetectReply:
    """The detector's answer for one frame: the selected faces with their swap crops, how many
    faces it found, the frame's error ("" when it is fine) and the model time."""

    faces: FaceBatch
    faces_detected: int
    error: str
    compute_s: float

    @property
    def faces_selected(self) -> int:
        return len(self.faces)


def _configure_batching(method: Any, batch: BatchSettings) -> None:
    """Batch size and wait window of a ``@serve.batch`` method, from config (set per replica)."""
    method.set_max_batch_size(batch.max_batch_size)
    method.set_batch_wait_timeout_s(batch.batch_wait_timeout_s)


def _adaptive(settings: ServeSettings, batch: BatchSettings) -> AdaptiveWait:
    return AdaptiveWait(batch.batch_wait_timeout_s, enabled=settings.batching.adaptive_wait)


def _set_wait(method: Any, wait_s: float) -> None:
    if method._get_batch_wait_timeout_s() != wait_s:
        method.set_batch_wait_timeout_s(wait_s)


def _batch_record(requests: int, faces: int, seconds: float) -> dict[str, float]:
    return {"requests": requests, "faces": faces, "compute_s": seconds}


@serve.deployment(name="Detector")
class DetectorDeployment:
    """CPU: the chain's steps before the swap (detection, selection, 68-point landmarks, the swap
    crops and the target-crop masks), each request with its own options."""

    def __init__(self, settings: ServeSettings) -> None:
        self.cfg: EngineConfig = settings.engine.in_ray_actor(settings.deployments.detector.num_gpus > 0)
        budget = settings.deployments.detector.threads_budget()
        threads = max(1, math.ceil(budget)) if budget is not None else None
        if threads is not None:
            cv2.setNumThreads(threads)
        # The landmarker and the occluder requests may ask for (the parser runs on swapped crops: fused only).
        components: list[Component] = ["detector", *(c for c in quality_components(settings) if c != "parser")]
        loading = loaded_config(settings).in_ray_actor(settings.deployments.detector.num_gpus > 0)
        self.models = ModelSet.load(loading, components, cpu_budget=budget)
        self._canvases = DetectorCanvases(self.models.need_detector())
        self._setups: LockedLru[FaceFusionOptions, tuple[Tools, Chain]] = LockedLru(MAX_SETUPS, self._made)
        log.info("detector replica ready (cpu budget %s)", budget)

    def _detector(self, size: int | None, *, square: bool = False) -> ScrfdDetector:
        """The detector, or one over the same session on a smaller canvas (a live stream's level 4;
        square crops for re-detection)."""
        return self._canvases.get(size, square=square)

    def _setup(self, options: FaceFusionOptions) -> tuple[Tools, Chain]:
        """The tools and the steps before the swap under ``options``, made once per set of options
        (the :data:`MAX_SETUPS` most recently used kept)."""
        return self._setups.get(options)

    def _made(self, options: FaceFusionOptions) -> tuple[Tools, Chain]:
        """(The target embedding for the swapper weight is the fused placement's.)"""
        cfg = configured(self.cfg, options)
        before = Chain.of(cfg).split("target_mask")[0]
        return Tools(cfg, self.models), Chain(tuple(s for s in before.steps if s.name != "target_embed"))

    def detect(self, frame: np.ndarray, mode: str, index: int, size: int | None = None,
               options: FaceFusionOptions = NO_OPTIONS) -> DetectReply:
        """Faces found, and the selected faces (a FaceBatch with swap crops, cut at the crop the
        request's options ask, and their target-crop masks)."""
        start = time.perf_counter()
        tools, steps = self._setup(options)
        done = steps.run(tools, Rows([chain.Selection(mode, index)], [""], canvases=[size]), FrameBatch.of([frame]))
        detected = int(done.counter("faces_detected")[0]) if not done.errors[0] else 0
        return DetectReply(done.faces, detected, done.errors[0], time.perf_counter() - start)

    def redetect(self, frame: np.ndarray, predictions: list[TrackPrediction],
                 previous: dict[int, CropBox]) -> RoiResult:
        """Each predicted face re-detected on a small crop around it (a live stream's level 3:
        the stream's tracker lives in the ingress; this replica keeps no per-stream state)."""
        tracking = self.cfg.tracking
        return redetect(frame, self._detector(tracking.roi_canvas, square=True), predictions, tracking, previous)

    def source_face(self, frame: np.ndarray) -> identity.SourceFace | None:
        """The source image's face cut for the embedder (and the classic swap), or None."""
        return source_face(self.models, self.cfg, frame)

    def model_info(self) -> dict[str, ModelInfo]:
        return dict(self.models.info)

    def check_health(self) -> None:
        self.models.need_detector()


@serve.deployment(name="Swapper")
class SwapperDeployment:
    """GPU: batched swap over all faces of all requests in a batch, and batched source embedding."""

    def __init__(self, settings: ServeSettings) -> None:
        self.cfg = settings.engine.in_ray_actor(settings.deployments.swapper.num_gpus > 0)
        budget = settings.deployments.swapper.threads_budget()
        # The classic swap needs no model at all: the identity is the source crop.
        components: list[Any] = ["swapper", "embedder"] if self.cfg.swap.swapper == "inswapper" else []
        self.models = ModelSet.load(self.cfg, components, cpu_budget=budget)
        self.backend = swap_backend(self.cfg, self.models)
        self._backends: LockedLru[FaceFusionOptions, SwapBackend] = LockedLru(MAX_SETUPS, self._made_backend)
        _configure_batching(self._swap_batched, settings.batching.swap)  # type: ignore[misc]
        _configure_batching(self._embed_batched, settings.batching.embed)
        self.swap_wait = _adaptive(settings, settings.batching.swap)
        self.embed_wait = _adaptive(settings, settings.batching.embed)
        log.info("swapper replica ready (cpu budget %s, swap batch %d)", budget,
                 settings.batching.swap.max_batch_size)

    async def swap(self, crops: np.ndarray, identity: SourceIdentity, source_id: str,
                   options: FaceFusionOptions = NO_OPTIONS) -> dict[str, Any]:
        """One request: its (n, S, S, 3) crops, identity, source id and options -> swapped crops (batched)."""
        _set_wait(self._swap_batched, self.swap_wait.arrival(time.monotonic()))  # type: ignore[misc]
        return await self._swap_batched(crops, identity, source_id, options)  # type: ignore[misc,call-arg,arg-type,no-any-return]

    @serve.batch  # type: ignore[arg-type]
    async def _swap_batched(  # type: ignore[misc]
        self, crops: list[np.ndarray], identities: list[SourceIdentity], source_ids: list[str],
        options: list[FaceFusionOptions],
    ) -> list[dict[str, Any]]:
        # The model call leaves the event loop free, so the next batch can gather meanwhile.
        return await asyncio.to_thread(self._swap_batch, crops, identities, source_ids, options)

    def _swap_batch(self, crops: list[np.ndarray], identities: list[SourceIdentity], source_ids: list[str],
                    options: list[FaceFusionOptions]) -> list[dict[str, Any]]:
        """One backend call over every face of the requests with the same options (the classic swap
        blends through the options' crop mask); a request with a bad identity fails alone."""
        start = time.perf_counter()
        results: list[dict[str, Any]] = [{} for _ in crops]
        for wanted in dict.fromkeys(options):
            rows = [i for i, o in enumerate(options) if o == wanted]
            errors = [""] * len(rows)
            faces = _crops_batch([crops[i] for i in rows], [source_ids[i] for i in rows])
            swapped = chain.swap(self._backend(wanted), faces,
                                 {source_ids[i]: identities[i] for i in rows}, errors)
            for k, i in enumerate(rows):
                results[i] = {"crops": _crops_of(swapped, k, crops[i]), "error": errors[k]}
        results[0]["batch"] = _batch_record(len(crops), sum(len(c) for c in crops), time.perf_counter() - start)
        return results

    def _backend(self, options: FaceFusionOptions) -> SwapBackend:
        """The swap backend under ``options`` (made once per set of options, the most recent kept)."""
        return self._backends.get(options)

    def _made_backend(self, options: FaceFusionOptions) -> SwapBackend:
        if options == NO_OPTIONS:
            return self.backend
        return swap_backend(configured(self.cfg, options), self.models)

    async def embed(self, faces: list[identity.SourceFace]) -> dict[str, Any]:
        """One request: the source faces of its source images -> one identity (embedding batched)."""
        _set_wait(self._embed_batched, self.embed_wait.arrival(time.monotonic()))
        return await self._embed_batched(faces)  # type: ignore[arg-type,no-any-return]

    @serve.batch
    async def _embed_batched(self, requests: list[list[identity.SourceFace]]) -> list[dict[str, Any]]:
        return await asyncio.to_thread(self._embed_batch, requests)

    def _embed_batch(self, requests: list[list[identity.SourceFace]]) -> list[dict[str, Any]]:
        return embed_batch(self.models, self.cfg, requests)

    def model_info(self) -> dict[str, ModelInfo]:
        return dict(self.models.info)

    def check_health(self) -> None:
        if self.cfg.swap.swapper == "inswapper":
            self.models.need_embedder()
            self.models.need_swap_model()


@serve.deployment(name="Enhancer")
class EnhancerDeployment:
    """GPU: the batched enhancer over the faces of all requests in a batch (one call per enhancer weight
    the requests ask); per-request blend after."""

    def __init__(self, settings: ServeSettings) -> None:
        cfg = settings.engine.in_ray_actor(settings.deployments.enhancer.num_gpus > 0)
        budget = settings.deployments.enhancer.threads_budget()
        self.models = ModelSet.load(cfg, ["enhancer"], cpu_budget=budget)
        _configure_batching(self._enhance_batched, settings.batching.enhance)  # type: ignore[misc]
        self.enhance_wait = _adaptive(settings, settings.batching.enhance)

    async def enhance(self, crops: np.ndarray, blend: float, weight: float | None = None) -> dict[str, Any]:
        """One request: its (n, 512, 512, 3) enhancer crops, blend and enhancer weight (None: the
        service's) -> enhanced, blended crops (batched)."""
        _set_wait(self._enhance_batched, self.enhance_wait.arrival(time.monotonic()))  # type: ignore[misc]
        return await self._enhance_batched(crops, blend, weight)  # type: ignore[misc,call-arg,arg-type,no-any-return]

    @serve.batch  # type: ignore[arg-type]
    async def _enhance_batched(  # type: ignore[misc]
        self, crops: list[np.ndarray], blends: list[float], weights: list[float | None],
    ) -> list[dict[str, Any]]:
        return await asyncio.to_thread(self._enhance_batch, crops, blends, weights)

    def _enhance_batch(self, crops: list[np.ndarray], blends: list[float],
                       weights: list[float | None]) -> list[dict[str, Any]]:
        # The model runs at blend 1.0 (pure enhanced), once per distinct weight over every face of the
        # requests with it; each request's blend is applied after with the same blend_crops the
        # engine uses, so results equal the engine's.
        start = time.perf_counter()
        results: list[dict[str, Any]] = [{} for _ in crops]
        for weight in dict.fromkeys(weights):
            rows = [i for i, w in enumerate(weights) if w == weight]
            faces = _crops_batch([crops[i] for i in rows], [""] * len(rows))
            enhanced = chain.enhance(self.models.need_enhancer(), faces, 1.0, weight)
            for k, i in enumerate(rows):
                out = _crops_of(enhanced, k, crops[i])
                if len(crops[i]):
                    out = blend_crops(crops[i], out, float(blends[i]))
                results[i] = {"crops": out, "error": ""}
        results[0]["batch"] = _batch_record(len(crops), sum(len(c) for c in crops), time.perf_counter() - start)
        return results

    def model_info(self) -> dict[str, ModelInfo]:
        return dict(self.models.info)

    def check_health(self) -> None:
        self.models.need_enhancer()


def source_face(models: ModelSet, cfg: EngineConfig, frame: np.ndarray) -> identity.SourceFace | None:
    """A source image's largest face cut for the embedder (and the classic swap), or None."""
    face = identity.largest_face(models.need_detector().detect(frame))
    return identity.cut_source_face(frame, face, cfg) if face is not None else None


def embed_batch(models: ModelSet, cfg: EngineConfig, requests: list[list[identity.SourceFace]]) -> list[dict[str, Any]]:
    """One embedder call over every source face of every request (none for the classic swap)."""
    start = time.perf_counter()
    everyone = [face for faces in requests for face in faces]
    vectors = identity.embed_source_faces(models.embedder, everyone) if models.embedder is not None else None
    results: list[dict[str, Any]] = []
    offset = 0
    for faces in requests:
        rows = vectors[offset:offset + len(faces)] if vectors is not None else None
        offset += len(faces)
        results.append({"identity": identity.identity_from(faces, rows, cfg, models.inswapper)})
    results[0]["batch"] = _batch_record(len(requests), len(everyone), time.perf_counter() - start)
    return results


def _crops_batch(crops: list[np.ndarray], source_ids: list[str]) -> FaceBatch:
    """The requests' crops as one FaceBatch (request i is frame i); only crops are needed."""
    n = sum(len(c) for c in crops)
    frame_index = np.repeat(np.arange(len(crops), dtype=np.int64), [len(c) for c in crops])
    size = next((c.shape[1] for c in crops if len(c)), 0)
    return FaceBatch(frame_index, np.zeros((n, 4), np.float32), np.zeros((n, 5, 2), np.float32),
                     np.ones(n, np.float32), np.asarray([source_ids[int(i)] for i in frame_index], object),
                     np.full(n, NO_TRACK, np.int64),
                     crop=np.concatenate(crops) if n else np.zeros((0, size, size, 3), np.uint8),
                     affine_matrix=np.zeros((n, 2, 3), np.float64))


def _crops_of(faces: FaceBatch, request: int, original: np.ndarray) -> np.ndarray:
    """Request ``request``'s crops out of a processed batch (its input crops when it failed)."""
    mine = faces.of_frame(request)
    return mine.crop if len(mine) and mine.crop is not None else original


@serve.deployment(name="ServiceState")
class ServiceStateDeployment:
    """One replica: registered source identities (bounded LRU) and the merged metrics."""

    def __init__(self, settings: ServeSettings) -> None:
        self.sources = SourceStore(settings.sources.max_count)
        self.metrics = MetricsStore()
        self.draining = False
        self._check_s = settings.live.source_check_s
        self._last_check = -math.inf

    async def put_source(self, identity: SourceIdentity) -> str:
        return self.sources.put(identity)

    async def get_source(self, source_id: str) -> SourceIdentity | None:
        return self.sources.get(source_id)

    async def delete_source(self, source_id: str) -> bool:
        return self.sources.delete(source_id)

    async def source_status(self, source_ids: list[str]) -> SourceStatus:
        """For the ingress replicas' live streams: which sources were deleted, and whether to drain."""
        self._last_check = time.monotonic()
        return SourceStatus(self.sources.deleted_of(set(source_ids)), self.draining)

    async def drain(self) -> float:
        """The service is shutting down: every ingress replica ends its streams (close 1001) at its
        next check. Returns how long to wait for that: 0 when no replica has checked lately (none
        has a stream open), else two check intervals."""
        self.draining = True
        return 2 * self._check_s if time.monotonic() - self._last_check < 2 * self._check_s else 0.0

    async def merge_metrics(self, snapshot: Snapshot) -> None:
        self.metrics.merge(snapshot)

    async def render_metrics(self, gauges: list[tuple[str, str, dict[str, str], float]]) -> str:
        own: list[tuple[str, str, dict[str, str], float]] = [
            ("fusion_ray_sources_stored", "Source identities in the store.", {}, float(len(self.sources))),
            ("fusion_ray_sources_capacity", "Most source identities the store keeps.", {},
             float(self.sources.max_count)),
            ("fusion_ray_sources_evicted", "Identities dropped to stay within capacity (since start).", {},
             float(self.sources.evicted)),
        ]
        return self.metrics.render([*gauges, *own])

    async def ping(self) -> dict[str, ModelInfo]:
        return {}
