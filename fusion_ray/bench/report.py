"""The benchmark's result: one JSON document and the same facts as Markdown tables.

Every report names the models it ran and says which are STAND-INS (and of which variant), so
that no stand-in timing can be read as the real model's.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fusion_ray.bench.models import BenchModels
from fusion_ray.bench.pipeline import PipelineResult
from fusion_ray.bench.serial import SerialResult
from fusion_ray.bench.sweep import SweepResult
from fusion_ray.jobs.config import FUSED_POOL

SCHEMA_VERSION = 1


@dataclass
class VideoSpec:
    path: str
    frames: int
    width: int
    height: int
    fps: str
    generated_from: str | None
    """The face photo of a generated video; None for a video given with ``--video``."""
    sources: list[str]

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class BenchReport:
    """Everything one ``fusion-ray bench pipeline`` run measured."""

    command: str
    created: str
    machine: dict[str, Any]
    models: BenchModels
    video: VideoSpec | None = None
    serial: dict[str, SerialResult] = field(default_factory=dict)
    pipeline: PipelineResult | None = None
    sweep: SweepResult | None = None
    notes: list[str] = field(default_factory=list)
    load_average_at_end: list[float] = field(default_factory=list)

    # ------------------------------------------------------------------ derived
    @property
    def providers_used(self) -> list[str]:
        found: list[str] = []
        for serial in self.serial.values():
            found += [p for p in serial.providers if p not in found]
        if self.sweep is not None:
            for model in self.sweep.models.values():
                found += [p for p in model.providers if p not in found]
        return found

    def ratios(self) -> dict[str, float]:
        """Pipeline frames/s over each serial loop's frames/s (same frames, wall times end to end)."""
        if self.pipeline is None or self.pipeline.wall_s <= 0:
            return {}
        return {f"pipeline_vs_serial_{canvas}": round(serial.wall_s / self.pipeline.wall_s, 3)
                for canvas, serial in self.serial.items() if serial.frames == self.pipeline.frames}

    # -------------------------------------------------------------------- JSON
    def to_json(self) -> dict[str, Any]:
        return {
            "schema": f"fusion_ray.bench/{SCHEMA_VERSION}",
            "command": self.command,
            "created": self.created,
            "machine": {**self.machine, "load_average_at_end": self.load_average_at_end,
                        "providers_used": self.providers_used},
            "stand_in_models": self.models.stand_in_models,
            "stand_in_variant": self.models.standins_variant,
            "stand_in_note": self.models.stand_in_summary(),
            "models": self.models.to_json(),
            "video": self.video.to_json() if self.video else None,
            "serial": {canvas: result.to_json() for canvas, result in self.serial.items()},
            "pipeline": self.pipeline.to_json() if self.pipeline else None,
            "ratios": self.ratios(),
            "sweep": self.sweep.to_json() if self.sweep else None,
            "notes": self.notes,
        }

    def write_json(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.part")
        tmp.write_text(json.dumps(self.to_json(), indent=2) + "\n")
        tmp.replace(path)

    def write_markdown(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.part")
        tmp.write_text(self.to_markdown())
        tmp.replace(path)

    # ---------------------------------------------------------------- Markdown
    def to_markdown(self) -> str:
        out: list[str] = ["# fusion-ray bench pipeline", ""]
        out += [f"Command: `{self.command}`", "", f"Run: {self.created}", ""]
        out += [f"**Models: {self.models.stand_in_summary()}.**", ""]
        out += _machine_lines(self.machine, self.providers_used, self.load_average_at_end)
        if self.video is not None:
            v = self.video
            origin = f"generated from {v.generated_from}" if v.generated_from else "given"
            out += [f"Video: `{v.path}` ({origin}), {v.width}x{v.height}, {v.frames} frames at {v.fps} fps; "
                    f"source face: {', '.join(f'`{s}`' for s in v.sources)}", ""]
        out += ["## Models", "", "| role | model | kind | file | batch-dynamic copy of |", "|---|---|---|---|---|"]
        for m in self.models.models.values():
            out.append(f"| {m.role} | {m.name} | {m.label()} | `{m.path}` | "
                       f"{'`' + m.batch_dynamic_copy_of + '`' if m.batch_dynamic_copy_of else '-'} |")
        out.append("")
        if self.serial or self.pipeline:
            out += self._throughput_lines()
        if self.sweep is not None:
            out += _sweep_lines(self.sweep)
        if self.notes:
            out += ["## Notes", "", *[f"- {n}" for n in self.notes], ""]
        return "\n".join(out)

    def _throughput_lines(self) -> list[str]:
        out = ["## Serial loop vs Ray Data pipeline", "",
               "| run | detector canvas | frames | wall s | frames/s | first frame out, s | steady frames/s "
               "| faces swapped | peak MiB: RSS sum / PSS sum / system added |",
               "|---|---|---|---|---|---|---|---|---|"]
        for canvas, s in self.serial.items():
            h, w = s.detector_canvas_hw
            out.append(f"| serial loop ({canvas}), batch 1, {s.intra_op_threads} ORT threads | {w}x{h} | {s.frames} | "
                       f"{s.wall_s:.2f} | {s.fps:.2f} | {s.first_output_s:.2f} | {s.loop_fps:.2f} | {s.faces_swapped} | "
                       f"{_mib(s.memory)} |")
        p = self.pipeline
        if p is not None:
            startup = (f"Ray start-up {p.ray_startup_s:.2f} s included" if p.ray_started_here
                       else "Ray was already running: no start-up in this time")
            tracking = ("tracking on: {det_full} full-frame / {det_roi} ROI detections, {faces_interpolated} "
                        "interpolated faces".format(**p.tracking_counters) if p.tracking and p.tracking_counters
                        else "tracking off: full detection on every frame")
            out.append(f"| Ray Data pipeline ({startup}; {tracking}) | {p.detector_canvas} | {p.frames} | {p.wall_s:.2f} | "
                       f"{p.fps:.2f} | {p.first_output_s:.2f} | {p.steady_fps:.2f} | {p.faces_swapped} | "
                       f"{_mib(p.memory)} |")
        out += ["", "frames/s: frames / wall time, end to end (models loaded, Ray started, output joined with "
                "its audio). Steady frames/s: the serial loop's frames over its frame loop; the pipeline's frames "
                "between its first and last output batch. The ratios below use the end-to-end wall times.", ""]
        for key, value in self.ratios().items():
            canvas = key.rsplit("_", 1)[-1]
            out.append(f"- pipeline / serial loop ({canvas} canvas): **{value:.2f}x** (end-to-end wall time, same frames)")
        if self.ratios():
            out.append("")
        if self.serial:
            stages = [st for st in _ordered_stages(self.serial)]
            out += ["### Serial loop: ms per frame", "",
                    "| step | " + " | ".join(f"{c} canvas" for c in self.serial) + " |",
                    "|---|" + "---|" * len(self.serial)]
            for stage in stages:
                out.append(f"| {stage} | " + " | ".join(
                    f"{s.stage_ms[stage]:.1f}" if stage in s.stage_ms else "-" for s in self.serial.values()) + " |")
            out.append("| setup (load models, embed source), s | " + " | ".join(
                f"{s.setup_s:.2f}" for s in self.serial.values()) + " |")
            out.append("")
        if p is not None and p.stages:
            out += ["### Pipeline: per-stage time and idle ratio", "",
                    "| stage | busy s (all actors) | ms per frame | idle s | idle ratio |", "|---|---|---|---|---|"]
            for name, st in p.stages.items():
                out.append(f"| {name} | {st['busy_s']:.2f} | {st['ms_per_frame']:.1f} | {st['idle_s']:.2f} | "
                           f"{st['idle_ratio']:.2f} |")
            out += ["", "Idle ratio = time the stage's actors waited for input / (waiting + working). With the "
                    f"stages fused in one CPU pool (no GPU), the pool reports as the row `{FUSED_POOL}` and its "
                    "stages show no waiting.", ""]
        return out


def _mib(memory: Any) -> str:
    if memory is None:
        return "-"
    pss = f"{memory.peak_pss_mib:.0f}" if memory.peak_pss_mib is not None else "-"
    return f"{memory.peak_rss_mib:.0f} / {pss} / {memory.system_added_peak_mib:.0f}"


def _ordered_stages(serial: dict[str, SerialResult]) -> list[str]:
    from fusion_ray.bench.serial import SERIAL_STAGES

    present = {stage for s in serial.values() for stage in s.stage_ms}
    return [stage for stage in SERIAL_STAGES if stage in present]


def _machine_lines(machine: dict[str, Any], providers: list[str], load_end: list[float]) -> list[str]:
    gpus = ", ".join(g["name"] for g in machine.get("gpus", [])) or "none"
    lines = [
        f"Machine: {machine.get('cpu_model')}, {machine.get('logical_cores')} logical cores "
        f"({machine.get('physical_cores')} physical), {machine.get('ram_gib')} GiB RAM, GPU: {gpus}; "
        f"onnxruntime {machine.get('onnxruntime')} (providers used: {', '.join(providers) or 'n/a'}; "
        f"available: {', '.join(machine.get('onnxruntime_providers_available', []))}), "
        f"Ray {machine.get('ray')}, Python {machine.get('python')}.",
        "",
        f"Load average (1/5/15 min) at start: {machine.get('load_average_at_start')}, at end: {load_end}.",
        "",
    ]
    code = machine.get("code") or {}
    if code.get("commit"):
        dirty = code.get("dirty_files") or []
        state = f"with uncommitted changes in {', '.join(dirty)}" if dirty else "clean"
        lines += [f"Code: fusion_ray at commit `{code['commit'][:12]}` ({state}), `{code.get('package_path')}`.", ""]
    return lines


def _sweep_lines(sweep: SweepResult) -> list[str]:
    out = ["## Batch-size sweep", "",
           f"Wrapper calls (pre-processing + session.run + post-processing) on random crops, "
           f"{sweep.intra_op_threads} ORT thread(s); {sweep.warmup} warm-up call(s) per batch size discarded, "
           f"median of {sweep.repeats} timed call(s).", "",
           "| model | kind | file | batch | median call ms | per-face ms | faces/s | peak RSS MiB |",
           "|---|---|---|---|---|---|---|---|"]
    for m in sweep.models.values():
        kind = f"STAND-IN ({m.variant})" if m.stand_in else "real"
        if m.fixed_batch is not None:
            kind += f", fixed batch {m.fixed_batch} (looped)"
        for point in m.points:
            out.append(f"| {m.name} | {kind} | `{Path(m.path).name}` | {point.batch} | {point.median_ms:.1f} | "
                       f"{point.per_face_ms:.1f} | {point.faces_per_s:.1f} | {point.peak_rss_mib:.0f} |")
        if m.skipped:
            out.append(f"| {m.name} | {kind} | | {', '.join(map(str, m.skipped))} | not run (capped at batch "
                       f"{m.cap}) | | | |")
    out.append("")
    return out
