"""The job report: per-item results, per-stage busy and idle time, frames/s; it folds batches.

Every output batch that reaches the driver is slim (no pixels): one row per frame with its
item, segment, error, ``read_failed`` marker, swap counters and each stage's share of busy and
idle time. :meth:`JobReport.fold` adds a batch to the counters and says how many frames of each
video segment it held, for the segment tracker.
"""

from __future__ import annotations

import json
import logging
import resource
import time
from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

import numpy as np

from fusion_ray import __version__
from fusion_ray.errors import FusionRayError, describe_error, one_line
from fusion_ray.fsutil import atomic_write_bytes
from fusion_ray.jobs.segment_status import SegmentKey

log = logging.getLogger(__name__)

STEP_PREFIX = "step_ms_"
"""Per-row columns ``step_ms_<step>``: a row's share of a chain step's busy time (ms), wherever the
step ran (a stage, a fused pool, a tracking read task); :meth:`JobReport.fold` sums them per step."""


def step_column(step: str) -> str:
    return f"{STEP_PREFIX}{step}"


class ItemStatus(StrEnum):
    PENDING = "pending"
    DONE = "done"
    SKIPPED = "skipped"
    FAILED = "failed"


class ItemKind(StrEnum):
    UNKNOWN = "unknown"
    IMAGE = "image"
    VIDEO = "video"


@dataclass
class ItemResult:
    """What happened to one item."""

    target: str
    output: str
    kind: str = ItemKind.UNKNOWN
    status: str = ItemStatus.PENDING  # done | skipped | failed
    frames: int = 0
    frames_failed: int = 0
    frames_resumed: int = 0
    """Of ``frames``, those in segments an earlier run had finished (kept in the parts folder, not
    processed again)."""
    faces_swapped: int = 0
    error: str = ""
    """Why the item failed; for a ``done`` video, how many of its frames failed (passed through)."""
    frames_missing: int = 0
    """Frames a truncated video lacks (what its container declares beyond its packets)."""
    missing_from_s: float | None = None
    """Where a truncated video's missing frames start (seconds from its first frame)."""
    warnings: list[str] = field(default_factory=list)
    """What a ``done`` item lost or changed (e.g. a truncated video processed as far as it goes)."""
    det_full: int = 0
    """Tracking (videos): full-frame detections."""
    det_roi: int = 0
    """Tracking: faces re-detected on a crop around their predicted position."""
    faces_interpolated: int = 0
    """Tracking: swapped faces filled in over a gap of at most G frames."""
    tracks: int = 0
    """Tracking: face tracks (counted per segment: tracks start again at each one)."""

    def fail(self, exc: BaseException | str) -> None:
        """The item failed: its error is one line (a Ray error: its worker's cause; the CLI
        prints it once, so the log line is INFO)."""
        self.status = ItemStatus.FAILED
        self.error = describe_error(exc) if isinstance(exc, BaseException) else one_line(exc)
        log.info("%s: %s", self.target, self.error)

    def warn(self, message: str) -> None:
        """Record what the item lost or changed (the CLI prints it once, in the summary)."""
        self.warnings.append(message)


@dataclass
class StageStats:
    busy_s: float = 0.0
    idle_s: float = 0.0

    @property
    def idle_ratio(self) -> float:
        total = self.busy_s + self.idle_s
        return self.idle_s / total if total > 0 else 0.0


LOCAL_LINES = {"track": ("decode", "track"), "compute": ("compute",), "encode": ("encode",)}
"""The local runner's lines (threads of one kind) and the stages whose clocks they fill: the
decoders decode and track (``track``; ``decode`` alone when tracking is off), the compute threads
run the chain (their ``compute`` clock waits; the steps inside it never do), the encoder writes."""


def line_shares(stages: Mapping[str, StageStats]) -> dict[str, dict[str, float]]:
    """Each local-runner line's busy and idle seconds and busy share, busy / (busy + idle): the
    share of its threads' time they worked (empty for a runner without these lines). The line
    nearest 1 bounds the job; the others wait for it."""
    if "compute" not in stages:
        return {}
    out: dict[str, dict[str, float]] = {}
    for line, names in LOCAL_LINES.items():
        present = [stages[name] for name in names if name in stages]
        if not present:
            continue
        busy, idle = sum(s.busy_s for s in present), sum(s.idle_s for s in present)
        name = line if line != "track" or "track" in stages else "decode"
        out[name] = {"busy_s": round(busy, 3), "idle_s": round(idle, 3),
                     "busy_share": round(busy / (busy + idle), 3) if busy + idle > 0 else 0.0}
    return out


