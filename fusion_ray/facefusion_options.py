"""FaceFusion 3.8.1's option names (``face_mask_types``, ``face_swapper_pixel_boost``, ...) mapped onto
:class:`fusion_ray.config.EngineConfig`: one mapping for the command line (``--face-mask-types``),
a job manifest's ``options`` column (``{"face_mask_types": ["box", "area"]}``) and, typed as
:class:`FaceFusionOptions`, the service's per-request options (the ``POST /v1/swap`` form fields
and the live start message): :func:`configured` overlays them on the service's config.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from fusion_ray.config import EngineConfig, MaskArea, MaskRegion, MaskType, parse_config
from fusion_ray.core.layout import source_crop_layout
from fusion_ray.errors import ConfigError
from fusion_ray.models.registry import chosen_spec

FACEFUSION_OPTIONS = ("face_mask_types", "face_mask_blur", "face_mask_padding", "face_mask_areas",
                      "face_mask_regions", "face_occluder_model", "face_parser_model", "face_landmarker_model",
                      "face_landmarker_score", "face_swapper_model", "face_swapper_pixel_boost",
                      "face_swapper_weight", "face_enhancer_model", "face_enhancer_blend", "face_enhancer_weight",
                      "mouth_mask")
"""The options, with FaceFusion's names (``--face-mask-types`` on the command line)."""


MODEL_MASKS = ("occlusion", "region")
"""Mask types that run a model per face (what a service caps and a live stream's ladder drops first)."""

PixelBoost = Literal["128x128", "256x256", "384x384", "512x512", "768x768", "1024x1024"]
PIXEL_BOOSTS: tuple[PixelBoost, ...] = ("128x128", "256x256", "384x384", "512x512", "768x768", "1024x1024")
"""FaceFusion's pixel boost values (``--face-swapper-pixel-boost``)."""


def _pixels(value: Any) -> int:
    """A pixel boost as FaceFusion writes it (``512x512``) or as a number."""
    try:
        return int(str(value).partition("x")[0])
    except ValueError:
        raise ConfigError(f"face_swapper_pixel_boost: expected e.g. 512x512, got {value!r}") from None


def padding_fractions(values: list[int]) -> tuple[float, float, float, float]:
    """FaceFusion's 1-4 padding percentages (CSS order) as (top, right, bottom, left) fractions."""
    if not 1 <= len(values) <= 4 or any(not 0 <= v <= 100 for v in values):
        raise ConfigError(f"--face-mask-padding expects 1 to 4 percentages in [0, 100], got {values}")
    full = [*values, *values, *values, *values] if len(values) < 3 else [*values, values[1]]
    top, right, bottom, left = full[:4]
    return top / 100, right / 100, bottom / 100, left / 100


_PLAIN: dict[str, tuple[str, str]] = {
    "face_mask_types": ("masks", "types"), "face_mask_areas": ("masks", "areas"),
    "face_mask_regions": ("masks", "regions"), "face_occluder_model": ("masks", "occluder_model"),
    "face_parser_model": ("masks", "parser_model"), "mouth_mask": ("masks", "mouth_mask"),
    "face_mask_blur": ("swap", "mask_blur"), "face_swapper_weight": ("swap", "weight"),
    "face_landmarker_model": ("landmarker", "model"), "face_landmarker_score": ("landmarker", "score"),
    "face_enhancer_weight": ("enhance", "weight"),
}
"""Options that set one config field as they are."""


def _converted(option: str, value: Any) -> dict[tuple[str, str], Any]:
    """The config fields an option that is not plain sets."""
    if option == "face_mask_padding":
        values = value if isinstance(value, list) else [value]
        return {("swap", "mask_padding"): padding_fractions([int(v) for v in values])}
    if option == "face_swapper_pixel_boost":
        return {("swap", "pixel_boost"): _pixels(value)}
    if option == "face_swapper_model":
        if value == "classic":  # the model-free swap (served_models names it so)
            return {("swap", "swapper"): "classic"}
        name = chosen_spec(str(value), "swapper", "face_swapper_model").name
        return {("models", "swapper"): name, ("swap", "swapper"): "inswapper"}  # "inswapper": a swap model
    if option == "face_enhancer_model":
        name = chosen_spec(str(value), "enhancer", "face_enhancer_model").name
        return {("models", "enhancer"): name, ("enhance", "enabled"): True}
    return {("enhance", "enabled"): True, ("enhance", "blend"): float(value) / 100}  # face_enhancer_blend


