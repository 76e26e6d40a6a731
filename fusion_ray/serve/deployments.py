"""Ray Serve deployments around the pipeline's stage classes.

- :class:`DetectorDeployment` (CPU): ``DetectStage`` on one frame per call; also picks and
  aligns the largest face of a source image for the embedder.
- :class:`SwapperDeployment` (GPU when present): ``SwapStage`` with ``@serve.batch`` across
  concurrent requests (one stage call over every face of every request in the batch), and
  the ArcFace embedder with its own ``@serve.batch`` for source identities.
- :class:`EnhancerDeployment` (GPU when present): ``EnhanceStage`` with ``@serve.batch``.
- :class:`ServiceStateDeployment` (one replica): the bounded source store and the merged metrics.

Sessions are created in the replicas (``Engine.load`` inside the stages) with threads sized
to the replica's CPU budget; nothing holding a session is ever pickled. Per-request source
identities travel with the swap call (a 512-d latent, 2 KB) and become the SwapStage's
identity mapping for that batch, keyed by the per-row ``source_id`` column: swapper replicas
keep no state, so any replica serves any request and a restarted replica loses nothing.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import numpy as np
from ray import serve

from fusion_ray.config import EngineConfig, EnhanceConfig
from fusion_ray.engine import Engine, ModelInfo
from fusion_ray.models.embedder import l2_normalise
from fusion_ray.models.enhancer import blend_crops
from fusion_ray.models.registry import get_spec
from fusion_ray.ops.align import align_face
from fusion_ray.pipeline.stages import DetectStage, EnhanceStage, SwapStage, object_column
from fusion_ray.serve.batching import AdaptiveWait
from fusion_ray.serve.metrics import MetricsStore, Snapshot
from fusion_ray.serve.settings import BatchSettings, ServeSettings
from fusion_ray.serve.sources import SourceStore
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


@serve.deployment(name="Detector")
class DetectorDeployment:
    """CPU: SCRFD detection, face selection and swap crops (``DetectStage``), one frame per call."""

    def __init__(self, settings: ServeSettings) -> None:
        self.cfg: EngineConfig = settings.engine.in_ray_actor(settings.deployments.detector.num_gpus > 0)
        budget = settings.deployments.detector.threads_budget()
        self.base = DetectStage(self.cfg, cpu_budget=budget)
        spec = get_spec(self.cfg.models.embedder)
        assert spec.template is not None
        self.embed_template: str = spec.template
        self.embed_size = spec.crop_size
        log.info("detector replica ready (cpu budget %s)", budget)

    def detect(self, frame: np.ndarray, mode: str, index: int) -> dict[str, Any]:
        """Faces found, faces selected, and the selected faces' landmarks, swap crops and affines."""
        start = time.perf_counter()
        out = self.base({"frame": object_column([frame]), "select_mode": object_column([mode]),
                         "face_index": np.asarray([index], np.int64)})
        return {
            "faces_detected": int(out["faces_detected"][0]),
            "faces_selected": int(out["faces_swapped"][0]),
            "landmarks": out["landmarks"][0],
            "crops": out["crops"][0],
            "affines": out["affines"][0],
            "error": str(out["error"][0]),
            "compute_s": time.perf_counter() - start,
        }

    def source_face(self, frame: np.ndarray) -> np.ndarray | None:
        """The embedder crop of the largest face (as the engine's ``prepare_source``), or None."""
        faces = self.base.engine.detect(frame)
        if not faces:
            return None
        face = max(faces, key=lambda f: f.area)
        crop, _ = align_face(frame, face.landmarks_5, self.embed_template, self.embed_size)
        return crop

    def model_info(self) -> dict[str, ModelInfo]:
        return dict(self.base.engine.model_info)

    def check_health(self) -> None:
        if self.base.engine.detector is None:
            raise RuntimeError("detector not loaded")


