"""The ingress' two boundaries to the swap chain, each in one place.

- :class:`Downstream`: every call to another deployment (detector, swapper, enhancer, state):
  its timeout (504), backpressure (503), lost replica (503) and failed method (500), its stage
  timing, and the batch records the batched deployments return.
- :class:`LocalStages`: the work the ingress does itself on the chain's data: pasting the
  swapped and enhanced crops back, and the output metadata (provenance) of the models used.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Callable
from typing import Any

import cv2
import numpy as np
from ray.exceptions import RayActorError, RayTaskError
from ray.serve.exceptions import BackPressureError, RayServeException

from fusion_ray.config import EngineConfig
from fusion_ray.core import chain as core_chain
from fusion_ray.core.facebatch import FaceBatch, FrameBatch
from fusion_ray.core.identity import SourceFace
from fusion_ray.core.layout import CropLayout, enhance_layout, swap_layout
from fusion_ray.core.lru import LockedLru
from fusion_ray.core.modelset import ModelInfo
from fusion_ray.core.provenance import Provenance
from fusion_ray.facefusion_options import NO_OPTIONS, FaceFusionOptions, configured
from fusion_ray.live.backend import SourceStatus
from fusion_ray.serve.deployments import DetectReply
from fusion_ray.serve.limits import ApiError, wait_for
from fusion_ray.serve.metrics import MetricsRecorder, Snapshot
from fusion_ray.serve.settings import ServeSettings
from fusion_ray.serve.timing import Timings
from fusion_ray.types import SourceIdentity

log = logging.getLogger(__name__)

MAX_LAYOUTS = 16
"""Sets of request options whose config and crop layout the ingress keeps made."""

DOWNSTREAM_ERRORS = (RayTaskError, RayActorError, RayServeException)
"""Ray's errors from a call to another deployment (answered by :func:`downstream_error`)."""


def downstream_error(exc: BaseException, stage: str, retry_headers: dict[str, str]) -> ApiError:
    """The answer to one of :data:`DOWNSTREAM_ERRORS` from a downstream call.

    A replica that is gone or restarting (RayActorError, ActorUnavailableError, which subclasses it;
    Serve's own errors) is a 503 with Retry-After. A deployment method that raised (RayTaskError) is
    a 500 naming only the stage: the remote traceback is logged here, never sent to the client.
    """
    if isinstance(exc, RayTaskError):
        log.error("the %s stage raised", stage, exc_info=exc)
        return ApiError(500, "stage_failed", f"the {stage} stage failed")
    log.warning("the %s stage is unavailable: %s: %s", stage, type(exc).__name__, exc)
    return ApiError(503, "stage_unavailable", f"the {stage} stage is unavailable; retry later", retry_headers)


def _failed(error: object, what: str) -> None:
    """A stage's per-row error message, if any, as a 500."""
    if error:
        raise ApiError(500, "stage_failed", f"{what} failed: {error}")


