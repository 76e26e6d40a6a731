"""The versions of the libraries that decide what fusion_ray can do (``fusion-ray --version``, bench reports)."""

from __future__ import annotations

import platform
from importlib import metadata

KEY_DISTRIBUTIONS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("ray", ("ray",)),
    ("onnxruntime", ("onnxruntime-gpu", "onnxruntime")),
    ("av", ("av",)),
    ("opencv", ("opencv-python-headless", "opencv-python")),
    ("numpy", ("numpy",)),
)
"""Each library's name and the distributions that may provide it, in order of preference."""


def distribution_version(*names: str) -> str | None:
    """The installed version of the first of ``names`` that is installed, else None."""
    for name in names:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return None


def onnxruntime_providers() -> list[str]:
    """The execution providers this ONNX Runtime build offers ([] when it cannot be imported)."""
    try:
        import onnxruntime as ort
    except ImportError:
        return []
    return list(ort.get_available_providers())


def dependency_versions() -> dict[str, str | None]:
    """``{library: version or None}`` for :data:`KEY_DISTRIBUTIONS`."""
    return {name: distribution_version(*dists) for name, dists in KEY_DISTRIBUTIONS}


def version_text(fusion_ray_version: str) -> str:
    """What ``fusion-ray --version`` prints: one line per library, the providers beside ONNX Runtime."""
    lines = [f"fusion-ray {fusion_ray_version}", f"  python {platform.python_version()}"]
    for name, version in dependency_versions().items():
        extra = f" (providers in this build: {', '.join(onnxruntime_providers()) or 'none'})" if name == "onnxruntime" else ""
        lines.append(f"  {name} {version or 'not installed'}{extra}")
    return "\n".join(lines)
