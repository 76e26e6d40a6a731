"""FaceFusion's per-request options on the service: what a request may ask, and the models loaded for it.

A ``POST /v1/swap`` form and a live start message carry the same
:class:`~fusion_ray.core.facefusion_options.FaceFusionOptions` (FaceFusion's names). They vary what
costs no new model: masks, pixel boost, weights, blends, the landmarker score. The models are
the service's, loaded at its start: a request naming another one gets a 422 naming the one the
service runs. What costs a lot is capped by ``limits`` (403 ``over_cap`` naming the cap):
``max_pixel_boost``, ``enhancer_allowed`` and ``mask_models_allowed``. No Ray, no FastAPI.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fusion_ray.config import EngineConfig
from fusion_ray.core.facefusion_options import (
    FaceFusionOptions,
    check_options_used,
    check_served,
    configured,
)
from fusion_ray.core.modelset import Component, mask_model_names
from fusion_ray.core.steps import Chain, Phase, required_components
from fusion_ray.errors import ConfigError
from fusion_ray.models import capabilities
from fusion_ray.options_table import MODEL_MASKS, OPTIONS, Cap, pixels
from fusion_ray.serve.limits import ApiError
from fusion_ray.serve.settings import LimitsSettings, ServeSettings


@dataclass(frozen=True)
class RequestQuality:
    """A request's checked options and its enhancer blend (None: not enhanced)."""

    options: FaceFusionOptions
    enhance_blend: float | None
    models: frozenset[str] = frozenset()
    """The landmarker and mask models it runs (for its provenance: stand-ins are named)."""


def over_cap(what: str, cap: str, value: object) -> ApiError:
    return ApiError(403, "over_cap", f"{what} is over this service's cap limits.{cap}={value}")


def _check_models(options: FaceFusionOptions, cfg: EngineConfig) -> None:
    try:
        check_served(options, cfg)
    except ConfigError as exc:
        raise ApiError(422, "model_not_served", str(exc)) from exc


def _over_cap(cap: Cap, name: str, value: Any, limits: LimitsSettings) -> ApiError | None:
    """The answer when option ``name`` at ``value`` is over ``cap`` (None: within it)."""
    if cap == "max_pixel_boost":
        over = pixels(value) > limits.max_pixel_boost
        return over_cap(f"{name} {value}", cap, limits.max_pixel_boost) if over else None
    if cap == "mask_models_allowed":
        for kind in MODEL_MASKS:
            if kind in value and kind not in limits.mask_models_allowed:
                return over_cap(f"{name} {kind}", cap, list(limits.mask_models_allowed))
        return None
    return None if limits.enhancer_allowed else over_cap("the enhancer", cap, "false")


def _check_caps(options: FaceFusionOptions, limits: LimitsSettings, enhance: bool) -> None:
    """403 for the first option over the cap its row names (``enhance``: the older field asking
    for the enhancer, capped as its options are)."""
    for option in OPTIONS:
        value = options.value(option.name)
        answer = None if option.cap is None or value is None else _over_cap(option.cap, option.name, value, limits)
        if answer is not None:
            raise answer
    if enhance and not limits.enhancer_allowed:
        raise over_cap("the enhancer", "enhancer_allowed", "false")


def _check_points(options: FaceFusionOptions, cfg: EngineConfig) -> None:
    needs = [what for what, on in (("face_mask_types area", "area" in options.mask_types),
                                   ("mouth_mask", bool(options.value("mouth_mask")))) if on]
    if needs and cfg.landmarker.model == "none":
        raise ApiError(422, "invalid_option", f"{' and '.join(needs)} need 68-point landmarks; this service runs "
                       "face_landmarker_model 'none'")
    if options.pixel_boost is not None and cfg.swap.swapper == "classic":
        raise ApiError(422, "invalid_option", "face_swapper_pixel_boost is for model swappers; this service runs "
                       "the classic swapper")


