"""FaceFusion's option names and values on every engine command (``swap``, ``job``, ...).

One vocabulary for users coming from FaceFusion 3.8.1: ``--face-mask-*``, ``--face-landmarker-*``,
``--face-swapper-*``, ``--face-enhancer-*`` and Deep-Live-Cam's ``--mouth-mask``, one flag per row
of the table of options (:data:`fusion_ray.options_table.OPTIONS`), mapped onto
:class:`fusion_ray.config.EngineConfig`. Today's ``--swapper`` and ``--enhance`` stay as aliases
(``--swapper classic`` picks the classic swapper; ``--enhance BLEND`` is a share in [0, 1]).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from fusion_ray import options_table
from fusion_ray.core.facefusion_options import apply_facefusion_options
from fusion_ray.options_table import Option


def _bounded(low: float, high: float) -> Callable[[str], float]:
    """An argparse type: a number in [low, high]."""
    def parse(text: str) -> float:
        value = float(text)
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"expected a value in [{low:g}, {high:g}], got {text}")
        return value
    return parse


def flag_arguments(option: Option) -> dict[str, Any]:
    """The keyword arguments of ``add_argument`` for ``option``'s flag."""
    default = f" (default: {option.default})" if option.default else ""
    choices = option.choices
    if option.many and choices:
        numbers = {"type": int} if isinstance(choices[0], int) else {}  # FaceFusion's angles
        return {"nargs": "+", "choices": choices, "metavar": option.metavar, **numbers,
                "help": f"{option.help}: {', '.join(map(str, choices))}{default}"}
    if option.value is bool:
        return {"action": "store_true", "default": None, "help": option.help}
    if option.many:
        return {"nargs": "+", "type": option.value, "metavar": option.metavar, "help": option.help + default}
    if choices:
        return {"choices": choices, "help": option.help + default}
    if option.value is int and option.bounds is not None:
        low, high = int(option.bounds[0]), int(option.bounds[1])
        return {"type": int, "choices": range(low, high + 1), "metavar": f"[{low}-{high}]",
                "help": option.help + default}
    if option.bounds is not None:
        return {"type": _bounded(*option.bounds), "help": option.help + default}
    return {"type": option.value, "help": option.help + default}


def add_quality_arguments(parser: argparse.ArgumentParser, rows: tuple[Option, ...] | None = None) -> None:
    """One flag per row of ``rows`` (None: the table's rows as they are now)."""
    group = parser.add_argument_group("face masks, landmarks, swapper and enhancer (FaceFusion's names)")
    for option in options_table.OPTIONS if rows is None else rows:
        group.add_argument(option.flag, **flag_arguments(option))


def apply_quality_arguments(args: argparse.Namespace, data: dict[str, Any]) -> dict[str, Any]:
    """Overlay the FaceFusion options that were given on ``data`` (an EngineConfig dump); returns them."""
    rows = options_table.OPTIONS
    given = {o.name: value for o in rows if (value := getattr(args, o.name, None)) is not None}
    apply_facefusion_options(given, data, rows)
    return given
