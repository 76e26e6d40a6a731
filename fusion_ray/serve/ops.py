"""The ops endpoints' content: readiness (``/readyz``) and the ingress gauges of ``/metrics``."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from fusion_ray.runners.inline import ModelInfo
from fusion_ray.serve.limits import InflightLimiter, UploadLimiter
from fusion_ray.serve.schemas import Readiness

log = logging.getLogger(__name__)

READY_TIMEOUT_S = 5.0
Gauge = tuple[str, str, dict[str, str], float]


async def _awaited(awaitable: Any) -> Any:
    return await awaitable


async def _probe(make: Callable[[], Any]) -> tuple[str, str, dict[str, ModelInfo]]:
    """(generic state, state with the error type, model info) of one deployment."""
    try:
        return "ready", "ready", await asyncio.wait_for(_awaited(make()), READY_TIMEOUT_S)
    except TimeoutError:
        state = f"no answer within {READY_TIMEOUT_S:g} s"
        return state, state, {}
    except Exception as exc:  # the message goes to the log only
        log.warning("readiness probe failed: %s: %s", type(exc).__name__, exc)
        return "failed", f"failed ({type(exc).__name__})", {}


async def readiness(probes: dict[str, Callable[[], Any]], detailed: bool) -> Readiness:
    """Whether every deployment answers. ``detailed`` (the caller has the API token) adds error
    types and the model files; without it nothing names a path or an exception."""
    results = await asyncio.gather(*(_probe(make) for make in probes.values()))
    states = {name: (full if detailed else generic) for name, (generic, full, _) in zip(probes, results, strict=True)}
    models: dict[str, ModelInfo] = {}
    for _, _, info in results:
        models.update(info)
    ready = all(generic == "ready" for generic, _, _ in results)
    return Readiness(status="ready" if ready else "not_ready", deployments=states,
                     models={name: info.path if detailed else "loaded" for name, info in sorted(models.items())},
                     stand_in_models=sorted(n for n, i in models.items() if i.stand_in))


def ingress_gauges(replica: str, limiter: InflightLimiter, uploads: UploadLimiter) -> list[Gauge]:
    """The ingress replica's own gauges (the state deployment adds its store's)."""
    labels = {"replica": replica}
    return [
        ("fusion_ray_inflight_requests", "Requests the ingress replica is working on.", labels,
         float(limiter.inflight)),
        ("fusion_ray_inflight_peak", "Most requests the ingress replica worked on at once.", labels,
         float(limiter.peak)),
        ("fusion_ray_inflight_limit", "The ingress replica's in-flight limit.", labels, float(limiter.limit)),
        ("fusion_ray_uploads_in_progress", "Request bodies the ingress replica is receiving.", labels,
         float(uploads.active)),
        ("fusion_ray_uploads_limit", "The ingress replica's limit of bodies received at once.", labels,
         float(uploads.limit)),
    ]
