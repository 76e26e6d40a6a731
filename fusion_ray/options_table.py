"""FaceFusion 3.8.1's per-request options, one row each: the one table every surface is made from.

A row holds the option's name (FaceFusion's, ``face_mask_types``), the config field it sets
(``masks.types``), the type and choices of its values, the service's cap that bounds it (a field
of ``limits``), the kind of model it names, and its help. From :data:`OPTIONS` come the command
line's flags (``--face-mask-types``, :mod:`fusion_ray.cli.quality_options`), the fields of
:class:`~fusion_ray.core.facefusion_options.FaceFusionOptions` (the ``POST /v1/swap`` form and its
OpenAPI, the live start message), the keys a job manifest's ``options`` column takes, the mapping
onto :class:`~fusion_ray.config.EngineConfig` and the service's caps (:mod:`fusion_ray.serve.quality`).
Adding an option is adding a row.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, get_args

from pydantic import BaseModel

from fusion_ray.config import (
    Gender,
    LandmarkerConfig,
    MaskArea,
    MaskConfig,
    MaskRegion,
    MaskType,
    Race,
)
from fusion_ray.errors import ConfigError
from fusion_ray.models.registry import chosen_spec, names_of_kind
from fusion_ray.models.spec import ModelKind
from fusion_ray.types import DetectorAngle, FaceSelectorOrder

PixelBoost = Literal["128x128", "256x256", "384x384", "512x512", "768x768", "1024x1024"]
PIXEL_BOOSTS: tuple[PixelBoost, ...] = get_args(PixelBoost)
"""FaceFusion's pixel boost values (``--face-swapper-pixel-boost``)."""

ModelMask = Literal["occlusion", "region"]
MODEL_MASKS: tuple[ModelMask, ...] = get_args(ModelMask)
"""Mask types that run a model per face (what a service caps and a live stream's ladder drops first)."""

Cap = Literal["max_pixel_boost", "enhancer_allowed", "mask_models_allowed"]
"""The fields of the service's ``limits`` that bound an option."""


def pixels(value: Any) -> int:
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


def _padding(value: Any) -> dict[str, Any]:
    values = value if isinstance(value, list | tuple) else [value]
    return {"swap.mask_padding": padding_fractions([int(v) for v in values])}


def _swapper(value: Any) -> dict[str, Any]:
    if value == "classic":  # the model-free swap (served_models names it so)
        return {"swap.swapper": "classic"}
    name = chosen_spec(str(value), "swapper", "face_swapper_model").name
    return {"models.swapper": name, "swap.swapper": "inswapper"}  # "inswapper": a swap model


def _enhancer(value: Any) -> dict[str, Any]:
    return {"models.enhancer": chosen_spec(str(value), "enhancer", "face_enhancer_model").name,
            "enhance.enabled": True}


def _literal(model: type[BaseModel], field: str) -> tuple[str, ...]:
    """The values of a config field typed as a Literal."""
    return get_args(model.model_fields[field].annotation)


@dataclass(frozen=True)
class Option:
    """One FaceFusion option: what it is called, what it sets, what it takes, and who bounds it."""

    name: str
    """FaceFusion's name (``--face-mask-types`` on the command line, ``face_mask_types`` elsewhere)."""
    sets: str
    """The EngineConfig field it sets (``section.field``)."""
    value: Any
    """The type of one value: ``float``, ``int``, ``bool``, ``str`` (a model's name) or a Literal."""
    help: str
    """What it does, in lower case, without its default."""
    default: str = ""
    """The default as the command line states it."""
    count: tuple[int, int | None] | None = None
    """How many values it takes (least, most; None: no most); None: one value."""
    bounds: tuple[float, float] | None = None
    """The least and the most a number may be."""
    model: ModelKind | None = None
    """The kind of model it names (a service runs only its own, loaded at start)."""
    model_choices: tuple[str, ...] = ()
    """The models it may name (a model option)."""
    for_mask: MaskType | None = None
    """The mask type it is for (given without it, it would be unused)."""
    cap: Cap | None = None
    """The field of the service's ``limits`` that bounds it."""
    convert: Callable[[Any], dict[str, Any]] | None = None
    """The config fields it sets, by path, when its value is not the field's as it is."""
    metavar: str | None = None
    """The command line's name for one value."""
    squared: bool = False
    """A number ``n`` stands for ``nxn`` (FaceFusion's pixel boost)."""

    @property
    def flag(self) -> str:
        """The command-line flag."""
        return "--" + self.name.replace("_", "-")

    @property
    def many(self) -> bool:
        return self.count is not None

    @property
    def choices(self) -> tuple[Any, ...]:
        """The values it takes (empty: any of its type within :attr:`bounds`)."""
        return self.model_choices if self.model else get_args(self.value)

    @property
    def number(self) -> bool:
        """Whether its values are numbers (a boolean never is one: JSON's true is not 1)."""
        return self.value in (int, float) or self.squared

    def fields(self, value: Any) -> dict[str, Any]:
        """The config fields ``value`` sets, by path."""
        return self.convert(value) if self.convert is not None else {self.sets: value}