def apply_facefusion_options(values: Mapping[str, Any], data: dict[str, Any]) -> None:
    """Overlay the FaceFusion options in ``values`` (None: not given) on ``data`` (an EngineConfig
    dump); the config validates the values when ``data`` is parsed."""
    unknown = sorted(set(values) - set(FACEFUSION_OPTIONS))
    if unknown:
        raise ConfigError(f"unknown FaceFusion option(s) {unknown}; expected some of {list(FACEFUSION_OPTIONS)}")
    for option in FACEFUSION_OPTIONS:  # in this order: the enhancer blend after the enhancer model
        value = values.get(option)
        if value is None:
            continue
        if option in NUMBER_OPTIONS:
            try:
                refuse_boolean(value)
            except ValueError as exc:
                raise ConfigError(f"{option}: {exc}") from None
        fields = {_PLAIN[option]: value} if option in _PLAIN else _converted(option, value)
        for (section, key), field_value in fields.items():
            data[section][key] = field_value


NUMBER_OPTIONS = ("face_mask_blur", "face_mask_padding", "face_landmarker_score", "face_swapper_pixel_boost",
                  "face_swapper_weight", "face_enhancer_blend", "face_enhancer_weight")
"""Options whose values are numbers: a boolean is never one of them (JSON's true is not 1)."""
DEFAULT_WEIGHT = 0.5
"""FaceFusion's default swapper and enhancer weight: asking for it asks for what runs anyway."""


def refuse_boolean(value: Any) -> Any:
    """``value`` unless it is a boolean or holds one (ValueError: a number was expected)."""
    if isinstance(value, bool) or (isinstance(value, list | tuple) and any(isinstance(v, bool) for v in value)):
        raise ValueError(f"expected a number, got {value!r}")
    return value


def unused_options(given: Mapping[str, Any], cfg: EngineConfig, *, enhanced: bool) -> list[str]:
    """Why each option of ``given`` would be accepted and never used by ``cfg`` (the config the
    options made; ``enhanced``: whether the swapped faces are enhanced): one rule for the command
    line, job manifests, ``POST /v1/swap`` and the live start message. A weight of FaceFusion's
    default (0.5) asks for what runs anyway and is not refused."""
    types = cfg.masks.types
    reasons = [f"{option} is for the {mask} mask; face_mask_types is {' '.join(types)}"
               for option, mask in (("face_occluder_model", "occlusion"), ("face_parser_model", "region"),
                                    ("face_mask_regions", "region"), ("face_mask_areas", "area"))
               if given.get(option) is not None and mask not in types]
    if given.get("face_swapper_weight") not in (None, DEFAULT_WEIGHT) and source_crop_layout(cfg) is not None:
        runs = "the classic swapper" if cfg.swap.swapper == "classic" else \
            f"{cfg.models.swapper}, which is given the source as an image"
        reasons.append(f"face_swapper_weight balances the source embedding against the target's; the swap runs {runs}")
    if given.get("face_landmarker_score") is not None and cfg.landmarker.model == "none":
        reasons.append("face_landmarker_score picks the 68-point landmarker's points over the detector's; "
                       "it runs face_landmarker_model 'none'")
    if given.get("face_enhancer_weight") not in (None, DEFAULT_WEIGHT):
        if not enhanced:
            reasons.append("face_enhancer_weight is the enhancer's; the faces are not enhanced")
        elif not chosen_spec(cfg.models.enhancer, "enhancer", "face_enhancer_model").weight_input:
            reasons.append(f"face_enhancer_weight is for enhancers with a weight input (codeformer); "
                           f"{cfg.models.enhancer} has none")
    return reasons


def check_options_used(given: Mapping[str, Any], cfg: EngineConfig, *, enhanced: bool) -> None:
    """ConfigError naming every option of ``given`` that ``cfg`` would not use (:func:`unused_options`)."""
    reasons = unused_options(given, cfg, enhanced=enhanced)
    if reasons:
        raise ConfigError(f"option(s) that would be unused: {'; '.join(reasons)}")


def _words(value: Any) -> Any:
    """A list option as one text (a form field, FaceFusion's command line: ``"box area"``, or
    ``"box,area"``) split into its words; other values as they are."""
    if isinstance(value, str):
        return value.replace(",", " ").split()
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return [word for v in value for word in v.replace(",", " ").split()]
    return value