class Downstream:
    """The deployment handles (duck-typed) and every remote call the ingress makes."""

    def __init__(self, handles: tuple[Any, Any, Any | None, Any], *, timeout_s: float,
                 retry_headers: dict[str, str], metrics: MetricsRecorder) -> None:
        self.detector, self.swapper, self.state = handles[0], handles[1], handles[3]
        self.enhancer: Any = handles[2]  # None: the service runs without the enhancer
        self.timeout_s = timeout_s
        self.retry_headers = retry_headers
        self.metrics = metrics

    async def call(self, timings: Timings, stage: str, make: Callable[[], Any]) -> Any:
        """Call a downstream deployment, timed as ``stage``; backpressure or a lost replica -> 503,
        timeout -> 504, a method that raised -> 500 (see :func:`downstream_error`)."""
        with timings.timed(stage):
            try:
                return await wait_for(make(), self.timeout_s, stage)
            except BackPressureError as exc:
                self.metrics.inc("fusion_ray_rejected_total", reason=f"{stage}_queue_full")
                raise ApiError(503, "overloaded", f"the {stage} stage is at its queue limit ({exc}); retry later",
                               self.retry_headers) from exc
            except DOWNSTREAM_ERRORS as exc:
                raise downstream_error(exc, stage, self.retry_headers) from exc

    def record_batch(self, deployment: str, result: dict[str, Any]) -> None:
        record = result.get("batch")
        if record:
            self.metrics.batch(deployment, int(record["requests"]), int(record["faces"]), float(record["compute_s"]))
        for step, seconds in result.get("steps", {}).items():  # the fused chain's steps
            self.metrics.step(step, float(seconds))

    # ------------------------------------------------------------ the chain
    async def detect(self, t: Timings, frame: np.ndarray, mode: str, index: int,
                     size: int | None = None, options: FaceFusionOptions = NO_OPTIONS) -> DetectReply:
        found: DetectReply = await self.call(
            t, "detect", lambda: self.detector.detect.remote(frame, mode, index, size, options))
        t.record("detect_compute", found.compute_s)  # the detect stage minus the hop
        _failed(found.error, "detection")
        return found

    async def source_face(self, t: Timings, frame: np.ndarray) -> SourceFace | None:
        return await self.call(t, "source_detect", lambda: self.detector.source_face.remote(frame))  # type: ignore[no-any-return]

    async def embed(self, t: Timings, faces: list[SourceFace]) -> SourceIdentity:
        result = await self.call(t, "embed", lambda: self.swapper.embed.remote(faces))
        self.record_batch("embedder", result)
        return result["identity"]  # type: ignore[no-any-return]

    async def swap(self, t: Timings, crops: np.ndarray, identity: SourceIdentity, key: str,
                   options: FaceFusionOptions = NO_OPTIONS) -> np.ndarray:
        swapped = await self.call(t, "swap", lambda: self.swapper.swap.remote(crops, identity, key, options))
        self.record_batch("swapper", swapped)
        _failed(swapped["error"], "swap")
        return swapped["crops"]  # type: ignore[no-any-return]

    async def enhance(self, t: Timings, crops: np.ndarray, blend: float, weight: float | None = None) -> np.ndarray:
        enhanced = await self.call(t, "enhance", lambda: self.enhancer.enhance.remote(crops, blend, weight))
        self.record_batch("enhancer", enhanced)
        _failed(enhanced["error"], "enhancement")
        return enhanced["crops"]  # type: ignore[no-any-return]

    async def model_info(self, t: Timings) -> dict[str, ModelInfo]:
        def info_of(handle: Any) -> Callable[[], Any]:
            return lambda: handle.model_info.remote()

        handles = [h for h in (self.detector, self.swapper, self.enhancer) if h is not None]
        merged: dict[str, ModelInfo] = {}
        for info in await asyncio.gather(*(self.call(t, "info", info_of(h)) for h in handles)):
            merged.update(info)
        return merged

    def probes(self) -> dict[str, Callable[[], Any]]:
        """Readiness probes by deployment name (each answers its model info, the state {})."""
        probes: dict[str, Callable[[], Any]] = {
            "Detector": lambda: self.detector.model_info.remote(),
            "Swapper": lambda: self.swapper.model_info.remote(),
            "ServiceState": lambda: self.state.ping.remote(),
        }
        if self.enhancer is not None:
            probes["Enhancer"] = lambda: self.enhancer.model_info.remote()
        return probes

    # ------------------------------------------------------------ the state
    async def get_source(self, t: Timings, source_id: str) -> SourceIdentity | None:
        return await self.call(t, "source_lookup", lambda: self.state.get_source.remote(source_id))  # type: ignore[no-any-return]

    async def put_source(self, t: Timings, identity: SourceIdentity) -> str:
        return await self.call(t, "store", lambda: self.state.put_source.remote(identity))  # type: ignore[no-any-return]

    async def delete_source(self, t: Timings, source_id: str) -> bool:
        return bool(await self.call(t, "store", lambda: self.state.delete_source.remote(source_id)))

    async def source_status(self, t: Timings, source_ids: set[str]) -> SourceStatus:
        return await self.call(t, "source_lookup",  # type: ignore[no-any-return]
                               lambda: self.state.source_status.remote(sorted(source_ids)))

    async def merge_metrics(self, snap: Snapshot) -> None:
        await self.state.merge_metrics.remote(snap)

    async def render_metrics(self, t: Timings, gauges: list[tuple[str, str, dict[str, str], float]]) -> str:
        return await self.call(t, "metrics", lambda: self.state.render_metrics.remote(gauges))  # type: ignore[no-any-return]