def bounding_line(lines: Mapping[str, Mapping[str, float]]) -> str | None:
    """The line with the highest busy share (None without lines)."""
    return max(lines, key=lambda name: lines[name]["busy_share"]) if lines else None


@dataclass
class Fold:
    """What one batch held: its frames, and per video segment the frames that reached a writer
    (and the segment's length, from its rows)."""

    frames: int = 0
    segment_frames: Counter[SegmentKey] = field(default_factory=Counter)
    segment_lengths: dict[SegmentKey, int] = field(default_factory=dict)
    items: set[int] = field(default_factory=set)
    """The items it had rows of (their report rows may be due: :meth:`JobReport.settle`)."""


@dataclass
class JobReport:
    """The job's outcome, written as JSON."""

    items: list[ItemResult]
    frames: int = 0
    wall_s: float = 0.0
    stages: dict[str, StageStats] = field(default_factory=dict)
    steps: dict[str, float] = field(default_factory=dict)
    """Each chain step's busy seconds, wherever it ran (detect or track, select, landmark, align,
    the masks, swap, paste, enhance...), in the order they first came back."""
    stand_in_models: list[str] = field(default_factory=list)
    precision: dict[str, str] = field(default_factory=dict)
    """The precision each model ran at (``fp32``, ``fp16``, ``int8``), by model name."""
    version: str = __version__
    first_frame_s: float | None = None
    """Seconds from the job's start (its planning) to the first output frame back at the driver."""
    started: float = field(default_factory=time.perf_counter, repr=False)
    rows_path: Path | None = None
    """Where each item's row is appended as JSON Lines once the item is settled (done, skipped
    or failed), while the job runs; None: no rows file."""
    _settled: set[int] = field(default_factory=set, repr=False)

    def settle(self, indices: Iterable[int] | None = None) -> None:
        """Append the rows of the items among ``indices`` (default: all) that are no longer
        pending and have no row yet."""
        if self.rows_path is None:
            return
        todo = range(len(self.items)) if indices is None else indices
        new = sorted({n for n in todo if n not in self._settled and self.items[n].status != ItemStatus.PENDING})
        if not new:
            return
        with self.rows_path.open("a", encoding="utf-8") as file:
            for n in new:
                file.write(json.dumps({"index": n, **asdict(self.items[n])}) + "\n")
        self._settled.update(new)

    def start_rows(self, path: Path) -> None:
        """Start a rows file at ``path`` (emptied: a re-run's rows are its own)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("", encoding="utf-8")
        self.rows_path = path

    @property
    def fps(self) -> float:
        return self.frames / self.wall_s if self.wall_s > 0 else 0.0

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for item in self.items:
            out[item.status] = out.get(item.status, 0) + 1
        return out

    def track_stages(self, names: Iterable[str]) -> None:
        """Report these stages' busy and idle time (from their ``busy_ms_<name>`` columns)."""
        for name in names:
            self.stages.setdefault(name, StageStats())

    def add_stand_ins(self, names: Sequence[str]) -> None:
        self.stand_in_models = sorted(set(self.stand_in_models) | set(names))

    def add_precisions(self, pairs: Iterable[tuple[str, str]]) -> None:
        self.precision = dict(sorted({**self.precision, **dict(pairs)}.items()))

    def fold(self, batch: Mapping[str, Any]) -> Fold:
        """Add one slim output batch to the item and stage counters."""
        fold = Fold()
        touched = fold.items
        if self.first_frame_s is None and len(batch["item"]):
            self.first_frame_s = time.perf_counter() - self.started
        for row in range(len(batch["item"])):
            n = int(batch["item"][row])
            touched.add(n)
            result = self.items[n]
            if "image" in batch and result.kind == ItemKind.UNKNOWN:  # its plan may come later
                result.kind = ItemKind.IMAGE if bool(batch["image"][row]) else ItemKind.VIDEO
            error = str(batch["error"][row] or "")
            if bool(batch["read_failed"][row]):
                result.fail(error or "unreadable")
                continue
            fold.frames += 1
            _count_frame(result, error, int(batch["faces_swapped"][row]) if "faces_swapped" in batch else 0)
            _count_tracking(result, batch, row)
            if result.kind == ItemKind.VIDEO:
                key = (n, int(batch["segment"][row]))
                fold.segment_frames[key] += 1
                if "seg_count" in batch:
                    fold.segment_lengths[key] = int(batch["seg_count"][row])
        self.add_steps({column[len(STEP_PREFIX):]: float(np.sum(batch[column]))
                        for column in batch if column.startswith(STEP_PREFIX)})
        for name, stats in self.stages.items():
            if f"busy_ms_{name}" in batch:
                stats.busy_s += float(batch[f"busy_ms_{name}"].sum()) / 1000.0
                stats.idle_s += float(batch[f"idle_ms_{name}"].sum()) / 1000.0
        return fold

    def add_times(self, clocks: Mapping[str, Any], steps: Collection[str]) -> None:
        """A runner's clocks (``busy_s``, ``idle_s``) into the stage table; those named in ``steps``
        (chain steps) into the step table too."""
        self.track_stages(clocks)
        for name, clock in clocks.items():
            self.stages[name].busy_s += clock.busy_s
            self.stages[name].idle_s += clock.idle_s
        self.add_steps({name: clock.busy_s * 1000.0 for name, clock in clocks.items() if name in steps})

    def add_steps(self, busy_ms: Mapping[str, float]) -> None:
        """Add each step's busy time (ms)."""
        for step, ms in busy_ms.items():
            self.steps[step] = self.steps.get(step, 0.0) + ms / 1000.0

    def to_json(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "frames": self.frames,
            "wall_s": round(self.wall_s, 3),
            "frames_per_s": round(self.fps, 2),
            "driver": {"first_frame_s": None if self.first_frame_s is None else round(self.first_frame_s, 3),
                       "peak_rss_mb": round(_peak_rss_mb(), 1)},
            "counts": self.counts(),
            "stand_in_models": self.stand_in_models,
            "precision": self.precision,
            "stages": {name: {"busy_s": round(s.busy_s, 3), "idle_s": round(s.idle_s, 3),
                              "idle_ratio": round(s.idle_ratio, 3)} for name, s in self.stages.items()},
            "steps": {name: {"busy_s": round(busy, 3)} for name, busy in self.steps.items()},
            "lines": (lines := line_shares(self.stages)),
            "bound": bounding_line(lines),
            "items": [asdict(item) for item in self.items],
        }

    def write(self, path: Path) -> None:
        self.settle()
        atomic_write_bytes(path, json.dumps(self.to_json(), indent=2).encode())


