"""The degradation ladder: pure functions over a stream's recent health, with hysteresis.

Levels (cumulative; a level left out of ``allowed_levels`` is skipped and never applied):
0 normal, 1 model masks (occlusion, region: a model call per face) and the stream's pixel boost
off, 2 enhancer off, 3 detection on every k-th frame reusing the last landmarks in between,
4 a smaller detector canvas, 5 lower JPEG quality. A stream *degrades* one level
after its windows were unhealthy (drop rate or p99 latency over the degrade thresholds) for
``degrade_after_s`` in a row, and *recovers* one level after they were healthy (both under the
lower recover thresholds) for the longer ``recover_after_s``. Windows in between reset both
timers; windows without frames change nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal

from fusion_ray.facefusion_options import MODEL_MASKS, FaceFusionOptions
from fusion_ray.live.config import LadderConfig

Verdict = Literal["unhealthy", "healthy", "neutral", "idle"]


@dataclass(frozen=True)
class Health:
    """One observation window of a stream."""

    duration_s: float
    frames_in: int
    drops: int
    p99_ms: float | None


@dataclass(frozen=True)
class LadderState:
    level: int = 0
    unhealthy_s: float = 0.0
    healthy_s: float = 0.0


@dataclass(frozen=True)
class Degradation:
    """What a level changes in the processing of a frame (``costly``: model masks and pixel boost kept)."""

    costly: bool
    enhance: bool
    detect_every: int
    detector_size: int | None
    quality_cap: int | None


def verdict(health: Health, deadline_ms: float, cfg: LadderConfig) -> Verdict:
    """How a window looks against the thresholds."""
    if health.frames_in <= 0:
        return "idle"
    drop_rate = health.drops / health.frames_in
    latency = (health.p99_ms or 0.0) / deadline_ms
    if drop_rate > cfg.degrade_drop_rate or latency > cfg.degrade_latency:
        return "unhealthy"
    if drop_rate <= cfg.recover_drop_rate and latency <= cfg.recover_latency:
        return "healthy"
    return "neutral"


def _neighbour(level: int, cfg: LadderConfig, direction: int) -> int:
    levels = cfg.allowed_levels
    index = levels.index(level) + direction
    return levels[index] if 0 <= index < len(levels) else level


def step(state: LadderState, health: Health, deadline_ms: float, cfg: LadderConfig) -> LadderState:
    """The state after one window."""
    seen = verdict(health, deadline_ms, cfg)
    if seen == "idle":
        return state
    if seen == "neutral":
        return replace(state, unhealthy_s=0.0, healthy_s=0.0)
    if seen == "unhealthy":
        unhealthy = state.unhealthy_s + health.duration_s
        if unhealthy >= cfg.degrade_after_s:
            return LadderState(_neighbour(state.level, cfg, +1))
        return LadderState(state.level, unhealthy_s=unhealthy)
    healthy = state.healthy_s + health.duration_s
    if healthy >= cfg.recover_after_s:
        return LadderState(_neighbour(state.level, cfg, -1))
    return LadderState(state.level, healthy_s=healthy)


def degradation(level: int, cfg: LadderConfig) -> Degradation:
    """The degradations in force at ``level`` (those of every allowed level up to it)."""
    active = {lv for lv in cfg.allowed_levels if 0 < lv <= level}
    return Degradation(
        costly=1 not in active,
        enhance=2 not in active,
        detect_every=cfg.detect_every if 3 in active else 1,
        detector_size=cfg.small_detector_size if 4 in active else None,
        quality_cap=cfg.low_quality if 5 in active else None,
    )


def without_costly(options: FaceFusionOptions, mask_types: Sequence[str]) -> FaceFusionOptions:
    """``options`` at level 1: no model masks (occlusion, region) among their mask types (``mask_types``
    when they give none: the host's default; the box mask when none is left) and no pixel boost of
    their own (the host's default size)."""
    types = options.face_mask_types if options.face_mask_types is not None else tuple(mask_types)
    kept = tuple(t for t in types if t not in MODEL_MASKS) or ("box",)
    return options.model_copy(update={"face_mask_types": kept, "face_swapper_pixel_boost": None})
