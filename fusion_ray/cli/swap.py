"""``fusion-ray swap``: faces from --source images into a --target image (in-process) or video (Ray)."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from fusion_ray.cli.common import add_engine_arguments, engine_config_from_args
from fusion_ray.cli.video import add_pipeline_arguments, run_video_swap
from fusion_ray.config import EngineConfig
from fusion_ray.errors import InputError, OutputExistsError
from fusion_ray.fsutil import check_input_file, check_not_an_input, check_writable_dir

if TYPE_CHECKING:
    from fusion_ray.image import ImageSwapInputs

log = logging.getLogger(__name__)


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = sub.add_parser("swap", help="swap faces in an image or a video",
                            description="Swap the face(s) of --source into --target.")
    parser.add_argument("--source", "-s", type=Path, action="append", required=True,
                        help="source face image (repeat to average several images into one identity)")
    parser.add_argument("--target", "-t", type=Path, required=True, help="target image or video")
    parser.add_argument("--output", "-o", type=Path, required=True, help="output file")
    parser.add_argument("--force", action="store_true", help="overwrite an existing output")
    add_engine_arguments(parser)
    add_pipeline_arguments(parser)
    parser.set_defaults(run=run)


def _is_video(path: Path) -> bool:
    from fusion_ray.video import is_video_file

    return bool(is_video_file(path))


def _inputs(args: argparse.Namespace, cfg: EngineConfig) -> list[tuple[str, Path]]:
    """Every input file with the argument that names it."""
    inputs = [("--target", args.target), *(("--source", s) for s in args.source)]
    if cfg.selection.reference_path is not None:
        inputs.append(("--reference", cfg.selection.reference_path))
    return inputs


def check_video_swap(args: argparse.Namespace) -> None:
    """The video output, refused on the driver before any work: its suffix, an existing file
    (without --force), a folder that cannot be written. The video itself (a probe, a size the
    encoder refuses, truncation, a variable frame rate) and the models are the job planner's."""
    from fusion_ray.video.encode import check_video_output

    check_video_output(args.output)
    if args.output.exists() and not args.force:
        raise OutputExistsError(f"output exists: {args.output} (use --force to overwrite)")
    check_writable_dir(args.output.parent)


def _check_images(paths: list[Path]) -> None:
    """Each image's header (missing, not an image, too many pixels) before the engine loads."""
    from fusion_ray.imageio import check_image_file

    for path in paths:
        check_image_file(path)


def _read_inputs(args: argparse.Namespace, cfg: EngineConfig) -> ImageSwapInputs:
    """The image swap's inputs, each read and checked once: the target first (not a video with
    a picture stream, e.g. an audio-only .m4a, must be an image), then the sources and reference."""
    from fusion_ray.image import CheckedImage, ImageSwapInputs, reference_file
    from fusion_ray.imageheader import ImageTooLargeError

    try:
        target = CheckedImage.read(args.target)
    except ImageTooLargeError:
        raise
    except InputError as exc:
        raise InputError(f"--target {exc}; nor is it a video with a picture stream") from exc
    return ImageSwapInputs.read(args.source, target, reference_file(cfg))


def run(args: argparse.Namespace) -> int:
    cfg = engine_config_from_args(args)
    check_input_file(args.target, "--target")  # a folder, a pipe, a link loop or an empty file, named
    inputs = _inputs(args, cfg)
    check_not_an_input(args.output, inputs)
    if _is_video(args.target):
        check_video_swap(args)
        _check_images([path for name, path in inputs if name != "--target"])
        return run_video_swap(args, cfg)
    from fusion_ray.animation import check_animated_output
    from fusion_ray.image import swap_checked_images
    from fusion_ray.imageio import check_writable_image_path
    from fusion_ray.runners.inline import Engine

    images = _read_inputs(args, cfg)  # what the target is, before what the output can hold
    check_writable_image_path(args.output, args.force)
    check_animated_output(images.target.header, args.output.suffix, str(args.target))  # before the models
    engine = Engine.load(cfg, cpu_budget=float(os.cpu_count() or 1))
    result = swap_checked_images(engine, images, args.output, force=args.force)
    timings = ", ".join(f"{k} {v:.1f}" for k, v in result.timings_ms.items())
    frames = f" in {result.frames} frames" if result.frames > 1 else ""
    print(f"wrote {result.output}: {result.faces_swapped} of {result.faces_detected} face(s) swapped{frames}; "
          f"timings (ms): {timings}", file=sys.stderr)
    if result.stand_in_models:
        print(f"note: made with STAND-IN models ({', '.join(result.stand_in_models)}): not a real swap",
              file=sys.stderr)
    return 0
