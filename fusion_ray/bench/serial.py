"""The serial loop: one frame at a time, every model at batch 1 (how FaceFusion runs).

decode -> :meth:`Engine.process_frame` -> encode, in this process, then the encoded file is
joined with the source's audio exactly as the pipeline's output is. The wall time runs from
loading the models to the finished file, so it is comparable with the pipeline's (which
includes Ray start-up, model loading in the actors and the join).

``canvas`` chooses the detector canvas: ``"square"`` is FaceFusion's 640x640 for any frame;
``"fit"`` (fusion_ray's default) pads a 640x360 frame only to 640x384.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from fusion_ray.bench.memory import MemoryPeak, PeakMemorySampler
from fusion_ray.config import EngineConfig
from fusion_ray.image import load_reference, load_sources
from fusion_ray.models.detector import plan_input
from fusion_ray.runners.inline import Engine
from fusion_ray.types import Embedding, SourceIdentity
from fusion_ray.video import EncodeOptions, decode_all, encode_segment, join_segments, probe

log = logging.getLogger(__name__)

Canvas = Literal["square", "fit"]
SERIAL_STAGES: tuple[str, ...] = ("decode", "detect", "select", "embed", "align", "swap", "mask", "paste",
                                  "enhance_align", "enhance", "enhance_mask", "paste_enhanced", "other", "encode")


@dataclass
class SerialResult:
    """One serial-loop run."""

    canvas: str
    detector_canvas_hw: tuple[int, int]
    frames: int
    faces_detected: int
    faces_swapped: int
    wall_s: float
    """Models loaded to output file written (what the pipeline's wall time is compared with)."""
    setup_s: float
    """Loading the models and embedding the source."""
    loop_s: float
    """Decoding, processing and encoding the frames."""
    finish_s: float
    """Flushing the encoder and joining the audio."""
    stage_ms: dict[str, float] = field(default_factory=dict)
    """Mean milliseconds per frame for each step (``other``: the engine's unaccounted time)."""
    first_output_s: float = 0.0
    """From loading the models to the first processed frame."""
    intra_op_threads: int = 1
    providers: list[str] = field(default_factory=list)
    """ONNX Runtime providers of the loop's sessions (the detector's)."""
    memory: MemoryPeak | None = None

    @property
    def fps(self) -> float:
        return self.frames / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def loop_fps(self) -> float:
        return self.frames / self.loop_s if self.loop_s > 0 else 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "canvas": self.canvas, "detector_canvas_hw": list(self.detector_canvas_hw),
            "frames": self.frames, "faces_detected": self.faces_detected, "faces_swapped": self.faces_swapped,
            "wall_s": round(self.wall_s, 3), "setup_s": round(self.setup_s, 3), "loop_s": round(self.loop_s, 3),
            "finish_s": round(self.finish_s, 3), "first_output_s": round(self.first_output_s, 3),
            "frames_per_s": round(self.fps, 2),
            "loop_frames_per_s": round(self.loop_fps, 2),
            "stage_ms_per_frame": {k: round(v, 2) for k, v in self.stage_ms.items()},
            "intra_op_threads": self.intra_op_threads, "providers": self.providers,
            "memory": self.memory.to_json() if self.memory else None,
        }


def with_canvas(cfg: EngineConfig, canvas: Canvas) -> EngineConfig:
    """``cfg`` with the detector canvas set."""
    return cfg.model_copy(update={"detector": cfg.detector.model_copy(update={"canvas": canvas})})


