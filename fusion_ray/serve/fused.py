"""The fused placement: one deployment runs the whole chain in-process (``placement: fused``).

:class:`FusedDeployment` holds every model of the chain and runs whole frames through
:class:`~fusion_ray.core.frames.FrameChain` (the core's functions, as the engine and
``fusion-ray live`` run them), with ``@serve.batch`` over the frames of concurrent HTTP requests
and live streams: one call per frame from the ingress, one swap and one enhancer call per batch.
Each frame's FaceFusion options (masks, pixel boost, weights) run in the same chain, frames with
the same options batched together; the landmarker and the mask models requests may ask for
(``limits.mask_models_allowed``) are loaded at start. It also answers what the split detector
and swapper answer for source registration
(``source_face``, a batched ``embed``) and readiness (``model_info``), so the ingress' source
path is the same for both placements. On a node with no GPU or one, this saves the hops between
the detector, swapper and enhancer replicas (each a serialised frame or crop batch) that the
split placement pays on every frame.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from typing import Any

import cv2
import numpy as np
from ray import serve

from fusion_ray.core import identity
from fusion_ray.core.frames import FrameChain, FrameDone, FrameJob
from fusion_ray.core.modelset import Component, ModelInfo, ModelSet
from fusion_ray.serve.deployments import (
    BatchedEmbedding,
    _adaptive,
    _batch_record,
    _configure_batching,
    _set_wait,
    embedding_components,
    source_face,
)
from fusion_ray.serve.live import PreparedStream
from fusion_ray.serve.metrics import step_seconds
from fusion_ray.serve.quality import loaded_config, part_components
from fusion_ray.serve.settings import ServeSettings
from fusion_ray.serve.webrtc import ReplicaWebRtc

log = logging.getLogger(__name__)

WEBRTC_STOP_S = 5.0
"""The longest a replica's shut-down waits for its WebRTC sessions to close."""

BATCHES_IN_FLIGHT = 2
"""Frame batches a fused replica runs at once, each in its own thread (sessions at one thread by
default, ``deployments.fused.cpu_budget: 1``): detection runs frame by frame on the CPU, so a
second batch detects while the first swaps and pastes, instead of one of two cores idling."""


def fused_components(settings: ServeSettings) -> list[Component]:
    """The models a fused replica loads at its start: those of every step of the chain a request
    may run (:func:`~fusion_ray.serve.quality.part_components` over the whole chain: the
    landmarker and the mask models of ``limits.mask_models_allowed`` included), less the enhancer
    where it is not deployed, and the sources' embedder (:func:`~fusion_ray.serve.deployments.embedding_components`)."""
    components = part_components(settings, None, "paste_enhanced")
    if not settings.deployments.enhancer_enabled:
        components = [c for c in components if c != "enhancer"]
    return list(dict.fromkeys([*components, *embedding_components(settings.engine)]))


@serve.deployment(name="Fused")
class FusedDeployment(BatchedEmbedding):
    """Every model of the chain in one replica; whole frames batched across requests and streams."""

    def __init__(self, settings: ServeSettings, state: Any = None) -> None:
        dep = settings.deployments.fused
        self.cfg = settings.engine.in_ray_actor(dep.num_gpus > 0)
        budget = dep.threads_budget()
        cv2.setNumThreads(max(1, math.ceil(budget)))
        loading = loaded_config(settings).in_ray_actor(dep.num_gpus > 0)
        self.models = ModelSet.load(loading, fused_components(settings), cpu_budget=budget)
        self.chain = FrameChain(self.cfg, self.models)
        _configure_batching(self._process_batched, settings.batching.frames)  # type: ignore[misc]
        _configure_batching(self._embed_batched, settings.batching.embed)
        self.frames_wait = _adaptive(settings, settings.batching.frames)
        self.embed_wait = _adaptive(settings, settings.batching.embed)
        replica_id = serve.get_replica_context().replica_id.unique_id if state is not None else "local"
        self.webrtc = ReplicaWebRtc(settings, state, replica_id, self.process)
        self.stop_s = settings.shutdown.drain_timeout_s
        log.info("fused replica ready (cpu budget %s, frame batch %d)", budget, settings.batching.frames.max_batch_size)


    @serve.batch
    async def _embed_batched(self, requests: list[list[identity.SourceFace]]) -> list[dict[str, Any]]:
        return await self.embed_requests(requests)
    async def process(self, job: FrameJob) -> dict[str, Any]:
        """One frame through the whole chain (batched with the other callers' frames)."""
        _set_wait(self._process_batched, self.frames_wait.arrival(time.monotonic()))  # type: ignore[misc]
        return await self._process_batched(job)  # type: ignore[misc,arg-type,no-any-return]

    @serve.batch(max_concurrent_batches=BATCHES_IN_FLIGHT)  # type: ignore[arg-type]
    async def _process_batched(self, jobs: list[FrameJob]) -> list[dict[str, Any]]:  # type: ignore[misc]
        return await asyncio.to_thread(self._process_batch, jobs)

    def _process_batch(self, jobs: list[FrameJob]) -> list[dict[str, Any]]:
        start = time.perf_counter()
        timings: dict[str, float] = {}
        done: list[FrameDone] = self.chain.run(jobs, timings)
        results: list[dict[str, Any]] = [{"done": d} for d in done]
        results[0]["batch"] = _batch_record(len(jobs), sum(d.faces_swapped for d in done),
                                            time.perf_counter() - start)
        results[0]["steps"] = step_seconds(timings)  # each step's busy time
        return results

    def source_face(self, frame: np.ndarray) -> identity.SourceFace | None:
        return source_face(self.models, self.cfg, frame)

    async def webrtc_publish(self, offer: str, prepared: PreparedStream) -> dict[str, Any]:
        """A WHIP offer answered here: this replica holds the session (see :mod:`fusion_ray.serve.webrtc`)."""
        return await self.webrtc.publish(offer, prepared)

    async def webrtc_end(self, session_id: str) -> bool:
        """DELETE of a session (routed here by :class:`~fusion_ray.serve.webrtc.SessionRouter`)."""
        return await self.webrtc.end(session_id)

    async def webrtc_view(self, session_id: str, offer: str) -> dict[str, Any]:
        """A WHEP viewer of a session held here."""
        return await self.webrtc.view(session_id, offer)

    async def __del__(self) -> None:
        """On shut-down: end this replica's WebRTC sessions (``shutting_down``), bounded."""
        await self.webrtc.shut_down(min(self.stop_s, WEBRTC_STOP_S))

    def model_info(self) -> dict[str, ModelInfo]:
        return dict(self.models.info)

    def check_health(self) -> None:
        self.models.need_detector()