def _peak_rss_mb() -> float:
    """This process's peak resident memory so far (the driver's, for a job's report)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux


def typed_error(exc: BaseException) -> str:
    """``Type: message`` in one line, for an error that fails a whole group of items (a model,
    a config, Ray): the type says what kind of thing failed, since it is not the item."""
    text = describe_error(exc)
    return f"{type(exc).__name__}: {text}" if isinstance(exc, FusionRayError) else text


TRACKING_COUNTERS = {"det_full": "det_full", "det_roi": "det_roi", "faces_interpolated": "faces_interpolated",
                     "tracks_new": "tracks"}
"""Per-row columns of a tracking read task -> the ItemResult counter each adds to."""


def _count_tracking(result: ItemResult, batch: Mapping[str, Any], row: int) -> None:
    """A tracked video frame's counters (absent with tracking off, and for images)."""
    for column, name in TRACKING_COUNTERS.items():
        if column in batch:
            setattr(result, name, getattr(result, name) + int(batch[column][row]))


def _count_frame(result: ItemResult, error: str, faces_swapped: int) -> None:
    """One processed frame of an item: a failed image fails; a failed video frame is counted."""
    result.frames += 1
    result.faces_swapped += faces_swapped
    if error:
        result.frames_failed += 1
        if result.kind == ItemKind.IMAGE:
            result.fail(error)
        elif not result.error:
            result.error = error  # the first failed frame's message, for the item's report
    elif result.kind == ItemKind.IMAGE:
        result.status = ItemStatus.DONE  # the encode stage wrote it before returning the row
