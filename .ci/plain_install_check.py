"""Proves a plain install (``pip install .``, no extras) runs every command.

Run with the plain environment's Python, from the repository root, with ``../shared`` beside it:
1. imports every module of the package;
2. runs ``fusion-ray --version`` and every subcommand's ``--help`` (nested ones too);
3. runs an old benchmark name's ``--help`` (it still works, with a notice);
4. runs ``fusion-ray bench pipeline`` and ``fusion-ray bench live`` at their smallest size.
Any ModuleNotFoundError (or any failure) exits non-zero.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import subprocess
import sys
import tempfile
from pathlib import Path

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "assets"


def import_every_module() -> int:
    import fusion_ray

    count = 0
    for info in pkgutil.walk_packages(fusion_ray.__path__, "fusion_ray."):
        if info.name.endswith(".__main__"):  # runs the CLI when imported
            continue
        importlib.import_module(info.name)
        count += 1
    return count


def command_paths(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every subcommand path of ``parser``, e.g. ("models", "download")."""
    paths: list[tuple[str, ...]] = []
    for action in parser._actions:  # argparse has no public walk of its subparsers
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                paths.append((*prefix, name))
                paths.extend(command_paths(sub, (*prefix, name)))
    return paths


def run(*argv: str) -> None:
    exe = Path(sys.executable).with_name("fusion-ray")
    done = subprocess.run([str(exe), *argv], capture_output=True, text=True, timeout=600)
    if done.returncode != 0 or "ModuleNotFoundError" in done.stdout + done.stderr:
        sys.stderr.write(done.stdout + done.stderr)
        raise SystemExit(f"plain install: `fusion-ray {' '.join(argv)}` failed (exit {done.returncode})")


def main() -> None:
    print(f"plain install: imported {import_every_module()} modules")
    from fusion_ray.cli import build_parser

    run("--version")
    paths = command_paths(build_parser())
    for path in paths:
        run(*path, "--help")
    print(f"plain install: --help of {len(paths)} subcommands")
    run("live-bench", "--help")
    print("plain install: an old benchmark name still works")

    scrfd = f"scrfd_2.5g={SHARED / 'models' / 'scrfd_2.5g.onnx'}"
    faces = ("--source", str(SHARED / "images" / "biden.jpg"), "--face-image", str(SHARED / "images" / "obama.jpg"))
    with tempfile.TemporaryDirectory() as tmp:
        run("bench", "pipeline", *faces, "--standins", "light", "--frames", "4", "--size", "160x90", "--detector-size", "320",
            "--model", scrfd, "--models-dir", f"{tmp}/models", "--providers", "cpu",
            "--sweep-batches", "1", "--sweep-repeats", "1", "--work-dir", f"{tmp}/work", "--json", f"{tmp}/b.json")
        run("bench", "live", "--source", str(SHARED / "images" / "obama.jpg"), "--streams", "1", "--seconds", "1",
            "--swapper", "classic", "--model", scrfd, "--providers", "cpu", "--json", f"{tmp}/l.json")
    print("plain install: bench pipeline and bench live ran")


if __name__ == "__main__":
    main()
