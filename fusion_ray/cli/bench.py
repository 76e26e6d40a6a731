"""``fusion-ray bench pipeline``: serial loop vs Ray Data pipeline, and the batch-size sweep."""

from __future__ import annotations

import argparse
import shlex
import shutil
import sys
import tempfile
from fractions import Fraction
from pathlib import Path

from fusion_ray.cli.common import add_engine_arguments, engine_config_from_args
from fusion_ray.errors import ConfigError


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = sub.add_parser(
        "pipeline", help="throughput experiments: serial loop vs pipeline, batch-size sweep",
        description="Run, in one process and on the same frames and model files: the serial loop (one frame "
                    "at a time, every model at batch 1, as FaceFusion runs) on a square and a fitted detector "
                    "canvas; the Ray Data pipeline (Ray start-up included); and a batch-size sweep of the "
                    "batched models. Models absent from the models directory are replaced by labelled "
                    "STAND-INS, and the report says so.")
    _add_input_arguments(parser)
    _add_run_arguments(parser)
    _add_sweep_arguments(parser)
    _add_output_arguments(parser)
    add_engine_arguments(parser)
    _add_ray_arguments(parser)
    parser.set_defaults(run=run)


def _add_input_arguments(parser: argparse.ArgumentParser) -> None:
    media = parser.add_argument_group("input")
    media.add_argument("--video", type=Path, help="benchmark this video (default: generate one)")
    media.add_argument("--frames", type=int, default=300, help="frames of the generated video (default 300)")
    media.add_argument("--size", default="640x360", help="size of the generated video, WxH (default 640x360)")
    media.add_argument("--fps", default="30000/1001", help="frame rate of the generated video (default 30000/1001)")
    media.add_argument("--face-image", type=Path,
                       help="face photo moved across the generated video (default: shared assets obama.jpg)")
    media.add_argument("--source", "-s", type=Path, action="append", default=[],
                       help="source face image (default: shared assets biden.jpg)")


def _add_run_arguments(parser: argparse.ArgumentParser) -> None:
    what = parser.add_argument_group("what to run")
    what.add_argument("--parts", default="serial,pipeline,sweep",
                      help="comma-separated parts: serial, pipeline, sweep (default: all)")
    what.add_argument("--pipeline-only", action="store_const", const="pipeline", dest="only",
                      help="only the pipeline (e.g. with --frames 3000 for the memory check)")
    what.add_argument("--serial-only", action="store_const", const="serial", dest="only", help="only the serial loop")
    what.add_argument("--sweep-only", action="store_const", const="sweep", dest="only", help="only the batch sweep")
    what.add_argument("--no-sweep", action="store_true", help="skip the batch-size sweep")
    what.add_argument("--standins", choices=["light", "cost_faithful"], default="cost_faithful",
                      help="stand-ins generated for ABSENT models (default cost_faithful: the real models' compute; "
                           "light: quick runs)")
    what.add_argument("--loop-canvas", choices=["square", "fit", "both"], default="both",
                      help="detector canvas of the serial loop: square (FaceFusion's 640x640), fit (640x384 for "
                           "640x360), or both (default)")
    what.add_argument("--loop-threads", type=int, help="ORT/OpenCV threads of the serial loop (default: all cores)")
    what.add_argument("--no-batch-dynamic", dest="batch_dynamic", action="store_false",
                      help="use fixed-batch swapper/enhancer exports as they are (default: make batch-dynamic copies)")


def _add_sweep_arguments(parser: argparse.ArgumentParser) -> None:
    sweep = parser.add_argument_group("batch-size sweep")
    sweep.add_argument("--sweep-batches", default="1,2,4,8,16,32", help="batch sizes (default 1,2,4,8,16,32)")
    sweep.add_argument("--sweep-repeats", type=int, default=3, help="timed calls per batch size (default 3)")
    sweep.add_argument("--sweep-warmup", type=int, default=1, help="discarded calls per batch size (default 1)")
    sweep.add_argument("--sweep-cap", action="append", default=[], metavar="NAME=N",
                       help="largest batch for model NAME, e.g. inswapper_128=8 (repeatable)")
    sweep.add_argument("--sweep-models", default="embedder,swapper,enhancer",
                       help="which batched models to sweep: embedder, swapper, enhancer (default: all three)")
    sweep.add_argument("--sweep-threads", type=int, help="ORT threads in the sweep (default: all cores)")


def _add_output_arguments(parser: argparse.ArgumentParser) -> None:
    out = parser.add_argument_group("output")
    out.add_argument("--json", type=Path, help="write the results as JSON here")
    out.add_argument("--markdown", type=Path, help="write the Markdown tables here (they are also printed)")
    out.add_argument("--work-dir", type=Path,
                     help="keep generated videos and models here (default: a temporary directory, removed)")
    out.add_argument("--memory-pss", action="store_true",
                     help="also sample PSS (shared pages counted once; costs ~12 ms per process per sample, "
                          "so it slows the runs: for memory checks)")
    out.add_argument("--memory-interval", type=float, default=0.5, help="memory sampling period, s (default 0.5)")


