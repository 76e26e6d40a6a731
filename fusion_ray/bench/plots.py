"""Charts of benchmark results for the notebooks (matplotlib, imported only when called).

Every title names the stand-in models, so that a saved chart cannot pass for the real models'.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fusion_ray.bench.report import BenchReport
from fusion_ray.bench.sweep import SweepResult
from fusion_ray.pipeline.config import FUSED_POOL


def _pyplot() -> Any:
    import matplotlib.pyplot as plt

    return plt


def _stand_in_title(report: BenchReport) -> str:
    names = report.models.stand_in_models
    if not names:
        return "real models"
    variants = sorted({m.variant or "?" for m in report.models.models.values() if m.stand_in})
    return f"STAND-INS ({'/'.join(variants)}): {', '.join(names)}"


def before_after(result: Any) -> Any:
    """Source, target and swapped target side by side (a QuickstartResult)."""
    plt = _pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(13, 4.8))
    for ax, image, title in zip(axes, (result.source, result.before, result.after),
                                ("source face", "target (before)", f"after: {result.faces_swapped} face(s) swapped"),
                                strict=True):
        ax.imshow(np.ascontiguousarray(image[..., ::-1]))
        ax.set_title(title)
        ax.axis("off")
    fig.suptitle(result.label, fontsize=10)
    fig.tight_layout()
    return fig


def sweep_chart(report: BenchReport) -> Any:
    """Per-face latency and throughput against batch size, one line per model."""
    sweep: SweepResult | None = report.sweep
    if sweep is None:
        raise ValueError("the report has no sweep")
    plt = _pyplot()
    fig, (lat, thr) = plt.subplots(1, 2, figsize=(12, 4.5))
    for model in sweep.models.values():
        batches = [p.batch for p in model.points]
        label = f"{model.name} ({'stand-in ' + str(model.variant) if model.stand_in else 'real'})"
        lat.plot(batches, [p.per_face_ms for p in model.points], marker="o", label=label)
        thr.plot(batches, [p.faces_per_s for p in model.points], marker="o", label=label)
    for ax, ylabel in ((lat, "ms per face (median call / batch)"), (thr, "faces per second")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("batch size")
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    providers = ", ".join(report.providers_used) or "?"
    fig.suptitle(f"Batch-size sweep on {providers}; {_stand_in_title(report)}", fontsize=9)
    fig.tight_layout()
    return fig


def stage_breakdown_chart(report: BenchReport) -> Any:
    """Stacked ms per frame by step: each serial loop, and the pipeline's stages (busy time)."""
    plt = _pyplot()
    runs: list[tuple[str, dict[str, float]]] = [(f"serial\n{c} canvas", dict(s.stage_ms))
                                                for c, s in report.serial.items()]
    if report.pipeline is not None:
        runs.append(("pipeline\n(busy, all actors)",  # a fused pool's own row would count its stages twice
                     {name: st["ms_per_frame"] for name, st in report.pipeline.stages.items() if name != FUSED_POOL}))
    if not runs:
        raise ValueError("the report has no serial or pipeline run")
    steps: list[str] = []
    for _, stages in runs:
        steps += [s for s in stages if s not in steps]
    fig, ax = plt.subplots(figsize=(8, 4.5))
    bottom = np.zeros(len(runs))
    for step in steps:
        values = np.array([stages.get(step, 0.0) for _, stages in runs])
        ax.bar([name for name, _ in runs], values, bottom=bottom, label=step)
        bottom += values
    ax.set_ylabel("ms per frame")
    ax.legend(fontsize=8, ncol=2)
    ax.set_title(f"Per-stage time; {_stand_in_title(report)}", fontsize=9)
    fig.tight_layout()
    return fig


def serial_vs_pipeline_chart(report: BenchReport) -> Any:
    """Frames per second, end to end (the pipeline's Ray start-up included when it was started)."""
    plt = _pyplot()
    names, fps = [], []
    for canvas, s in report.serial.items():
        names.append(f"serial ({canvas})")
        fps.append(s.fps)
    if report.pipeline is not None:
        p = report.pipeline
        names.append("pipeline" + (f"\n(+{p.ray_startup_s:.1f} s Ray start-up)" if p.ray_started_here else ""))
        fps.append(p.fps)
    fig, ax = plt.subplots(figsize=(7, 4))
    bars = ax.bar(names, fps, color=["tab:gray"] * len(report.serial) + ["tab:blue"] * (len(names) - len(report.serial)))
    ax.bar_label(bars, fmt="%.1f")
    ax.set_ylabel("frames per second (end to end)")
    ax.set_title(f"Serial loop vs Ray Data pipeline; {_stand_in_title(report)}", fontsize=9)
    fig.tight_layout()
    return fig