def _check_unused(options: FaceFusionOptions, cfg: EngineConfig, enhanced: bool) -> None:
    """422 for an option the chain would accept and never use (FaceFusion ignores them silently;
    a request is told): the rule of every surface, :func:`check_options_used`."""
    try:
        check_options_used(options.given(), cfg, enhanced=enhanced)
    except ConfigError as exc:
        raise ApiError(422, "invalid_option", str(exc)) from exc


def request_quality(options: FaceFusionOptions, settings: ServeSettings, *, enhancer: bool,
                    enhance: bool = False, blend: float | None = None) -> RequestQuality:
    """Check a request's options against the service (its models, its caps, its config) and
    resolve its enhancement: ``enhance`` and ``blend`` (a share) are the older names, the
    ``face_enhancer_*`` options FaceFusion's (a blend in percent, and asking for the enhancer).
    ``enhancer``: whether the service deployed one. Both placements run every step of the chain."""
    cfg = settings.engine
    wants = enhance or options.asks_enhancer
    if blend is not None and options.enhancer_blend is not None:
        raise ApiError(422, "invalid_option", "give either blend (a share) or face_enhancer_blend (percent), not both")
    _check_models(options, cfg)
    _check_caps(options, settings.limits, wants)
    if wants and not enhancer:
        raise ApiError(422, "enhance_unavailable", "this service runs without the enhancer")
    _check_points(options, cfg)
    try:
        resulting = configured(cfg, options)
    except ConfigError as exc:
        raise ApiError(422, "invalid_option", str(exc)) from exc
    _check_unused(options, resulting, wants)
    unloaded = required_components(resulting) - required_components(cfg)
    for capability in capabilities.CAPABILITIES:
        if capability.kind in unloaded:
            raise ApiError(422, "invalid_option", f"these options need the {capability.name}, which this service "
                           "did not load (set them in its engine config)")
    models = quality_models(resulting)
    if not wants:
        return RequestQuality(options, None, models)
    if options.enhancer_blend is not None:
        blend = options.enhancer_blend / 100
    return RequestQuality(options, blend if blend is not None else cfg.enhance.blend, models)


def quality_models(cfg: EngineConfig) -> frozenset[str]:
    """The landmarker and mask models a config runs, by model name."""
    names = set(mask_model_names(cfg).values())
    if cfg.landmarker.model == "dlib_68":
        names.add("dlib_68")
    return frozenset(names)


def loaded_config(settings: ServeSettings) -> EngineConfig:
    """The config the service loads its models from: the engine's, with the mask models that
    requests may ask for (``limits.mask_models_allowed``) among its mask types."""
    cfg = settings.engine
    types = list(dict.fromkeys([*cfg.masks.types, *settings.limits.mask_models_allowed]))
    return cfg.model_copy(update={"masks": cfg.masks.model_copy(update={"types": types})})


def quality_components(settings: ServeSettings) -> list[Component]:
    """The landmarker and mask models the service loads for its requests."""
    needed = required_components(loaded_config(settings))
    return [c for c in ("landmarker", "occluder", "parser") if c in needed]


def part_components(settings: ServeSettings, after: Phase | None, until: Phase) -> list[Component]:
    """The models one part of the chain (its steps after ``after`` up to ``until``) loads to run
    any request the service accepts: the steps of :func:`loaded_config`, the enhancer's (a request
    may ask for it) and, where the swapper takes one, the swapper weight's target embedding (a
    request may set ``face_swapper_weight``: the split detector then loads the embedder)."""
    cfg = loaded_config(settings)
    weight = cfg.swap.weight if cfg.swap.weight != 0.5 else 0.25  # any weight but 0.5 enables the step
    cfg = cfg.model_copy(update={"enhance": cfg.enhance.model_copy(update={"enabled": True}),
                                 "swap": cfg.swap.model_copy(update={"weight": weight})})
    return Chain.of(cfg).part(after, until).components(cfg)
