"""FaceFusion's option names and values on every engine command (``swap``, ``job``, ...).

One vocabulary for users coming from FaceFusion 3.8.1: ``--face-mask-*``, ``--face-landmarker-*``,
``--face-swapper-*``, ``--face-enhancer-*`` and Deep-Live-Cam's ``--mouth-mask``, mapped onto
:class:`fusion_ray.config.EngineConfig`. Today's ``--swapper`` and ``--enhance`` stay as aliases
(``--swapper classic`` picks the classic swapper; ``--enhance BLEND`` is a share in [0, 1]).
"""

from __future__ import annotations

import argparse
from typing import Any

from fusion_ray.config import MASK_AREAS, MASK_REGIONS
from fusion_ray.facefusion_options import FACEFUSION_OPTIONS, PIXEL_BOOSTS, apply_facefusion_options
from fusion_ray.models.registry import names_of_kind

MASK_TYPES = ("box", "occlusion", "area", "region")
OCCLUDER_MODELS = ("xseg_1", "xseg_2", "xseg_3")
PARSER_MODELS = ("bisenet_resnet_18", "bisenet_resnet_34")
LANDMARKER_MODELS = ("none", "2dfan4", "dlib_68")
SWAPPER_MODELS = names_of_kind("swapper")
"""Every swap model row of the registry (inswapper_128 first)."""
ENHANCER_MODELS = names_of_kind("enhancer")
"""Every enhancer row of the registry (gfpgan_1.4 first)."""


def _fraction(text: str) -> float:
    value = float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a value in [0, 1], got {text}")
    return value


def add_quality_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("face masks, landmarks, swapper and enhancer (FaceFusion's names)")
    group.add_argument("--face-mask-types", nargs="+", choices=MASK_TYPES, metavar="TYPE",
                       help=f"masks a face is pasted through, combined by minimum: {', '.join(MASK_TYPES)} "
                       "(default: box)")
    group.add_argument("--face-mask-blur", type=_fraction, help="box mask blur in [0, 1] (default 0.3)")
    group.add_argument("--face-mask-padding", type=int, nargs="+", metavar="PERCENT",
                       help="box mask padding in percent: TOP [RIGHT [BOTTOM [LEFT]]] (default 0 0 0 0)")
    group.add_argument("--face-mask-areas", nargs="+", choices=MASK_AREAS, metavar="AREA",
                       help=f"areas of the area mask: {', '.join(MASK_AREAS)} (default: all)")
    group.add_argument("--face-mask-regions", nargs="+", choices=MASK_REGIONS, metavar="REGION",
                       help=f"regions of the region mask: {', '.join(MASK_REGIONS)} (default: all)")
    group.add_argument("--face-occluder-model", choices=OCCLUDER_MODELS, help="occlusion mask model (default xseg_1)")
    group.add_argument("--face-parser-model", choices=PARSER_MODELS,
                       help="region mask model (default bisenet_resnet_34)")
    group.add_argument("--face-landmarker-model", choices=LANDMARKER_MODELS,
                       help="68-point landmarker (default none); area masks and --mouth-mask need one")
    group.add_argument("--face-landmarker-score", type=_fraction,
                       help="over this score the 5 alignment points come from the 68 (default 0.5)")
    group.add_argument("--face-swapper-model", choices=SWAPPER_MODELS, help="swap model (default inswapper_128)")
    group.add_argument("--face-swapper-pixel-boost", choices=PIXEL_BOOSTS,
                       help="swap resolution, a multiple of the model's size (default: the model's)")
    group.add_argument("--face-swapper-weight", type=_fraction,
                       help="source embedding balance against the target's (default 0.5)")
    group.add_argument("--face-enhancer-model", choices=ENHANCER_MODELS,
                       help="enhance the swapped faces with this model")
    group.add_argument("--face-enhancer-blend", type=int, choices=range(0, 101), metavar="[0-100]",
                       help="enhanced share in percent (default 80); enables the enhancer")
    group.add_argument("--face-enhancer-weight", type=_fraction, help="the enhancer's weight input, for models that have one (default 0.5; codeformer has one)")
    group.add_argument("--mouth-mask", action="store_true", default=None,
                       help="keep the target's own mouth over the swap (needs a face landmarker)")


def apply_quality_arguments(args: argparse.Namespace, data: dict[str, Any]) -> dict[str, Any]:
    """Overlay the FaceFusion options that were given on ``data`` (an EngineConfig dump); returns them."""
    given = {key: value for key in FACEFUSION_OPTIONS if (value := getattr(args, key, None)) is not None}
    apply_facefusion_options(given, data)
    return given
