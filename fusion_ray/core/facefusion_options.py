"""FaceFusion 3.8.1's option names (``face_mask_types``, ``face_swapper_pixel_boost``, ...) mapped onto
:class:`fusion_ray.config.EngineConfig`, all made from the one table of options
(:data:`fusion_ray.options_table.OPTIONS`): the mapping the command line (``--face-mask-types``)
and a job manifest's ``options`` column (``{"face_mask_types": ["box", "area"]}``) use and, as the
fields of :class:`FaceFusionOptions`, the service's per-request options (the ``POST /v1/swap`` form
fields and the live start message): :func:`configured` overlays them on the service's config.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, create_model

from fusion_ray import options_table
from fusion_ray.config import EngineConfig, parse_config
from fusion_ray.core.layout import source_crop_layout
from fusion_ray.errors import ConfigError
from fusion_ray.models.registry import chosen_spec
from fusion_ray.options_table import (
    ENHANCER_OPTIONS,
    MODEL_MASKS,
    NUMBER_OPTIONS,
    OPTION_NAMES,
    OPTIONS,
    PIXEL_BOOSTS,
    Option,
    PixelBoost,
    padding_fractions,
    pixels,
)

__all__ = ["FACEFUSION_OPTIONS", "MODEL_MASKS", "NO_OPTIONS", "NUMBER_OPTIONS", "PIXEL_BOOSTS", "FaceFusionOptions",
           "PixelBoost", "apply_facefusion_options", "check_options_used", "check_served", "configured",
           "padding_fractions", "refuse_boolean", "served_models", "unused_options"]

FACEFUSION_OPTIONS = OPTION_NAMES
"""The options, with FaceFusion's names (``--face-mask-types`` on the command line)."""


def apply_facefusion_options(values: Mapping[str, Any], data: dict[str, Any], rows: tuple[Option, ...] | None = None
                             ) -> None:
    """Overlay the FaceFusion options in ``values`` (None: not given) on ``data`` (an EngineConfig
    dump), by the table's ``rows`` (None: its rows as they are now); the config validates the
    values when ``data`` is parsed."""
    rows = options_table.OPTIONS if rows is None else rows
    names = [option.name for option in rows]
    unknown = sorted(set(values) - set(names))
    if unknown:
        raise ConfigError(f"unknown FaceFusion option(s) {unknown}; expected some of {names}")
    for option in rows:  # in the table's order: the enhancer blend after the enhancer model
        value = values.get(option.name)
        if value is None:
            continue
        if option.number:
            try:
                refuse_boolean(value)
            except ValueError as exc:
                raise ConfigError(f"{option.name}: {exc}") from None
        for path, field_value in option.fields(value).items():
            section, key = path.split(".")
            data[section][key] = field_value


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
    reasons = [f"{option.name} is for the {option.for_mask} mask; face_mask_types is {' '.join(types)}"
               for option in OPTIONS if option.for_mask and given.get(option.name) is not None
               and option.for_mask not in types]
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
        return [_number(word) for word in value.replace(",", " ").split()]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return [_number(word) for v in value for word in v.replace(",", " ").split()]
    return value


def _number(word: str) -> Any:
    """A word of digits as its number (the angles' choices are numbers), any other as it is."""
    return int(word) if word.isdigit() else word


def _description(option: Option) -> str:
    """The help of ``option`` as a service states it (the form's OpenAPI, the start message)."""
    text = option.help[0].upper() + option.help[1:]
    if option.many:
        text += " (words separated by spaces or commas, or the field repeated)"
    if option.model:
        text += ": only the service's"
    if option.cap:
        text += f"; capped by limits.{option.cap}"
    return text + "."


def _square(value: Any) -> Any:
    """``512`` (a number or its text) is FaceFusion's ``512x512``."""
    if isinstance(value, int | str) and str(value).strip().isdigit():
        return f"{int(value)}x{int(value)}"
    return value