@serve.deployment(name="Swapper")
class SwapperDeployment:
    """GPU: batched swap over all faces of all requests in a batch, and batched source embedding."""

    def __init__(self, settings: ServeSettings) -> None:
        cfg = settings.engine.in_ray_actor(settings.deployments.swapper.num_gpus > 0)
        budget = settings.deployments.swapper.threads_budget()
        self.stage = SwapStage(cfg, cpu_budget=budget)
        self.embedder_engine = Engine.load(cfg, components=["embedder"], cpu_budget=budget)
        _configure_batching(self._swap_batched, settings.batching.swap)  # type: ignore[misc]
        _configure_batching(self._embed_batched, settings.batching.embed)
        self.swap_wait = _adaptive(settings, settings.batching.swap)
        self.embed_wait = _adaptive(settings, settings.batching.embed)
        log.info("swapper replica ready (cpu budget %s, swap batch %d)", budget,
                 settings.batching.swap.max_batch_size)

    async def swap(self, crops: np.ndarray, identity: SourceIdentity, source_id: str) -> dict[str, Any]:
        """One request: its (n, 128, 128, 3) crops, identity and source id -> swapped crops (batched)."""
        _set_wait(self._swap_batched, self.swap_wait.arrival(time.monotonic()))  # type: ignore[misc]
        return await self._swap_batched(crops, identity, source_id)  # type: ignore[misc,call-arg,arg-type,no-any-return]

    @serve.batch  # type: ignore[arg-type]
    async def _swap_batched(  # type: ignore[misc]
        self, crops: list[np.ndarray], identities: list[SourceIdentity], source_ids: list[str],
    ) -> list[dict[str, Any]]:
        # The model call leaves the event loop free, so the next batch can gather meanwhile.
        return await asyncio.to_thread(self._swap_batch, crops, identities, source_ids)

    def _swap_batch(self, crops: list[np.ndarray], identities: list[SourceIdentity],
                    source_ids: list[str]) -> list[dict[str, Any]]:
        start = time.perf_counter()
        out = self.stage({"crops": object_column(crops), "identity": object_column(identities),
                          "source_id": object_column(source_ids)})
        elapsed = time.perf_counter() - start
        results: list[dict[str, Any]] = [{"crops": out["crops"][i], "error": str(out["error"][i])}
                                         for i in range(len(crops))]
        results[0]["batch"] = _batch_record(len(crops), sum(len(c) for c in crops), elapsed)
        return results

    async def embed(self, crops: np.ndarray) -> dict[str, Any]:
        """One request: the (k, 112, 112, 3) embedder crops of its source images -> one identity (batched)."""
        _set_wait(self._embed_batched, self.embed_wait.arrival(time.monotonic()))
        return await self._embed_batched(crops)  # type: ignore[arg-type,no-any-return]

    @serve.batch
    async def _embed_batched(self, crops: list[np.ndarray]) -> list[dict[str, Any]]:
        return await asyncio.to_thread(self._embed_batch, crops)

    def _embed_batch(self, crops: list[np.ndarray]) -> list[dict[str, Any]]:
        start = time.perf_counter()
        embedder = self.embedder_engine.embedder
        swapper = self.stage.engine.inswapper
        assert embedder is not None and swapper is not None
        vectors = embedder.embed_crops(np.concatenate(crops))
        results: list[dict[str, Any]] = []
        offset = 0
        for item in crops:
            rows = vectors[offset:offset + len(item)]
            offset += len(item)
            embedding = l2_normalise(rows.mean(axis=0, keepdims=True))[0]
            identity = SourceIdentity(embedding=embedding, latent=swapper.latent(embedding), crop=None,
                                      num_images=len(item))
            results.append({"identity": identity})
        results[0]["batch"] = _batch_record(len(crops), len(vectors), time.perf_counter() - start)
        return results

    def model_info(self) -> dict[str, ModelInfo]:
        return {**self.stage.engine.model_info, **self.embedder_engine.model_info}

    def check_health(self) -> None:
        if self.stage.engine.inswapper is None or self.embedder_engine.embedder is None:
            raise RuntimeError("swapper or embedder not loaded")


@serve.deployment(name="Enhancer")
class EnhancerDeployment:
    """GPU: batched GFPGAN over the faces of all requests in a batch; per-request blend after."""

    def __init__(self, settings: ServeSettings) -> None:
        # The model runs at blend 1.0 (pure enhanced); each request's blend is applied after,
        # with the same blend_crops the engine uses, so results equal the engine's exactly.
        cfg = settings.engine.in_ray_actor(settings.deployments.enhancer.num_gpus > 0).model_copy(
            update={"enhance": EnhanceConfig(enabled=True, blend=1.0)})
        budget = settings.deployments.enhancer.threads_budget()
        self.stage = EnhanceStage(cfg, cpu_budget=budget)
        _configure_batching(self._enhance_batched, settings.batching.enhance)  # type: ignore[misc]
        self.enhance_wait = _adaptive(settings, settings.batching.enhance)

    async def enhance(self, crops: np.ndarray, blend: float) -> dict[str, Any]:
        """One request: its (n, 512, 512, 3) enhancer crops and blend -> enhanced, blended crops (batched)."""
        _set_wait(self._enhance_batched, self.enhance_wait.arrival(time.monotonic()))  # type: ignore[misc]
        return await self._enhance_batched(crops, blend)  # type: ignore[misc,call-arg,arg-type,no-any-return]

    @serve.batch  # type: ignore[arg-type]
    async def _enhance_batched(  # type: ignore[misc]
        self, crops: list[np.ndarray], blends: list[float],
    ) -> list[dict[str, Any]]:
        return await asyncio.to_thread(self._enhance_batch, crops, blends)

    def _enhance_batch(self, crops: list[np.ndarray], blends: list[float]) -> list[dict[str, Any]]:
        start = time.perf_counter()
        out = self.stage({"enhance_crops": object_column(crops)})
        results: list[dict[str, Any]] = []
        for i, original in enumerate(crops):
            error = str(out["error"][i])
            enhanced = out["enhance_crops"][i]
            if not error and len(original):
                enhanced = blend_crops(original, enhanced, float(blends[i]))
            results.append({"crops": enhanced, "error": error})
        results[0]["batch"] = _batch_record(len(crops), sum(len(c) for c in crops), time.perf_counter() - start)
        return results

    def model_info(self) -> dict[str, ModelInfo]:
        return dict(self.stage.engine.model_info)

    def check_health(self) -> None:
        if self.stage.engine.enhancer is None:
            raise RuntimeError("enhancer not loaded")


@serve.deployment(name="ServiceState")
class ServiceStateDeployment:
    """One replica: registered source identities (bounded LRU) and the merged metrics."""

    def __init__(self, settings: ServeSettings) -> None:
        self.sources = SourceStore(settings.sources.max_count)
        self.metrics = MetricsStore()

    async def put_source(self, identity: SourceIdentity) -> str:
        return self.sources.put(identity)

    async def get_source(self, source_id: str) -> SourceIdentity | None:
        return self.sources.get(source_id)

    async def delete_source(self, source_id: str) -> bool:
        return self.sources.delete(source_id)

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