class FaceFusionOptions(BaseModel):
    """The per-request FaceFusion options (snake_case names of FaceFusion's ``--face-*`` options;
    None: the service's own setting). The models are the service's, loaded at its start: a
    request may name them only as the service runs them."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    face_mask_types: tuple[MaskType, ...] | None = Field(
        default=None, min_length=1, description="Masks a face is pasted through, combined by minimum: box, occlusion, "
        "area, region (words separated by spaces or commas, or the field repeated). occlusion and region run a "
        "model per face (limits.mask_models_allowed); area needs the service's 68-point landmarker.")
    face_mask_blur: float | None = Field(default=None, ge=0.0, le=1.0, description="Box mask blur in [0, 1].")
    face_mask_padding: tuple[int, ...] | None = Field(
        default=None, min_length=1, max_length=4, description="Box mask padding in percent [0, 100]: "
        "TOP [RIGHT [BOTTOM [LEFT]]], as CSS.")
    face_mask_areas: tuple[MaskArea, ...] | None = Field(
        default=None, min_length=1, description="Areas of the area mask: upper-face, lower-face, mouth.")
    face_mask_regions: tuple[MaskRegion, ...] | None = Field(
        default=None, min_length=1, description="Regions of the region mask: skin, left-eyebrow, right-eyebrow, "
        "left-eye, right-eye, glasses, nose, mouth, upper-lip, lower-lip.")
    face_occluder_model: str | None = Field(default=None, max_length=64,
                                            description="The occlusion mask model: only the service's.")
    face_parser_model: str | None = Field(default=None, max_length=64,
                                          description="The region mask model: only the service's.")
    face_landmarker_model: str | None = Field(default=None, max_length=64,
                                              description="The 68-point landmarker: only the service's.")
    face_landmarker_score: float | None = Field(
        default=None, ge=0.0, le=1.0, description="Over this score the 5 alignment points come from the 68.")
    face_swapper_model: str | None = Field(default=None, max_length=64,
                                           description="The swap model: only the service's.")
    face_swapper_pixel_boost: PixelBoost | None = Field(
        default=None, description="Swap resolution, a multiple of the model's size (512 is read as 512x512); "
        "capped by limits.max_pixel_boost.")
    face_swapper_weight: float | None = Field(
        default=None, ge=0.0, le=1.0, description="Source embedding balance against the target's (0.5: the source).")
    face_enhancer_model: str | None = Field(
        default=None, max_length=64, description="Enhance the swapped faces with this model: only the service's.")
    face_enhancer_blend: int | None = Field(
        default=None, ge=0, le=100, description="Enhanced share in percent; enables the enhancer.")
    face_enhancer_weight: float | None = Field(
        default=None, ge=0.0, le=1.0, description="The enhancer's weight input, for models that have one.")
    mouth_mask: bool | None = Field(
        default=None, description="Keep the target's own mouth over the swap (needs the service's 68-point "
        "landmarker).")

    @field_validator("face_mask_types", "face_mask_areas", "face_mask_regions", "face_mask_padding", mode="before")
    @classmethod
    def _split(cls, value: Any) -> Any:
        return _words(value)

    @field_validator(*NUMBER_OPTIONS, mode="before")
    @classmethod
    def _not_boolean(cls, value: Any) -> Any:
        return refuse_boolean(value)

    @field_validator("face_mask_padding")
    @classmethod
    def _percentages(cls, value: tuple[int, ...] | None) -> tuple[int, ...] | None:
        if value is not None:
            try:
                padding_fractions(list(value))
            except ConfigError as exc:
                raise ValueError(str(exc)) from None
        return value

    @field_validator("face_swapper_pixel_boost", mode="before")
    @classmethod
    def _square(cls, value: Any) -> Any:
        """``512`` (a number or its text) is FaceFusion's ``512x512``."""
        if isinstance(value, int | str) and str(value).strip().isdigit():
            return f"{int(value)}x{int(value)}"
        return value

    @property
    def facefusion(self) -> FaceFusionOptions:
        """These options on their own (without the fields of a model that extends them: a form, a
        start message), as the chain carries them."""
        return FaceFusionOptions.model_validate({name: getattr(self, name) for name in FACEFUSION_OPTIONS})

    def given(self) -> dict[str, Any]:
        """The options given, as :func:`apply_facefusion_options` takes them."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in self.model_dump(exclude_none=True).items()}

    @property
    def pixel_boost(self) -> int | None:
        return None if self.face_swapper_pixel_boost is None else _pixels(self.face_swapper_pixel_boost)


NO_OPTIONS = FaceFusionOptions()
"""No option given: the service's own settings."""


def configured(base: EngineConfig, options: FaceFusionOptions) -> EngineConfig:
    """``base`` with ``options`` applied by the one mapping (ConfigError when the result is invalid)."""
    given = options.given()
    if not given:
        return base
    data = base.model_dump()
    apply_facefusion_options(given, data)
    return parse_config(data, EngineConfig, source="FaceFusion options")


def served_models(cfg: EngineConfig) -> dict[str, str]:
    """The models a config runs, by the option that names them."""
    return {
        "face_swapper_model": "classic" if cfg.swap.swapper == "classic" else cfg.models.swapper,
        "face_enhancer_model": cfg.models.enhancer,
        "face_occluder_model": cfg.masks.occluder_model,
        "face_parser_model": cfg.masks.parser_model,
        "face_landmarker_model": cfg.landmarker.model,
    }


def check_served(options: FaceFusionOptions, cfg: EngineConfig) -> None:
    """ConfigError when ``options`` name a model other than the one ``cfg`` runs (a server's models
    are loaded at its start; a request cannot change them)."""
    given = options.given()
    for option, served in served_models(cfg).items():
        asked = given.get(option)
        if asked is not None and asked != served:
            raise ConfigError(f"{option} {asked!r}: this service runs {served!r} (its models are loaded at start; "
                              "a request cannot change them)")
