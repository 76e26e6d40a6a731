"""The ``fusion-ray`` command. The CLI package is the only place that prints and exits.

Top level: ``swap``, ``job``, ``live``, ``serve``, ``detect``, ``models`` and ``bench NAME`` (every
benchmark, :mod:`fusion_ray.cli.bench_group`, which also keeps the old benchmark names working).
Each subcommand lives in its own module with ``register(subparsers)`` and a ``run(args)``
that returns an exit code; library errors are mapped to one-line messages here
(:func:`fusion_ray.errors.describe_error`: a Ray worker's error is its cause, never a traceback).
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from fusion_ray import __version__
from fusion_ray.errors import FusionRayError, describe_error

INTERNAL_ERROR_EXIT = 70
INTERRUPTED_NOTE = ("outputs already written are complete (a job's are in fusion_ray_report.jsonl beside them), "
                    "and an unfinished video keeps its finished segments in <output>.fusion_ray_parts; run the "
                    "same command again to resume (finished outputs and segments are not done again)")
"""What Ctrl-C or SIGTERM leaves behind, and how to go on."""


class _VersionAction(argparse.Action):
    """``--version``: fusion-ray's version and its key libraries' (Ray, ONNX Runtime and its providers, ...)."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS, **kwargs: object) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)  # type: ignore[arg-type]

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
        from fusion_ray.versions import version_text

        print(version_text(__version__))
        parser.exit()


COMMANDS = ("job", "live", "serve", "detect")
"""The commands between ``swap`` and ``models`` (the benchmarks are ``fusion-ray bench NAME``)."""


def build_parser() -> argparse.ArgumentParser:
    from fusion_ray.cli import bench_group, models, swap

    parser = argparse.ArgumentParser(prog="fusion-ray", description="Face swapping as a batched Ray pipeline.")
    parser.add_argument("--version", action=_VersionAction, help="show the versions of fusion-ray and its key libraries")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more logging (-vv: debug, tracebacks)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    swap.register(sub)
    for module in bench_group.optional_modules(COMMANDS):
        module.register(sub)
    models.register(sub)
    bench_group.register(sub)
    return parser


def configure_logging(verbosity: int) -> None:
    level = logging.WARNING if verbosity == 0 else logging.INFO if verbosity == 1 else logging.DEBUG
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(levelname)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.WARNING)
    logging.getLogger("fusion_ray").setLevel(level)


def main(argv: Sequence[str] | None = None) -> int:
    from fusion_ray.cli.bench_group import translate

    words, notice = translate(sys.argv[1:] if argv is None else argv)
    if notice is not None:
        print(notice, file=sys.stderr)
    parser = build_parser()
    args = parser.parse_args(words)
    configure_logging(args.verbose)
    try:
        code: int = args.run(args)
        return code
    except FusionRayError as exc:
        print(f"error: {describe_error(exc)}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print(f"interrupted: {INTERRUPTED_NOTE}", file=sys.stderr)
        return 130
    except Exception as exc:  # the last line of defence: one line, no traceback unless -vv
        if args.verbose >= 2:
            raise
        if type(exc).__module__.startswith("ray."):  # a worker's error: its cause, in one line
            print(f"error: {describe_error(exc)}", file=sys.stderr)
            return 1
        print(f"internal error: {describe_error(exc)} (run with -vv for a traceback)", file=sys.stderr)
        return INTERNAL_ERROR_EXIT


if __name__ == "__main__":
    sys.exit(main())