def _field(option: Option) -> tuple[Any, Any]:
    """The pydantic field of ``option`` on a service (None: the service's own setting), with its
    parsing: a list from words, no boolean for a number, ``512`` for ``512x512``. A model is named
    by any text: a request naming another than the service's gets its own answer."""
    bounds: dict[str, Any] = {} if option.bounds is None else {"ge": option.bounds[0], "le": option.bounds[1]}
    description = _description(option)
    parsing = [BeforeValidator(parse) for parse, on in ((_words, option.many), (refuse_boolean, option.number),
                                                        (_square, option.squared)) if on]
    kind: Any
    if option.model:
        kind, field = str | None, Field(default=None, max_length=64, description=description)
    elif option.many:
        least, most = option.count or (1, None)
        item: Any = Annotated[option.value, Field(**bounds)] if bounds else option.value
        kind = tuple[item, ...] | None
        field = Field(default=None, min_length=least, max_length=most, description=description)
    else:
        kind, field = option.value | None, Field(default=None, description=description, **bounds)
    return (Annotated[kind, *parsing] if parsing else kind), field


def options_model(name: str, base: type[OptionsModel], rows: tuple[Option, ...] = OPTIONS, doc: str = "") -> Any:
    """``base`` with one field per row (pydantic's ``create_model``)."""
    fields: dict[str, Any] = {option.name: _field(option) for option in rows}
    return create_model(name, __base__=base, __module__=__name__, __doc__=doc or base.__doc__, **fields)


class OptionsModel(BaseModel):
    """What every model with FaceFusion's options shares: their typed readers. The fields are made
    from the table's rows (:func:`options_model`)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    def value(self, name: str) -> Any:
        """The value of option ``name`` (None: not given)."""
        return getattr(self, name)

    @property
    def facefusion(self) -> FaceFusionOptions:
        """These options on their own (without the fields of a model that extends them: a form, a
        start message), as the chain carries them."""
        return FaceFusionOptions.model_validate({name: self.value(name) for name in OPTION_NAMES})

    def given(self) -> dict[str, Any]:
        """The options given, as :func:`apply_facefusion_options` takes them."""
        return {name: list(v) if isinstance(v, tuple) else v for name in OPTION_NAMES
                if (v := self.value(name)) is not None}

    @property
    def mask_types(self) -> tuple[str, ...]:
        """``face_mask_types`` (empty: not given)."""
        return tuple(self.value("face_mask_types") or ())

    @property
    def pixel_boost(self) -> int | None:
        boost = self.value("face_swapper_pixel_boost")
        return None if boost is None else pixels(boost)

    @property
    def asks_enhancer(self) -> bool:
        """Whether an option that asks for the enhancer is given (its model, its blend)."""
        return any(self.value(name) is not None for name in ENHANCER_OPTIONS)

    @property
    def enhancer_blend(self) -> int | None:
        """``face_enhancer_blend`` in percent (None: not given)."""
        blend = self.value("face_enhancer_blend")
        return None if blend is None else int(blend)


if TYPE_CHECKING:  # a type checker sees the readers above; the fields are the table's, made at import
    FaceFusionOptions = OptionsModel
else:
    FaceFusionOptions = options_model(
        "FaceFusionOptions", OptionsModel,
        doc="The per-request FaceFusion options (snake_case names of FaceFusion's ``--face-*`` options; None: the "
        "service's own setting), one field per row of the table. The models are the service's, loaded at its "
        "start: a request may name them only as the service runs them.")


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
    """The models a config runs, by the option that names them (the config field it sets)."""
    served = {option.name: str(getattr(getattr(cfg, section), key)) for option in OPTIONS if option.model
              for section, key in [option.sets.split(".")]}
    if cfg.swap.swapper == "classic":  # the model-free swap: face_swapper_model classic sets it
        served["face_swapper_model"] = "classic"
    return served


def check_served(options: FaceFusionOptions, cfg: EngineConfig) -> None:
    """ConfigError when ``options`` name a model other than the one ``cfg`` runs (a server's models
    are loaded at its start; a request cannot change them)."""
    given = options.given()
    for option, served in served_models(cfg).items():
        asked = given.get(option)
        if asked is not None and asked != served:
            raise ConfigError(f"{option} {asked!r}: this service runs {served!r} (its models are loaded at start; "
                              "a request cannot change them)")
