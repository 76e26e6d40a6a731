"""What a benchmark ran on: CPU, cores, memory, GPU, library versions, load average."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from pathlib import Path
from typing import Any


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def gpus() -> list[dict[str, str]]:
    """GPUs that ``nvidia-smi`` reports (name, memory, driver); [] without a driver."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return []
    try:
        out = subprocess.run([exe, "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    found = []
    for line in out.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 3:
            found.append({"name": parts[0], "memory": parts[1], "driver": parts[2]})
    return found


def load_average() -> list[float]:
    """The 1, 5 and 15 minute load averages (how quiet the machine was)."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return []


def code_version() -> dict[str, Any]:
    """Which fusion_ray code ran: its path, git commit, and files changed since that commit.

    Benchmarks of a tree that others are editing are only reproducible at a commit; a dirty
    tree is named as such.
    """
    import fusion_ray

    package = Path(fusion_ray.__file__).resolve().parent
    info: dict[str, Any] = {"package_path": str(package), "commit": None, "dirty_files": None}
    git = shutil.which("git")
    if git is None:
        return info
    try:
        commit = subprocess.run([git, "-C", str(package), "rev-parse", "HEAD"], capture_output=True, text=True,
                                timeout=10, check=True).stdout.strip()
        status = subprocess.run([git, "-C", str(package.parent), "status", "--porcelain", "--", "fusion_ray",
                                 "configs"], capture_output=True, text=True, timeout=10, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return info
    info["commit"] = commit or None
    info["dirty_files"] = [line[3:] for line in status.splitlines() if line.strip()]
    return info


def machine_info() -> dict[str, Any]:
    """A JSON-ready description of this machine and the libraries that matter for throughput."""
    import psutil

    from fusion_ray import __version__
    from fusion_ray.models.session import cuda_device_count
    from fusion_ray.versions import dependency_versions, onnxruntime_providers

    versions = dependency_versions()

    return {
        "hostname": platform.node(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu_model": _cpu_model(),
        "logical_cores": os.cpu_count(),
        "physical_cores": psutil.cpu_count(logical=False),
        "cpu_affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "ram_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "gpus": gpus(),
        "cuda_devices": cuda_device_count(),
        "onnxruntime": versions["onnxruntime"],
        "onnxruntime_providers_available": onnxruntime_providers(),
        "ray": versions["ray"],
        "numpy": versions["numpy"],
        "opencv": versions["opencv"],
        "av": versions["av"],
        "fusion_ray": __version__,
        "load_average_at_start": load_average(),
        "code": code_version(),
    }
