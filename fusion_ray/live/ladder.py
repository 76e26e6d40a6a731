"""The degradation ladder: pure functions over a stream's recent health, with hysteresis.

Levels (cumulative; a level left out of ``allowed_levels`` is skipped and never applied):
0 normal, 1 model masks (occlusion, region: a model call per face) and pixel boost off (whether
the start message, the command line or the host's defaults set them), 2 enhancer off,
3 detection on every k-th frame reusing the last landmarks in between, 4 a smaller detector
canvas, 5 lower JPEG quality. A stream *degrades* one level
after its windows were unhealthy (drop rate or p99 latency over the degrade thresholds) for
``degrade_after_s`` in a row, and *recovers* one level after they were healthy (both under the
lower recover thresholds) for the longer ``recover_after_s``. Windows in between reset both
timers; windows without frames change nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Literal

from fusion_ray.config import EngineConfig
from fusion_ray.core.facefusion_options import FaceFusionOptions, configured
from fusion_ray.core.layout import swapper_spec
from fusion_ray.live.config import LadderConfig
from fusion_ray.options_table import MODEL_MASKS

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


def is_costly(cfg: EngineConfig) -> bool:
    """Whether ``cfg`` (a stream's options over its host's config) runs a model mask (occlusion,
    region) or a pixel boost over the swap model's own size: what level 1 turns off (a stream
    without either skips it)."""
    if set(MODEL_MASKS) & set(cfg.masks.types):
        return True
    return cfg.swap.pixel_boost is not None and cfg.swap.pixel_boost > swapper_spec(cfg).crop_size


def without_costly(options: FaceFusionOptions, base: EngineConfig) -> FaceFusionOptions:
    """``options`` at level 1, whatever set the costly parts (the options, or ``base``: the host's
    config, from its command line or its defaults): the mask types of ``options`` over ``base``
    without the model masks (occlusion, region; the box mask when none is left), and a pixel boost
    of the swap model's own size when a boost is configured (None would mean ``base``'s boost)."""
    cfg = configured(base, options)
    kept = tuple(t for t in cfg.masks.types if t not in MODEL_MASKS) or ("box",)
    update: dict[str, Any] = {"face_mask_types": kept}
    if cfg.swap.pixel_boost is not None:
        size = swapper_spec(cfg).crop_size
        update["face_swapper_pixel_boost"] = f"{size}x{size}"
    return options.model_copy(update=update)