def _with_box(faces: FaceBatch, layout: CropLayout) -> FaceBatch:
    """The faces with the layout's mask joined to theirs (the chain's box mask step)."""
    if not len(faces):
        return faces
    return faces.with_mask(np.broadcast_to(layout.mask, (len(faces), *layout.mask.shape)))


class LocalStages:
    """Paste and provenance, run in the ingress on the core's values (no model is loaded here)."""

    def __init__(self, settings: ServeSettings) -> None:
        cfg = settings.engine.in_ray_actor(settings.deployments.ingress.num_gpus > 0)
        budget = settings.deployments.ingress.threads_budget()  # also sizes OpenCV's thread pool
        if budget is not None:
            cv2.setNumThreads(max(1, math.ceil(budget)))
        self.cfg = cfg
        self.swap_layout = swap_layout(cfg)
        self.enhance_layout = enhance_layout(cfg)
        self._layouts: LockedLru[FaceFusionOptions, tuple[EngineConfig, CropLayout]] = LockedLru(
            MAX_LAYOUTS, self._made)
        self._layouts.get(NO_OPTIONS)

    def _made(self, options: FaceFusionOptions) -> tuple[EngineConfig, CropLayout]:
        if options == NO_OPTIONS:
            return self.cfg, self.swap_layout
        cfg = configured(self.cfg, options)
        return cfg, swap_layout(cfg)

    def _configured(self, options: FaceFusionOptions) -> tuple[EngineConfig, CropLayout]:
        """The config and swap crop of a request's options, made once per set of options (the
        :data:`MAX_LAYOUTS` most recently used kept; the ingress calls it from its event loop and
        from worker threads at once)."""
        return self._layouts.get(options)

    def config(self, options: FaceFusionOptions) -> EngineConfig:
        """The config a request's options make (the service's with them applied)."""
        return self._configured(options)[0]

    def layout(self, options: FaceFusionOptions) -> CropLayout:
        """The swap crop a request's options ask for (box mask padding and blur, pixel boost)."""
        return self._configured(options)[1]

    def follows(self, options: FaceFusionOptions) -> bool:
        """Whether a live stream's faces followed on crops can be swapped here: not when the request
        needs 68-point landmarks or target-crop masks (the detector deployment's steps; such a
        stream's frames are detected whole)."""
        cfg = self._configured(options)[0]
        return cfg.landmarker.model == "none" and "occlusion" not in cfg.masks.types

    def paste(self, frame: np.ndarray, faces: FaceBatch, crops: np.ndarray, enhance: bool,
              options: FaceFusionOptions = NO_OPTIONS) -> FrameBatch:
        """The frame with the swapped crops pasted through their masks (the target-crop masks the
        detector made, and the box mask when the request's mask types have it); with ``enhance``
        its faces are the enhancer crops to send on (else none)."""
        cfg, layout = self._configured(options)
        faces = faces.with_crops(crops)
        if "box" in cfg.masks.types:
            faces = _with_box(faces, layout)
        swapped = FrameBatch.of([frame], faces)
        pasted = core_chain.paste(swapped.frames, swapped.faces, layout, swapped.errors)
        cut = (core_chain.align_for_enhance(pasted, swapped.faces, self.enhance_layout, swapped.errors)
               if enhance else FaceBatch.empty())
        _failed(swapped.first_error, "paste")
        return FrameBatch(pasted, swapped.errors, cut)

    def paste_enhanced(self, pasted: FrameBatch, enhanced: np.ndarray) -> FrameBatch:
        """``pasted`` with its enhancer crops replaced by ``enhanced`` and pasted back."""
        faces = pasted.faces.with_crops(enhanced)
        out = FrameBatch(core_chain.paste(pasted.frames, faces, self.enhance_layout, pasted.errors, "paste_enhanced"),
                         pasted.errors, FaceBatch.empty())
        _failed(out.first_error, "paste")
        return out

    def provenance(self, models: dict[str, ModelInfo], enhance: bool,
                   extra: frozenset[str] = frozenset()) -> Provenance:
        """The :class:`Provenance` of the models an output used (the enhancer's only with ``enhance``;
        ``extra``: the landmarker and mask models its options ran)."""
        names = {self.cfg.models.detector, self.cfg.models.embedder, self.cfg.models.swapper, *extra}
        if enhance:
            names.add(self.cfg.models.enhancer)
        return Provenance.of(models, names)
