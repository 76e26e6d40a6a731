"""FaceFusion 3.8.1's option names (``face_mask_types``, ``face_swapper_pixel_boost``, ...) mapped onto
:class:`fusion_ray.config.EngineConfig`: one mapping for the command line (``--face-mask-types``)
and a job manifest's ``options`` column (``{"face_mask_types": ["box", "area"]}``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fusion_ray.errors import ConfigError
from fusion_ray.models.registry import chosen_spec

FACEFUSION_OPTIONS = ("face_mask_types", "face_mask_blur", "face_mask_padding", "face_mask_areas",
                      "face_mask_regions", "face_occluder_model", "face_parser_model", "face_landmarker_model",
                      "face_landmarker_score", "face_swapper_model", "face_swapper_pixel_boost",
                      "face_swapper_weight", "face_enhancer_model", "face_enhancer_blend", "face_enhancer_weight",
                      "mouth_mask")
"""The options, with FaceFusion's names (``--face-mask-types`` on the command line)."""


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
        fields = {_PLAIN[option]: value} if option in _PLAIN else _converted(option, value)
        for (section, key), field_value in fields.items():
            data[section][key] = field_value
