"""Options shared by the commands that run the engine, and their mapping to EngineConfig."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fusion_ray.cli.quality_options import add_quality_arguments, apply_quality_arguments
from fusion_ray.config import EngineConfig, load_yaml_config, parse_config
from fusion_ray.core.facefusion_options import check_options_used
from fusion_ray.errors import ConfigError
from fusion_ray.types import SELECT_MODES


def add_engine_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("engine")
    group.add_argument("--config", type=Path, help="YAML file with an 'engine' section (command-line options win)")
    group.add_argument("--swapper", choices=["inswapper", "classic"], help="face swapper (default: inswapper; alias of --face-swapper-model, plus classic)")
    group.add_argument("--select", dest="selection", choices=SELECT_MODES,
                       help="which target faces to swap (default: all)")
    group.add_argument("--face-index", type=int, help="face index in reading order for --select index")
    group.add_argument("--reference", type=Path, help="image of the face to swap, for --select reference")
    group.add_argument("--enhance", nargs="?", type=float, const=0.8, metavar="BLEND",
                       help="enhance swapped faces (--face-enhancer-model, default gfpgan_1.4); BLEND is the enhanced share (default 0.8; alias of "
                       "--face-enhancer-blend in percent)")
    group.add_argument("--poisson", action="store_true", help="classic swapper: Poisson blending")
    group.add_argument("--models-dir", type=Path, help="model directory (default: $FUSION_RAY_MODELS or the user cache)")
    group.add_argument("--model", action="append", default=[], metavar="NAME=PATH",
                       help="use this file for model NAME, e.g. scrfd_2.5g=/x/scrfd_2.5g.onnx (repeatable)")
    group.add_argument("--providers", help="comma-separated execution providers: tensorrt,cuda,cpu (default: auto)")
    group.add_argument("--precision", metavar="COMPONENT=P[,...]",
                       help="precision per component, P in auto|fp32|fp16|int8, e.g. detector=int8,swapper=fp16 "
                       "(default auto: int8 detector on CPU, fp16 on CUDA/TensorRT where possible, else fp32)")
    group.add_argument("--detector-size", type=int, help="detector input size, a multiple of 32 (default 640)")
    group.add_argument("--no-tracking", dest="tracking", action="store_false", default=None,
                       help="videos: detect faces on every frame instead of tracking them (images never track)")
    add_quality_arguments(parser)


def parse_model_paths(items: list[str]) -> dict[str, Path]:
    paths: dict[str, Path] = {}
    for item in items:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise ConfigError(f"--model expects NAME=PATH, got {item!r}")
        paths[name.strip()] = Path(path.strip())
    return paths


def parse_precision(text: str) -> dict[str, str]:
    """``detector=int8,swapper=fp16`` as a mapping (the values are checked by the config)."""
    result: dict[str, str] = {}
    for item in text.split(","):
        if not item.strip():
            continue
        name, sep, value = item.partition("=")
        if not sep or not name.strip() or not value.strip():
            raise ConfigError(f"--precision expects COMPONENT=PRECISION[,...], got {item!r}")
        result[name.strip().lower()] = value.strip().lower()
    return result


def calibration_inputs(args: argparse.Namespace) -> list[Path]:
    """The command's own input images or video (``--target``, ``--source``, ``INPUT``): what
    ``--precision detector=int8`` calibrates on, in memory, when no calibration photos are set."""
    found: list[Path] = []
    for attr in ("target", "source", "input"):
        value = getattr(args, attr, None)
        found.extend(value if isinstance(value, list) else [value] if isinstance(value, Path) else [])
    return found


def engine_config_from_args(args: argparse.Namespace) -> EngineConfig:
    """The YAML engine section (if any) overlaid with the command-line options that were given."""
    base = load_yaml_config(args.config, EngineConfig, section="engine") if args.config else EngineConfig()
    data: dict[str, Any] = base.model_dump()
    if args.swapper:
        data["swap"]["swapper"] = args.swapper
    if args.poisson:
        data["swap"]["poisson"] = True
    if args.selection:
        data["selection"]["mode"] = args.selection
    if args.face_index is not None:
        data["selection"]["index"] = args.face_index
    if args.reference is not None:
        data["selection"]["reference_path"] = args.reference
        if not args.selection:
            data["selection"]["mode"] = "reference"
    if args.enhance is not None:
        data["enhance"] = {"enabled": True, "blend": args.enhance}
    if args.models_dir:
        data["models"]["models_dir"] = args.models_dir
    if args.model:
        data["models"]["paths"] = {**data["models"]["paths"], **parse_model_paths(args.model)}
    if args.providers:
        data["runtime"]["providers"] = [p.strip().lower() for p in args.providers.split(",") if p.strip()]
    if getattr(args, "precision", None):
        data["models"]["precision"] = {**data["models"]["precision"], **parse_precision(args.precision)}
    if not data["models"]["calibration_seed"]:
        data["models"]["calibration_seed"] = calibration_inputs(args)
    if args.detector_size is not None:  # 0 too: refused by the config, never the default
        data["detector"]["size"] = args.detector_size
    if getattr(args, "tracking", None) is False:
        data["tracking"]["enabled"] = False
    if args.swapper == "classic" and getattr(args, "face_swapper_model", None):
        raise ConfigError(f"--swapper classic and --face-swapper-model {args.face_swapper_model}: choose one")
    given = apply_quality_arguments(args, data)
    cfg = parse_config(data, EngineConfig, source="options")
    check_options_used(given, cfg, enhanced=cfg.enhance.enabled)  # the service's rule: never accepted and ignored
    return cfg


def check_stream_output(output: Path | None, inputs: Sequence[tuple[str, Path]]) -> None:
    """``live --output``, refused before any work as ``swap`` refuses a video output: a suffix
    other than .mp4, .m4v or .mov (OpenCV's writer failed on ``x.txt`` after the stream), the
    same file as an input (``--input same.mp4 --output same.mp4`` overwrote its input), a
    folder that is missing or takes no new file (nothing was written, and success was printed).
    An existing output is overwritten, as ``live`` always did (it has no --force)."""
    from fusion_ray.fsutil import check_not_an_input, check_writable_dir
    from fusion_ray.video.join import check_video_output

    if output is None:
        return
    check_video_output(output)
    check_not_an_input(output, inputs)
    check_writable_dir(output.parent)


def connect_ray(address: str | None) -> None:
    """Join ``address``, or start a local Ray watched by :mod:`fusion_ray.cli.reaper` (a
    ``kill -9`` of this command must not leave the local Ray's processes behind)."""
    from fusion_ray.cli import reaper
    from fusion_ray.runners.ray.runtime import connect

    if address is None:
        reaper.start()
    connect(address)
