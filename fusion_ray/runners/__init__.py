"""Runners place the chain (:mod:`fusion_ray.core.steps`): the engine runs it inline on one
image, :mod:`fusion_ray.runners.local` in one process with threads and bounded queues (no Ray),
:mod:`fusion_ray.pipeline` as Ray Data stages. :func:`choose_runner` picks one for a job."""

from __future__ import annotations

from collections.abc import Mapping

from fusion_ray.pipeline.config import LocalConfig
from fusion_ray.pipeline.job import Runner
from fusion_ray.pipeline.plan import JobPlan
from fusion_ray.pipeline.report import ItemKind


def job_frames(plan: JobPlan) -> int:
    """The frames a job's runnable items deliver (a video's frames, one per image), for ``auto``;
    an item left to plan later (past ``plan_on_driver``) counts as the planned items' mean."""
    planned = [p.expected_frames if p.kind is ItemKind.VIDEO else 1 for p in plan.items if p.runs and p.planned]
    later = sum(1 for p in plan.items if p.runs and not p.planned)
    mean = sum(planned) / len(planned) if planned else 1.0
    return int(sum(planned) + later * mean)


def choose_runner(requested: str, plan: JobPlan, local: LocalConfig, address: str | None,
                  environ: Mapping[str, str]) -> Runner:
    """``local`` or ``ray``: what was asked, or for ``auto`` Ray when a cluster address is given
    (``--address`` or ``RAY_ADDRESS``) or the job's frames exceed ``local.auto_ray_frames``."""
    if requested in ("local", "ray"):
        return "local" if requested == "local" else "ray"
    if address or environ.get("RAY_ADDRESS"):
        return "ray"
    return "ray" if job_frames(plan) > local.auto_ray_frames else "local"