OPTIONS: tuple[Option, ...] = (
    Option("face_mask_types", "masks.types", MaskType, "masks a face is pasted through, combined by minimum; "
           "occlusion and region run a model per face, area needs a 68-point landmarker", "box",
           count=(1, None), cap="mask_models_allowed", metavar="TYPE"),
    Option("face_mask_blur", "swap.mask_blur", float, "box mask blur in [0, 1]", "0.3", bounds=(0.0, 1.0)),
    Option("face_mask_padding", "swap.mask_padding", int, "box mask padding in percent [0, 100]: "
           "TOP [RIGHT [BOTTOM [LEFT]]], as CSS", "0 0 0 0", count=(1, 4), bounds=(0, 100), metavar="PERCENT",
           convert=_padding),
    Option("face_mask_areas", "masks.areas", MaskArea, "areas of the area mask", "all", count=(1, None),
           metavar="AREA", for_mask="area"),
    Option("face_mask_regions", "masks.regions", MaskRegion, "regions of the region mask", "all", count=(1, None),
           metavar="REGION", for_mask="region"),
    Option("face_occluder_model", "masks.occluder_model", str, "the occlusion mask model", "xseg_1",
           model="occluder", for_mask="occlusion", model_choices=_literal(MaskConfig, "occluder_model")),
    Option("face_parser_model", "masks.parser_model", str, "the region mask model", "bisenet_resnet_34",
           model="parser", for_mask="region", model_choices=_literal(MaskConfig, "parser_model")),
    Option("face_landmarker_model", "landmarker.model", str, "the 68-point landmarker; area masks and the mouth "
           "mask need one", "none", model="landmarker", model_choices=_literal(LandmarkerConfig, "model")),
    Option("face_landmarker_score", "landmarker.score", float, "over this score the 5 alignment points come from "
           "the 68", "0.5", bounds=(0.0, 1.0)),
    Option("face_swapper_model", "models.swapper", str, "the swap model", "inswapper_128", model="swapper",
           model_choices=names_of_kind("swapper"), convert=_swapper),
    Option("face_swapper_pixel_boost", "swap.pixel_boost", PixelBoost, "swap resolution, a multiple of the "
           "model's size (512 is read as 512x512)", "the model's", cap="max_pixel_boost",
           convert=lambda value: {"swap.pixel_boost": pixels(value)}, squared=True),
    Option("face_swapper_weight", "swap.weight", float, "source embedding balance against the target's",
           "0.5", bounds=(0.0, 1.0)),
    Option("face_enhancer_model", "models.enhancer", str, "enhance the swapped faces with this model",
           model="enhancer", model_choices=names_of_kind("enhancer"), cap="enhancer_allowed", convert=_enhancer),
    Option("face_enhancer_blend", "enhance.blend", int, "enhanced share in percent; enables the enhancer", "80",
           bounds=(0, 100), cap="enhancer_allowed",
           convert=lambda value: {"enhance.enabled": True, "enhance.blend": float(value) / 100}),
    Option("face_enhancer_weight", "enhance.weight", float, "the enhancer's weight input, for models that have "
           "one (codeformer has one)", "0.5", bounds=(0.0, 1.0)),
    Option("mouth_mask", "masks.mouth_mask", bool, "keep the target's own mouth over the swap (needs a 68-point "
           "landmarker)"),
    Option("face_selector_order", "selection.order", FaceSelectorOrder, "the order the selection puts the faces "
           "in: by the box's left or top edge, its area, or the detector's score", "reading order"),
    Option("face_selector_gender", "selection.gender", Gender, "only faces of this gender (runs the fairface "
           "classifier)"),
    Option("face_selector_race", "selection.race", Race, "only faces of this race (runs the fairface classifier)"),
    Option("face_selector_age_start", "selection.age_start", int, "only faces whose age range reaches this age "
           "or older (runs the fairface classifier)", "0", bounds=(0, 100)),
    Option("face_selector_age_end", "selection.age_end", int, "only faces whose age range starts before this "
           "age (runs the fairface classifier)", "100", bounds=(0, 100)),
    Option("face_detector_angles", "detector.angles", DetectorAngle, "also search the frame turned by these "
           "angles (degrees counter-clockwise); the faces are mapped back and merged", "0", count=(1, 4),
           metavar="ANGLE", convert=lambda value: {"detector.angles": tuple(int(v) for v in value)}),
)
"""The options in the order they are applied (the enhancer's blend after its model)."""

OPTION_NAMES: tuple[str, ...] = tuple(option.name for option in OPTIONS)
BY_NAME: dict[str, Option] = {option.name: option for option in OPTIONS}
NUMBER_OPTIONS: tuple[str, ...] = tuple(option.name for option in OPTIONS if option.number)
"""Options whose values are numbers: a boolean is never one of them (JSON's true is not 1)."""
LIST_OPTIONS: tuple[str, ...] = tuple(option.name for option in OPTIONS if option.many)
"""Options that take several values: on a form, the field repeated or one field of words."""
ENHANCER_OPTIONS: tuple[str, ...] = tuple(option.name for option in OPTIONS if option.cap == "enhancer_allowed")
"""Options that ask for the enhancer (what ``limits.enhancer_allowed`` bounds)."""
MODEL_OPTIONS: dict[str, ModelKind] = {option.name: option.model for option in OPTIONS if option.model is not None}
"""Options that name a model, with its kind."""
