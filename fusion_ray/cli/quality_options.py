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
from fusion_ray.errors import ConfigError

MASK_TYPES = ("box", "occlusion", "area", "region")
OCCLUDER_MODELS = ("xseg_1", "xseg_2", "xseg_3")
PARSER_MODELS = ("bisenet_resnet_18", "bisenet_resnet_34")
LANDMARKER_MODELS = ("none", "2dfan4", "dlib_68")
SWAPPER_MODELS = ("inswapper_128", "inswapper_128_fp16")
"""The swap models the chain runs today (the registry's other rows are not wired yet)."""
ENHANCER_MODELS = ("gfpgan_1.4",)
"""The enhancers the chain runs today (the registry's other rows, models.spec_models.SpecEnhancer,
are not wired yet: core/frames.py, being reworked, types the enhancer as GFPGAN's)."""
PIXEL_BOOSTS = ("128x128", "256x256", "384x384", "512x512", "768x768", "1024x1024")


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
    group.add_argument("--face-enhancer-weight", type=_fraction, help="the enhancer's weight input, for models that have one (default 0.5; gfpgan_1.4 has none)")
    group.add_argument("--mouth-mask", action="store_true", default=None,
                       help="keep the target's own mouth over the swap (needs a face landmarker)")


def padding_fractions(values: list[int]) -> tuple[float, float, float, float]:
    """FaceFusion's 1-4 padding percentages (CSS order) as (top, right, bottom, left) fractions."""
    if not 1 <= len(values) <= 4 or any(not 0 <= v <= 100 for v in values):
        raise ConfigError(f"--face-mask-padding expects 1 to 4 percentages in [0, 100], got {values}")
    full = [*values, *values, *values, *values] if len(values) < 3 else [*values, values[1]]
    top, right, bottom, left = full[:4]
    return top / 100, right / 100, bottom / 100, left / 100


def apply_quality_arguments(args: argparse.Namespace, data: dict[str, Any]) -> None:
    """Overlay the FaceFusion options that were given on ``data`` (an EngineConfig dump)."""
    masks, swap, enhance = data["masks"], data["swap"], data["enhance"]
    for option, key in (("face_mask_types", "types"), ("face_mask_areas", "areas"),
                        ("face_mask_regions", "regions"), ("face_occluder_model", "occluder_model"),
                        ("face_parser_model", "parser_model"), ("mouth_mask", "mouth_mask")):
        if getattr(args, option, None) is not None:
            masks[key] = getattr(args, option)
    if getattr(args, "face_mask_blur", None) is not None:
        swap["mask_blur"] = args.face_mask_blur
    if getattr(args, "face_mask_padding", None) is not None:
        swap["mask_padding"] = padding_fractions(args.face_mask_padding)
    if getattr(args, "face_landmarker_model", None) is not None:
        data["landmarker"]["model"] = args.face_landmarker_model
    if getattr(args, "face_landmarker_score", None) is not None:
        data["landmarker"]["score"] = args.face_landmarker_score
    if getattr(args, "face_swapper_model", None) is not None:
        data["models"]["swapper"] = args.face_swapper_model
        swap["swapper"] = "inswapper"
    if getattr(args, "face_swapper_pixel_boost", None) is not None:
        swap["pixel_boost"] = int(args.face_swapper_pixel_boost.partition("x")[0])
    if getattr(args, "face_swapper_weight", None) is not None:
        swap["weight"] = args.face_swapper_weight
    if getattr(args, "face_enhancer_model", None) is not None:
        data["models"]["enhancer"] = args.face_enhancer_model
        enhance["enabled"] = True
    if getattr(args, "face_enhancer_blend", None) is not None:
        enhance.update(enabled=True, blend=args.face_enhancer_blend / 100)
    if getattr(args, "face_enhancer_weight", None) is not None:
        enhance["weight"] = args.face_enhancer_weight