def _add_ray_arguments(parser: argparse.ArgumentParser) -> None:
    ray = parser.add_argument_group("pipeline (Ray)")
    ray.add_argument("--address", help="Ray cluster to join (default: start a local Ray inside the timed region)")
    ray.add_argument("--ray-num-cpus", type=int, help="CPUs of the local Ray instance (default: all)")
    ray.add_argument("--pipeline-config", type=Path, help="pipeline YAML (default: configs/pipeline.yaml defaults)")
    ray.add_argument("--progress-bars", action="store_true", help="show Ray Data's progress bars")


def _size(text: str) -> tuple[int, int]:
    width, sep, height = text.lower().partition("x")
    try:
        size = (int(width), int(height))
    except ValueError:
        size = (0, 0)
    if not sep or size[0] <= 0 or size[1] <= 0 or size[0] % 2 or size[1] % 2:
        raise ConfigError(f"--size expects even WxH such as 640x360, got {text!r}")
    return size


def _ints(text: str, option: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        values = ()
    if not values or min(values) < 1:
        raise ConfigError(f"{option} expects positive integers separated by commas, got {text!r}")
    return values


def _caps(items: list[str]) -> dict[str, int]:
    caps: dict[str, int] = {}
    for item in items:
        name, sep, size = item.partition("=")
        if not sep or not size.strip().isdigit():
            raise ConfigError(f"--sweep-cap expects NAME=N, got {item!r}")
        caps[name.strip()] = int(size)
    return caps


def options_from_args(args: argparse.Namespace, work_dir: Path):  # type: ignore[no-untyped-def]
    """The BenchOptions the command line asks for."""
    from fusion_ray.bench import PARTS, BenchOptions
    from fusion_ray.bench.serial import Canvas
    from fusion_ray.bench.sweep import SWEEP_ROLES
    from fusion_ray.jobs.config import load_job_config

    if args.only:
        parts: tuple[str, ...] = (args.only,)
    else:
        parts = tuple(p.strip() for p in args.parts.split(",") if p.strip())
        if args.no_sweep:
            parts = tuple(p for p in parts if p != "sweep")
    bad = [p for p in parts if p not in PARTS]
    if bad or not parts:
        raise ConfigError(f"--parts: choose from {', '.join(PARTS)}, got {args.parts!r}")
    if args.frames < 1:
        raise ConfigError(f"--frames must be positive, got {args.frames}")
    try:
        fps = Fraction(args.fps)
    except (ValueError, ZeroDivisionError) as exc:
        raise ConfigError(f"--fps expects a number or a fraction like 30000/1001, got {args.fps!r}") from exc
    pipeline = load_job_config(args.pipeline_config).pipeline
    pipeline = pipeline.model_copy(update={"progress_bars": bool(args.progress_bars)})
    roles = tuple(r.strip() for r in args.sweep_models.split(",") if r.strip())
    if not roles or any(r not in SWEEP_ROLES for r in roles):
        raise ConfigError(f"--sweep-models: choose from {', '.join(SWEEP_ROLES)}, got {args.sweep_models!r}")
    canvases: tuple[Canvas, ...] = ("square", "fit") if args.loop_canvas == "both" else (args.loop_canvas,)
    return BenchOptions(
        engine=engine_config_from_args(args), pipeline=pipeline, work_dir=work_dir, standins=args.standins,
        parts=parts, video=args.video, frames=args.frames, size_wh=_size(args.size), fps=fps,
        face_image=args.face_image, sources=tuple(args.source), loop_canvases=canvases,
        loop_cpu_budget=args.loop_threads, address=args.address, ray_num_cpus=args.ray_num_cpus,
        batch_dynamic=args.batch_dynamic, sweep_batches=_ints(args.sweep_batches, "--sweep-batches"),
        sweep_repeats=args.sweep_repeats, sweep_warmup=args.sweep_warmup, sweep_caps=_caps(args.sweep_cap),
        sweep_threads=args.sweep_threads, sweep_roles=roles, memory_interval_s=args.memory_interval,
        memory_pss=args.memory_pss,
        command=_command_line(args))


def _command_line(args: argparse.Namespace) -> str:
    """The command as typed (from sys.argv), or the parsed options when called in-process."""
    argv = sys.argv[1:]
    if "bench" in argv:
        return "fusion-ray " + shlex.join(argv)
    skip = {"run", "command", "verbose"}
    given = {k: v for k, v in sorted(vars(args).items()) if k not in skip and v not in (None, [], False)}
    return "fusion-ray bench pipeline (in-process; options " + ", ".join(f"{k}={v}" for k, v in given.items()) + ")"


def run(args: argparse.Namespace) -> int:
    from fusion_ray.bench import run_bench

    temporary = args.work_dir is None
    work_dir = Path(tempfile.mkdtemp(prefix="fusion_ray_bench_")) if temporary else args.work_dir
    try:
        options = options_from_args(args, work_dir)
        report = run_bench(options, progress=lambda message: print(f"bench: {message}", file=sys.stderr))
    finally:
        if temporary:
            shutil.rmtree(work_dir, ignore_errors=True)
    if args.json is not None:
        report.write_json(args.json)
        print(f"bench: wrote {args.json}", file=sys.stderr)
    if args.markdown is not None:
        report.write_markdown(args.markdown)
        print(f"bench: wrote {args.markdown}", file=sys.stderr)
    print(report.to_markdown())
    return 0
