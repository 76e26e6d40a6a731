"""The ingress' two boundaries to the swap chain, each in one place.

- :class:`Downstream`: every call to another deployment (detector, swapper, enhancer, state):
  its timeout (504), backpressure (503), lost replica (503) and failed method (500), its stage
  timing, and the batch records the batched deployments return.
- :class:`LocalStages`: the work the ingress does itself: the split placement's parts that load no
  model (pasting the swapped and enhanced crops back), and the outputs' provenance.
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

from fusion_ray.core.facefusion_options import FaceFusionOptions
from fusion_ray.core.frames import FrameChain, FrameJob, FrameState
from fusion_ray.core.identity import SourceFace
from fusion_ray.core.modelset import ModelInfo, ModelSet
from fusion_ray.core.provenance import Provenance
from fusion_ray.core.steps import Phase
from fusion_ray.live.backend import SourceStatus
from fusion_ray.serve.deployments import SplitPart
from fusion_ray.serve.limits import ApiError, wait_for
from fusion_ray.serve.metrics import MetricsRecorder, Snapshot, record_batch
from fusion_ray.serve.settings import ServeSettings
from fusion_ray.serve.timing import Timings
from fusion_ray.types import SourceIdentity

log = logging.getLogger(__name__)


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
        record_batch(self.metrics, deployment, result)

    # ------------------------------------------------------------ the chain
    async def find(self, t: Timings, job: FrameJob) -> tuple[FrameState, Any]:
        """The split placement's ``detect`` part on the detector deployment: the frame's state and
        its follower, updated there."""
        found = await self.call(t, "detect", lambda: self.detector.find.remote(job))
        self.record_batch("detector", found)  # (its steps: it runs one frame a call)
        return found["state"], found["follower"]

    async def advance(self, t: Timings, part: SplitPart, job: FrameJob, state: FrameState) -> FrameState:
        """A batched part of the split placement on the deployment it runs in (Swapper, Enhancer)."""
        handle = {"Swapper": self.swapper, "Enhancer": self.enhancer}[part.runs_in]
        done = await self.call(t, part.name, lambda: handle.advance.remote(job, state))
        self.record_batch(part.runs_in.lower(), done)
        return done["state"]  # type: ignore[no-any-return]

    async def source_face(self, t: Timings, frame: np.ndarray) -> SourceFace | None:
        return await self.call(t, "source_detect", lambda: self.detector.source_face.remote(frame))  # type: ignore[no-any-return]

    async def embed(self, t: Timings, faces: list[SourceFace]) -> SourceIdentity:
        result = await self.call(t, "embed", lambda: self.swapper.embed.remote(faces))
        self.record_batch("embedder", result)
        return result["identity"]  # type: ignore[no-any-return]

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


class LocalStages:
    """The split placement's parts that run in the ingress (pasting: no model is loaded here) and
    the outputs' provenance."""

    def __init__(self, settings: ServeSettings) -> None:
        cfg = settings.engine.in_ray_actor(settings.deployments.ingress.num_gpus > 0)
        budget = settings.deployments.ingress.threads_budget()  # also sizes OpenCV's thread pool
        if budget is not None:
            cv2.setNumThreads(max(1, math.ceil(budget)))
        self.cfg = cfg
        self.chain = FrameChain(cfg, ModelSet(), detects=False)

    def reads_frame(self, options: FaceFusionOptions, after: Phase, until: Phase) -> bool:
        """Whether a part's steps read the frame (the frame travels only to the parts that do)."""
        return "frame" in self.chain.part(options, after, until).reads()

    def advance(self, job: FrameJob, state: FrameState, after: Phase, until: Phase,
                timings: dict[str, float]) -> FrameState:
        """One of the ingress' parts over the frame's state."""
        return self.chain.advance([job], [state], after, until, timings)[0]

    def provenance(self, models: dict[str, ModelInfo], enhance: bool,
                   extra: frozenset[str] = frozenset()) -> Provenance:
        """The :class:`Provenance` of the models an output used (the enhancer's only with ``enhance``;
        ``extra``: the landmarker and mask models its options ran)."""
        names = {self.cfg.models.detector, self.cfg.models.embedder, self.cfg.models.swapper, *extra}
        if enhance:
            names.add(self.cfg.models.enhancer)
        return Provenance.of(models, names)
