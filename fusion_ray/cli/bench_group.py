"""``fusion-ray bench NAME``: every benchmark under one command, and their old top-level names.

The benchmarks were top-level commands (``bench``, ``bench-scale``, ``live-bench``,
``serve-load``, ...). The old names keep working for a release: :func:`translate` spells them
the new way and says so in a one-line notice on stderr.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Mapping, Sequence
from types import ModuleType

BENCH_MODULES = ("bench", "bench_jobs", "bench_scale", "bench_runners", "bench_quality", "bench_precision",
                 "bench_webrtc", "bench_serve_burst")
"""The modules whose ``register`` adds benchmarks (their names under ``fusion-ray bench``)."""
HOST_MODULES = ("live", "serve")
"""Command modules that also add a benchmark of their own through ``register_bench``."""

OLD_NAMES: Mapping[str, str] = {
    "bench-images": "images",
    "bench-scale": "scale",
    "bench-resume": "resume",
    "bench-storage": "storage",
    "bench-videos": "videos",
    "bench-runners": "runners",
    "bench-pixel-boost": "pixel-boost",
    "bench-masks": "masks",
    "bench-mask-pictures": "mask-pictures",
    "bench-mask-chain": "mask-chain",
    "bench-precision": "precision",
    "bench-webrtc": "webrtc",
    "bench-serve-burst": "serve-burst",
    "live-bench": "live",
    "serve-load": "serve",
}
"""Each old top-level benchmark command -> its name under ``fusion-ray bench``."""
OLD_BENCH = "pipeline"
"""What the old ``fusion-ray bench [OPTIONS]`` (serial loop vs pipeline, batch sweep) is now."""
_HELP = ("-h", "--help")


def optional_modules(names: Sequence[str]) -> list[ModuleType]:
    """The ``fusion_ray.cli`` modules of ``names`` that are present (a layer may be left out)."""
    found = []
    for name in names:
        try:
            found.append(importlib.import_module(f"fusion_ray.cli.{name}"))
        except ModuleNotFoundError as exc:
            if exc.name != f"fusion_ray.cli.{name}":
                raise
    return found


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = sub.add_parser("bench", help="benchmarks: fusion-ray bench NAME (see BENCHMARKS.md)",
                            description="Benchmarks, one per NAME; `fusion-ray bench NAME --help` says what each "
                            "measures and takes. Measured results are in BENCHMARKS.md.")
    names = parser.add_subparsers(dest="bench_name", required=True, metavar="NAME")
    for module in optional_modules(BENCH_MODULES):
        module.register(names)
    for module in optional_modules(HOST_MODULES):
        module.register_bench(names)


def translate(argv: Sequence[str]) -> tuple[list[str], str | None]:
    """``argv`` with an old benchmark command spelled the new way, and the notice to print (None
    when ``argv`` has no old name). The command is the first word that is not an option (the
    top-level options take no value)."""
    words = list(argv)
    at = next((i for i, word in enumerate(words) if not word.startswith("-")), None)
    if at is None:
        return words, None
    old = words[at]
    if old in OLD_NAMES:
        new = ["bench", OLD_NAMES[old]]
    elif old == "bench" and (at + 1 == len(words)
                             or (words[at + 1].startswith("-") and words[at + 1] not in _HELP)):
        new = ["bench", OLD_BENCH]  # bare `bench` and `bench --options` ran the pipeline benchmark
    else:
        return words, None
    notice = (f"note: `fusion-ray {old}` is now `fusion-ray {' '.join(new)}`; "
              "the old spelling will be removed in a later release")
    return [*words[:at], *new, *words[at + 1:]], notice