def run_serial(video: Path, sources: Sequence[Path], cfg: EngineConfig, *, canvas: Canvas, work_dir: Path,
               cpu_budget: float, encode_options: EncodeOptions | None = None,
               memory_interval_s: float = 0.5, memory_pss: bool = False) -> SerialResult:
    """Run the serial loop over ``video`` and write the result (with audio) into ``work_dir``."""
    cfg = with_canvas(cfg, canvas)
    work_dir.mkdir(parents=True, exist_ok=True)
    segment = work_dir / f"serial_{canvas}_video.mp4"
    output = work_dir / f"serial_{canvas}.mp4"
    tally = _LoopTally()
    with PeakMemorySampler(memory_interval_s, pss=memory_pss) as sampler:
        start = time.perf_counter()
        engine = Engine.load(cfg, cpu_budget=cpu_budget)
        identity = load_sources(engine, sources)
        reference = load_reference(engine)
        info = probe(video)
        setup_end = time.perf_counter()
        encode_segment(tally.frames(engine, video, identity, reference), segment, fps=info.fps,
                       width=info.width, height=info.height, options=encode_options)
        loop_end = time.perf_counter()
        join_segments([segment], output, fps=info.fps, audio_source=video if info.has_audio else None,
                      metadata={"comment": _comment(engine)})
        end = time.perf_counter()
    segment.unlink(missing_ok=True)
    model_hw = engine.models.detector.model_hw if engine.models.detector is not None else (None, None)
    return SerialResult(
        canvas=canvas, detector_canvas_hw=plan_input((info.height, info.width), cfg.detector, model_hw).canvas_hw,
        frames=tally.counts["frames"], faces_detected=tally.counts["detected"],
        faces_swapped=tally.counts["swapped"], wall_s=end - start, setup_s=setup_end - start,
        loop_s=loop_end - setup_end, finish_s=end - loop_end, stage_ms=tally.stage_ms(),
        first_output_s=(end if tally.first_output_at is None else tally.first_output_at) - start,
        intra_op_threads=_threads_of(engine),
        providers=list(dict.fromkeys(p for info in engine.model_info.values() for p in info.providers)),
        memory=sampler.result)


class _LoopTally:
    """What the serial loop counts while the encoder pulls its frames: milliseconds per step,
    frames and faces, and when the first processed frame came out."""

    def __init__(self) -> None:
        self.totals: dict[str, float] = defaultdict(float)
        self.counts = {"frames": 0, "detected": 0, "swapped": 0}
        self.first_output_at: float | None = None

    def frames(self, engine: Engine, video: Path, identity: SourceIdentity,
               reference: Embedding | None) -> Iterator[np.ndarray]:
        """Decode ``video`` and process each frame, timing decode, the engine's steps and the
        encoder (which runs between two frames)."""
        totals, counts = self.totals, self.counts
        decoded = decode_all(video)
        while True:
            t0 = time.perf_counter()
            try:
                item = next(decoded)
            except StopIteration:
                return
            t1 = time.perf_counter()
            result = engine.process_frame(item.frame, identity, reference)
            t2 = time.perf_counter()
            totals["decode"] += (t1 - t0) * 1000.0
            accounted = 0.0
            for stage, ms in result.timings_ms.items():
                totals[stage] += ms
                accounted += ms
            totals["other"] += max(0.0, (t2 - t1) * 1000.0 - accounted)
            counts["frames"] += 1
            counts["detected"] += result.faces_detected
            counts["swapped"] += result.faces_swapped
            if counts["frames"] == 1:
                self.first_output_at = t2
            yield result.frame
            totals["encode"] += (time.perf_counter() - t2) * 1000.0  # the encoder ran in between

    def stage_ms(self) -> dict[str, float]:
        """Mean milliseconds per frame of each step that ran, in ``SERIAL_STAGES`` order."""
        n = max(self.counts["frames"], 1)
        return {stage: self.totals[stage] / n for stage in SERIAL_STAGES if stage in self.totals}


def _threads_of(engine: Engine) -> int:
    detector = engine.models.detector
    session = getattr(detector, "session", None)
    if session is None:
        return 1
    return int(session.get_session_options().intra_op_num_threads)


def _comment(engine: Engine) -> str:
    meta = engine.provenance.metadata()
    return meta.get("Comment", meta["Software"])
