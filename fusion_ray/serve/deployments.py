"""Ray Serve deployments over the typed core (:mod:`fusion_ray.core`).

The split placement's deployments each run one part of the declared chain
(:data:`SPLIT_PARTS`, every step of :class:`~fusion_ray.core.steps.Chain` in the part's phases,
through :class:`~fusion_ray.core.frames.FrameChain`); the fused deployment
(:mod:`fusion_ray.serve.fused`) runs all of it:

- :class:`DetectorDeployment` (CPU): the ``detect`` part on one frame per call; also picks and
  cuts the source face of a source image for the embedder (``core.identity``).
- :class:`SwapperDeployment` (GPU when present): the ``swap`` part with ``@serve.batch`` across
  concurrent requests (one backend call over every face of every request in the batch with the
  same options), and the ArcFace embedder with its own ``@serve.batch`` for source identities.
- :class:`EnhancerDeployment` (GPU when present): the ``enhance`` part with ``@serve.batch``.
- :class:`ServiceStateDeployment` (one replica): the bounded source store and the merged metrics.

Sessions are created in the replicas (``ModelSet.load``) with threads sized to the replica's CPU
budget; nothing holding a session is ever pickled. A frame's state between parts
(:class:`~fusion_ray.core.frames.FrameState`: its faces with their crops and masks) and its source
identity (a 512-d latent, 2 KB) travel with each call, and the frame itself only to the parts
that read it: replicas keep no per-request state, so any replica serves any request and a
restarted replica loses nothing.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import cv2
import numpy as np
from ray import serve

from fusion_ray.config import EngineConfig
from fusion_ray.core import identity
from fusion_ray.core.frames import FrameChain, FrameJob, FrameState
from fusion_ray.core.modelset import Component, ModelInfo, ModelSet
from fusion_ray.core.source_store import SourceStore
from fusion_ray.core.steps import Phase
from fusion_ray.live.backend import SourceStatus
from fusion_ray.serve.batching import AdaptiveWait
from fusion_ray.serve.metrics import MetricsStore, Snapshot, step_seconds
from fusion_ray.serve.quality import loaded_config, part_components
from fusion_ray.serve.settings import BatchSettings, ServeSettings
from fusion_ray.types import SourceIdentity

log = logging.getLogger(__name__)

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


@dataclass(frozen=True)
class SplitPart:
    """One part of the chain in the split placement: its name (the stage timed in the ingress),
    where it runs (a deployment, or ``ingress``) and the last phase it runs (it starts after the
    previous part's)."""

    name: str
    runs_in: str
    until: Phase


SPLIT_PARTS: tuple[SplitPart, ...] = (
    SplitPart("detect", "Detector", "target_mask"),
    SplitPart("swap", "Swapper", "swapped_mask"),
    SplitPart("paste", "ingress", "enhance_align"),
    SplitPart("enhance", "Enhancer", "enhance_mask"),
    SplitPart("paste_enhanced", "ingress", "paste_enhanced"),
)
"""The split placement, declared once: the chain's phases cut into parts, each part every step
of :class:`~fusion_ray.core.steps.Chain` in its phases (the steps before the swap, with the
target-crop masks and the target embedding, on the CPU detector; the swap and the swapped-crop
masks on the swapper; pasting in the ingress, which loads no model; the enhancer and its mask on
the enhancer)."""


def part_bounds(name: str) -> tuple[Phase | None, Phase]:
    """The (after, until) phases of the split part ``name``."""
    names = [p.name for p in SPLIT_PARTS]
    k = names.index(name)
    return (SPLIT_PARTS[k - 1].until if k else None), SPLIT_PARTS[k].until


def _part_record(start: float, jobs: int, states: list[FrameState], timings: dict[str, float]) -> dict[str, Any]:
    return {"batch": _batch_record(jobs, sum(len(s.faces) for s in states), time.perf_counter() - start),
            "steps": step_seconds(timings)}


@serve.deployment(name="Detector")
class DetectorDeployment:
    """CPU: the split placement's ``detect`` part (following a live stream's faces or detecting,
    selection, 68-point landmarks, the swap crops, the target-crop masks, the target embedding),
    each request with its own options; one frame a call."""

    def __init__(self, settings: ServeSettings) -> None:
        self.cfg: EngineConfig = settings.engine.in_ray_actor(settings.deployments.detector.num_gpus > 0)
        budget = settings.deployments.detector.threads_budget()
        threads = max(1, math.ceil(budget)) if budget is not None else None
        if threads is not None:
            cv2.setNumThreads(threads)
        self.after, self.until = part_bounds("detect")
        components: list[Component] = ["detector", *part_components(settings, self.after, self.until)]
        loading = loaded_config(settings).in_ray_actor(settings.deployments.detector.num_gpus > 0)
        self.models = ModelSet.load(loading, list(dict.fromkeys(components)), cpu_budget=budget)
        self.chain = FrameChain(self.cfg, self.models)
        log.info("detector replica ready (cpu budget %s)", budget)

    def find(self, job: FrameJob) -> dict[str, Any]:
        """The job's part: its state, and its follower (a copy here) updated for the ingress to keep."""
        timings: dict[str, float] = {}
        state = self.chain.find([job], timings, self.until)[0]
        return {"state": state, "follower": job.request.follower, "steps": step_seconds(timings)}

    def source_face(self, frame: np.ndarray) -> identity.SourceFace | None:
        """The source image's face cut for the embedder (and the classic swap), or None."""
        return source_face(self.models, self.cfg, frame)

    def model_info(self) -> dict[str, ModelInfo]:
        return dict(self.models.info)

    def check_health(self) -> None:
        self.models.need_detector()


class _BatchedPart:
    """A split part over the frames of concurrent requests, batched (``@serve.batch`` in the
    deployment): each model once per batch, per set of options."""

    def __init__(self, cfg: EngineConfig, models: ModelSet, name: str) -> None:
        self.chain = FrameChain(cfg, models, detects=False)
        self.after, self.until = part_bounds(name)

    def run(self, jobs: list[FrameJob], states: list[FrameState]) -> list[dict[str, Any]]:
        start = time.perf_counter()
        timings: dict[str, float] = {}
        assert self.after is not None
        out = self.chain.advance(jobs, states, self.after, self.until, timings)
        results: list[dict[str, Any]] = [{"state": s} for s in out]
        results[0].update(_part_record(start, len(jobs), out, timings))
        return results


class BatchedEmbedding:
    """Source embedding batched across requests, for the deployment that holds the embedder (the
    split placement's Swapper, the fused deployment): ``models``, ``cfg`` and ``embed_wait`` are
    set by the deployment's ``__init__``. Each deployment class declares its own
    ``@serve.batch`` ``_embed_batched`` calling :meth:`embed_requests`: ``serve.batch`` keeps one
    queue (and its wait and size) per decorated function, so one function shared by two classes
    would batch their requests together where both live in one process."""

    models: ModelSet
    cfg: EngineConfig
    embed_wait: AdaptiveWait
    _embed_batched: Callable[..., Any]

    async def embed(self, faces: list[identity.SourceFace]) -> dict[str, Any]:
        """One request: the source faces of its source images -> one identity (embedding batched)."""
        _set_wait(self._embed_batched, self.embed_wait.arrival(time.monotonic()))
        return await self._embed_batched(faces)  # type: ignore[arg-type,no-any-return]

    async def embed_requests(self, requests: list[list[identity.SourceFace]]) -> list[dict[str, Any]]:
        """A batch of requests' source faces -> one identity each (the model call off the event loop)."""
        return await asyncio.to_thread(embed_batch, self.models, self.cfg, requests)


@serve.deployment(name="Swapper")
class SwapperDeployment(BatchedEmbedding):
    """GPU: the split placement's ``swap`` part (the swap and the swapped-crop masks) batched over
    every face of the requests in a batch, and batched source embedding."""

    def __init__(self, settings: ServeSettings) -> None:
        self.cfg = settings.engine.in_ray_actor(settings.deployments.swapper.num_gpus > 0)
        budget = settings.deployments.swapper.threads_budget()
        after, until = part_bounds("swap")
        components: list[Component] = [*part_components(settings, after, until), *embedding_components(self.cfg)]
        loading = loaded_config(settings).in_ray_actor(settings.deployments.swapper.num_gpus > 0)
        self.models = ModelSet.load(loading, list(dict.fromkeys(components)), cpu_budget=budget)
        self.part = _BatchedPart(self.cfg, self.models, "swap")
        _configure_batching(self._swap_batched, settings.batching.swap)  # type: ignore[misc]
        _configure_batching(self._embed_batched, settings.batching.embed)
        self.swap_wait = _adaptive(settings, settings.batching.swap)
        self.embed_wait = _adaptive(settings, settings.batching.embed)
        log.info("swapper replica ready (cpu budget %s, swap batch %d)", budget,
                 settings.batching.swap.max_batch_size)


    @serve.batch
    async def _embed_batched(self, requests: list[list[identity.SourceFace]]) -> list[dict[str, Any]]:
        return await self.embed_requests(requests)
    async def advance(self, job: FrameJob, state: FrameState) -> dict[str, Any]:
        """One frame's part (batched with the other requests')."""
        _set_wait(self._swap_batched, self.swap_wait.arrival(time.monotonic()))  # type: ignore[misc]
        return await self._swap_batched(job, state)  # type: ignore[misc,call-arg,arg-type,no-any-return]

    @serve.batch  # type: ignore[arg-type]
    async def _swap_batched(self, jobs: list[FrameJob], states: list[FrameState]) -> list[dict[str, Any]]:  # type: ignore[misc]
        # The model call leaves the event loop free, so the next batch can gather meanwhile.
        return await asyncio.to_thread(self.part.run, jobs, states)

    def model_info(self) -> dict[str, ModelInfo]:
        return dict(self.models.info)

    def check_health(self) -> None:
        if self.cfg.swap.swapper == "inswapper":
            self.models.need_embedder()
            self.models.need_swap_model()


@serve.deployment(name="Enhancer")
class EnhancerDeployment:
    """GPU: the split placement's ``enhance`` part (the enhancer and its mask) batched over the faces
    of the requests in a batch (one model call per enhancer weight and blend they ask)."""

    def __init__(self, settings: ServeSettings) -> None:
        cfg = settings.engine.in_ray_actor(settings.deployments.enhancer.num_gpus > 0)
        budget = settings.deployments.enhancer.threads_budget()
        after, until = part_bounds("enhance")
        self.models = ModelSet.load(cfg, part_components(settings, after, until), cpu_budget=budget)
        self.part = _BatchedPart(cfg, self.models, "enhance")
        _configure_batching(self._enhance_batched, settings.batching.enhance)  # type: ignore[misc]
        self.enhance_wait = _adaptive(settings, settings.batching.enhance)

    async def advance(self, job: FrameJob, state: FrameState) -> dict[str, Any]:
        """One frame's part (batched with the other requests')."""
        _set_wait(self._enhance_batched, self.enhance_wait.arrival(time.monotonic()))  # type: ignore[misc]
        return await self._enhance_batched(job, state)  # type: ignore[misc,call-arg,arg-type,no-any-return]

    @serve.batch  # type: ignore[arg-type]
    async def _enhance_batched(self, jobs: list[FrameJob], states: list[FrameState]) -> list[dict[str, Any]]:  # type: ignore[misc]
        return await asyncio.to_thread(self.part.run, jobs, states)

    def model_info(self) -> dict[str, ModelInfo]:
        return dict(self.models.info)

    def check_health(self) -> None:
        self.models.need_enhancer()


def source_face(models: ModelSet, cfg: EngineConfig, frame: np.ndarray) -> identity.SourceFace | None:
    """A source image's largest face cut for the embedder (and the classic swap), or None."""
    face = identity.largest_face(models.need_detector().detect(frame))
    if face is None:
        return None
    return identity.cut_source_face(frame, identity.landmarked_face(models, cfg, frame, face), cfg)


def embedding_components(cfg: EngineConfig) -> list[Component]:
    """The model :func:`embed_batch` embeds sources with: the embedder, for a model swapper (the
    service keeps the embedding even where the swap takes the source as an image). The detector
    that cuts source faces (:func:`source_face`) is the detect step's."""
    return ["embedder"] if cfg.swap.swapper == "inswapper" else []


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
