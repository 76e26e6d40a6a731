"""Dataset jobs: many images and videos swapped in one streaming Ray Data run.

``run_job`` plans every item on the driver (probe, keyframe segments; corrupt items are
reported, not fatal), embeds each distinct source once, streams all frames through the stages,
lets the segment writers encode, joins each finished video with its audio, renames it into
place, and returns a report with frames/s, per-stage busy time and idle ratio.
Completed outputs are skipped on re-run, so a job can be resumed by running it again.

Failures are per item, and a failed item leaves no output (so a re-run retries it):

- an image whose frame failed in a stage is ``failed`` and is not written;
- a video frame that fails in a stage is passed through unchanged (a video cannot skip a
  frame) and counted in ``frames_failed``. If every frame of a video failed, nothing was
  swapped: the video is ``failed`` and not written. Otherwise it is ``done`` and its
  ``error`` says how many frames failed (with the first frame's message);
- an item that cannot be read or planned (corrupt, missing, a video output not named .mp4,
  .m4v or .mov) is ``failed``;
- an error that stops a whole group of items (those with the same engine options: a model
  that cannot load, a Ray failure) fails that group's unfinished items with its message; the
  other groups still run and the report is still written. A pipeline config that cannot fit
  on the cluster (ConfigError) is a whole-job error, raised before anything is written.
"""

from __future__ import annotations

import contextlib
import json
import logging
import shutil
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import ray

from fusion_ray import __version__
from fusion_ray.config import EngineConfig, parse_config
from fusion_ray.engine import Engine
from fusion_ray.errors import ConfigError, FusionRayError, InputError
from fusion_ray.fsutil import atomic_write_bytes
from fusion_ray.image import load_reference, metadata_for
from fusion_ray.imageio import read_image
from fusion_ray.pipeline.build import Sink, build_pipeline, cluster_gpus
from fusion_ray.pipeline.config import FUSED_POOL, JobConfig, PipelineConfig
from fusion_ray.pipeline.datasource import FrameDatasource, ReadUnit
from fusion_ray.pipeline.stages import stage_names
from fusion_ray.pipeline.writer import (
    ImageTarget,
    SegmentKey,
    SegmentWriter,
    VideoTarget,
    writer_for,
)
from fusion_ray.types import SourceIdentity
from fusion_ray.video.encode import check_video_output, join_segments
from fusion_ray.video.probe import VideoInfo, is_video_file, probe
from fusion_ray.video.segments import Segment, plan_segments

log = logging.getLogger(__name__)

PARTS_SUFFIX = ".fusion_ray_parts"


@dataclass(frozen=True)
class JobItem:
    """One thing to do: faces of ``sources`` into ``target``, written to ``output``.

    ``options`` are engine-config overrides for this item (e.g. ``{"selection": {"mode":
    "largest"}}``); items with the same options run in the same pipeline.
    """

    sources: tuple[Path, ...]
    target: Path
    output: Path
    options: str = "{}"
    """JSON object of engine overrides (a string, so that items stay hashable)."""


@dataclass
class ItemResult:
    """What happened to one item."""

    target: str
    output: str
    kind: str = "unknown"
    status: str = "pending"  # done | skipped | failed
    frames: int = 0
    frames_failed: int = 0
    faces_swapped: int = 0
    error: str = ""
    """Why the item failed; for a ``done`` video, how many of its frames failed (passed through)."""


@dataclass
class StageStats:
    busy_s: float = 0.0
    idle_s: float = 0.0

    @property
    def idle_ratio(self) -> float:
        total = self.busy_s + self.idle_s
        return self.idle_s / total if total > 0 else 0.0


@dataclass
class JobReport:
    """The job's outcome, written as JSON."""

    items: list[ItemResult]
    frames: int = 0
    wall_s: float = 0.0
    stages: dict[str, StageStats] = field(default_factory=dict)
    stand_in_models: list[str] = field(default_factory=list)
    version: str = __version__

    @property
    def fps(self) -> float:
        return self.frames / self.wall_s if self.wall_s > 0 else 0.0

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for item in self.items:
            out[item.status] = out.get(item.status, 0) + 1
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "frames": self.frames,
            "wall_s": round(self.wall_s, 3),
            "frames_per_s": round(self.fps, 2),
            "counts": self.counts(),
            "stand_in_models": self.stand_in_models,
            "stages": {name: {"busy_s": round(s.busy_s, 3), "idle_s": round(s.idle_s, 3),
                              "idle_ratio": round(s.idle_ratio, 3)} for name, s in self.stages.items()},
            "items": [asdict(item) for item in self.items],
        }

    def write(self, path: Path) -> None:
        atomic_write_bytes(path, json.dumps(self.to_json(), indent=2).encode())


@dataclass
class _Video:
    item: int
    info: VideoInfo
    segments: list[Segment]
    work_dir: Path
    remaining: set[int] = field(default_factory=set)
    finished: dict[int, str] = field(default_factory=dict)

    @property
    def frame_count(self) -> int:
        """Frames the decoder delivers: the segment plan's (from the packets), not the container's
        sample count, which also counts the frames an edit list (a `-c copy` trim) hides."""
        return sum(s.frame_count for s in self.segments)


ProgressCallback = Callable[[int, int, JobReport], None]
"""progress(frames_done, frames_total, report_so_far)."""


def confine(output: Path, root: Path | None) -> Path:
    """``output`` resolved; InputError when it falls outside ``root``."""
    resolved = output.expanduser().resolve()
    if root is not None:
        base = root.expanduser().resolve()
        if not resolved.is_relative_to(base):
            raise InputError(f"output {output} is outside the output root {base}")
    return resolved


def run_job(items: Sequence[JobItem], cfg: JobConfig, *, output_root: Path | None = None,
            force: bool = False, progress: ProgressCallback | None = None,
            report_path: Path | None = None) -> JobReport:
    """Run ``items`` as one streaming job on the connected (or a new local) Ray cluster."""
    start = time.perf_counter()
    results = [ItemResult(str(i.target), str(i.output)) for i in items]
    report = JobReport(results)
    todo: list[int] = []
    for n, item in enumerate(items):
        try:
            output = confine(item.output, output_root)
            if output.exists() and not force:
                results[n].status = "skipped"
                continue
            if not item.target.is_file():
                raise InputError(f"file not found: {item.target}")
            if is_video_file(item.target):
                check_video_output(output)  # before any work: the output would be MP4 under another name
            todo.append(n)
        except (FusionRayError, OSError) as exc:
            _fail(results[n], exc)
    groups: dict[str, list[int]] = {}
    for n in todo:
        groups.setdefault(items[n].options, []).append(n)
    group_cfgs: dict[str, JobConfig] = {}
    for options, members in groups.items():
        try:
            group_cfgs[options] = with_overrides(cfg, options)
        except FusionRayError as exc:
            for n in members:
                _fail(results[n], exc)
    # A pipeline that cannot fit is a whole-job error, raised before anything is written.
    gpus_now = cluster_gpus() if group_cfgs else 0.0  # one reading: the checks and the runs agree
    if group_cfgs:
        cluster_cpus = float(ray.cluster_resources().get("CPU", 0.0))
        for group_cfg in group_cfgs.values():
            group_cfg.pipeline.check_fits(cluster_cpus, enhance=group_cfg.engine.enhance.enabled,
                                          gpus_available=group_cfg.pipeline.uses_gpus(gpus_now), cluster_gpus=gpus_now)
    for options, group_cfg in group_cfgs.items():
        members = groups[options]
        try:
            _run(items, members, group_cfg, results, report, progress, gpus_now)
        except Exception as exc:  # this group's failure; the others still run
            log.warning("a group of %d item(s) failed: %s: %s", len(members), type(exc).__name__, exc,
                        exc_info=True)
            for n in members:
                if results[n].status == "pending":
                    _fail(results[n], f"{type(exc).__name__}: {exc}")
    report.wall_s = time.perf_counter() - start
    if report_path is not None:
        report.write(report_path)
    return report


def with_overrides(cfg: JobConfig, options: str) -> JobConfig:
    """``cfg`` with an item's engine overrides (a JSON object) merged in."""
    try:
        overrides = json.loads(options or "{}")
    except json.JSONDecodeError as exc:
        raise ConfigError(f"item options are not valid JSON: {exc}") from exc
    if not isinstance(overrides, dict):
        raise ConfigError(f"item options must be a JSON object, got {options!r}")
    if not overrides:
        return cfg
    engine = _deep_merge(cfg.engine.model_dump(), overrides)
    return JobConfig(engine=parse_config(engine, EngineConfig, source="item options"), pipeline=cfg.pipeline)


def _deep_merge(base: dict[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in extra.items():
        out[key] = _deep_merge(out[key], value) if isinstance(value, Mapping) and isinstance(out.get(key), dict) else value
    return out


def _fail(result: ItemResult, exc: BaseException | str) -> None:
    result.status = "failed"
    result.error = str(exc)
    log.warning("%s: %s", result.target, result.error)


def _prepare_identities(items: Sequence[JobItem], todo: list[int], engine: Engine,
                        results: list[ItemResult]) -> tuple[dict[str, SourceIdentity], dict[int, str]]:
    """Embed each distinct source set once; items whose source fails are marked failed."""
    identities: dict[str, SourceIdentity] = {}
    by_sources: dict[tuple[Path, ...], str | BaseException] = {}
    source_of: dict[int, str] = {}
    for n in todo:
        key = items[n].sources
        if key not in by_sources:
            try:
                images = [read_image(p).frame for p in key]
                source_id = f"s{len(identities)}"
                identities[source_id] = engine.prepare_source(images, [str(p) for p in key])
                by_sources[key] = source_id
            except FusionRayError as exc:
                by_sources[key] = exc
        outcome = by_sources[key]
        if isinstance(outcome, BaseException):
            _fail(results[n], outcome)
        else:
            source_of[n] = outcome
    return identities, source_of


def _run(items: Sequence[JobItem], todo: list[int], cfg: JobConfig, results: list[ItemResult],
         report: JobReport, progress: ProgressCallback | None, gpus_now: float) -> None:
    engine_cfg: EngineConfig = cfg.engine
    pipeline = cfg.pipeline
    # The driver embeds the sources once; every actor gets the (small) identities.
    driver_components: list[Any] = ["detector", "embedder"] if (
        engine_cfg.swap.swapper == "inswapper" or engine_cfg.selection.mode == "reference") else ["detector"]
    # On CPU: a few small embeddings, and GPU memory held here would be memory Ray does not count.
    driver_engine = Engine.load(engine_cfg.in_ray_actor(gets_gpu=False), components=driver_components, cpu_budget=1)
    identities, source_of = _prepare_identities(items, todo, driver_engine, results)
    reference = load_reference(driver_engine)
    stand_ins = _stand_in_models(engine_cfg, driver_engine)
    report.stand_in_models = sorted(set(report.stand_in_models) | set(stand_ins))

    units: list[ReadUnit] = []
    videos: dict[int, _Video] = {}
    images: dict[int, ImageTarget] = {}
    writers: list[Any] = []
    metadata = metadata_for(stand_ins)
    done_frames = 0
    try:  # from the first parts folder on: whatever happens, the finally cleans up
        for n in source_of:
            try:
                _plan_item(n, items[n], source_of[n], pipeline, results[n], units, videos, images, metadata)
            except (FusionRayError, OSError) as exc:
                _fail(results[n], exc)
        if not units:
            return
        total_frames = sum(v.frame_count for v in videos.values()) + len(images)

        gpus_available = pipeline.uses_gpus(gpus_now)
        targets = {n: VideoTarget(v.info.fps, v.info.width, v.info.height, str(v.work_dir))
                   for n, v in videos.items()}
        writer_cls = ray.remote(SegmentWriter).options(num_cpus=pipeline.writer_num_cpus)
        writers += [writer_cls.remote(targets, pipeline.encode_options) for _ in range(pipeline.writers)]  # type: ignore[attr-defined]
        segment_spans: dict[SegmentKey, tuple[int, int]] = {
            (n, s.index): (s.start_frame, s.frame_count) for n, v in videos.items() for s in v.segments}

        largest = max(u.frame_hw[0] * u.frame_hw[1] * 3 for u in units)
        block_frames = max(1, min(pipeline.block_frames, int(pipeline.block_mb * 2**20 // largest)))
        names = [*stage_names(engine_cfg), "encode"]
        if pipeline.fused(gpus_available):
            names.append(FUSED_POOL)
        for name in names:
            report.stages.setdefault(name, StageStats())
        seen: dict[SegmentKey, int] = {}
        finishing: dict[Any, SegmentKey] = {}
        # A dataset copies the DataContext when it is created: set it up first.
        with _data_context(pipeline):
            ds = ray.data.read_datasource(
                FrameDatasource(units, block_frames), num_cpus=pipeline.read_num_cpus,
                compute=ray.data.TaskPoolStrategy(size=pipeline.read_tasks), override_num_blocks=len(units))
            ds = build_pipeline(ds, engine_cfg, pipeline, identities, reference=reference,
                                gpus_available=gpus_available, sink=Sink(writers, segment_spans, images))
            for batch in ds.iter_batches(batch_size=None, batch_format="numpy"):
                done_frames += _account(batch, results, report, names, seen)
                for key, count in list(seen.items()):
                    if key[0] in videos and count == segment_spans[key][1]:
                        writer = writers[writer_for(key, len(writers))]
                        finishing[writer.finish.remote(key)] = key
                        seen[key] = -1  # finishing
                _collect_finished(finishing, videos, results, items, metadata, block=False)
                if progress is not None:
                    progress(done_frames, total_frames, report)
            _collect_finished(finishing, videos, results, items, metadata, block=True)
        for n, video in videos.items():
            if results[n].status == "pending":
                _fail(results[n], f"incomplete: {len(video.finished)} of {len(video.segments)} segments written")
        for n in images:
            if results[n].status == "pending":
                _fail(results[n], "incomplete: the image did not come back from the pipeline")
    finally:
        report.frames += done_frames
        _cleanup(videos, results, writers)


def _plan_item(n: int, item: JobItem, source_id: str, pipeline: PipelineConfig, result: ItemResult,
               units: list[ReadUnit], videos: dict[int, _Video], images: dict[int, ImageTarget],
               metadata: Mapping[str, str]) -> None:
    """Add item ``n``'s read units (and, for a video, its parts folder)."""
    output = item.output.expanduser().resolve()
    output.parent.mkdir(parents=True, exist_ok=True)
    if is_video_file(item.target):
        info = probe(item.target)
        segments = plan_segments(item.target, pipeline.segment_seconds)
        work_dir = output.with_name(output.name + PARTS_SUFFIX)
        shutil.rmtree(work_dir, ignore_errors=True)
        work_dir.mkdir(parents=True)
        videos[n] = _Video(n, info, segments, work_dir, {s.index for s in segments})
        result.kind = "video"
        units += [ReadUnit(n, str(item.target), source_id, s, (info.height, info.width)) for s in segments]
    else:
        result.kind = "image"
        images[n] = ImageTarget(str(item.target), str(output), metadata)
        units.append(ReadUnit(n, str(item.target), source_id, None, (1080, 1920)))


CLEANUP_TIMEOUT_S = 60.0
"""How long cleanup waits for a writer to abort a video's segments (then it is killed anyway)."""


def _cleanup(videos: Mapping[int, _Video], results: list[ItemResult], writers: Sequence[Any]) -> None:
    """Abort the segments of unfinished videos, remove every parts folder, stop the writers.

    Each step is independent: a dead or stuck writer is logged and the cleanup goes on, so the
    parts folders are always removed and an exception being handled is not replaced.
    """
    for n, video in videos.items():
        if results[n].status != "done":
            keys = [(n, s.index) for s in video.segments]
            for writer in writers:
                try:
                    ray.get(writer.abort.remote(keys), timeout=CLEANUP_TIMEOUT_S)
                except Exception as exc:
                    log.warning("cleanup: a writer could not abort the segments of %s: %s: %s",
                                results[n].target, type(exc).__name__, exc)
        shutil.rmtree(video.work_dir, ignore_errors=True)
    for writer in writers:
        try:
            ray.kill(writer)
        except Exception as exc:
            log.warning("cleanup: cannot stop a segment writer: %s: %s", type(exc).__name__, exc)


def _stand_in_models(cfg: EngineConfig, driver_engine: Engine) -> list[str]:
    """Stand-ins among every model the pipeline loads (the driver holds only some of them)."""
    from fusion_ray.engine import required_components
    from fusion_ray.models.standins import is_stand_in
    from fusion_ray.models.store import ModelStore, resolve_models_dir

    names = set(driver_engine.stand_in_models)
    store = ModelStore(resolve_models_dir(cfg.models.models_dir), overrides=dict(cfg.models.paths))
    wanted = required_components(cfg)
    model_names = {"swapper": cfg.models.swapper if cfg.swap.swapper == "inswapper" else None,
                   "enhancer": cfg.models.enhancer, "embedder": cfg.models.embedder}
    for component, name in model_names.items():
        if component in wanted and name is not None:
            path = store.path_for(name)
            if path.is_file() and is_stand_in(path):
                names.add(name)
    return sorted(names)


@contextlib.contextmanager
def _data_context(pipeline: PipelineConfig) -> Iterator[None]:
    """Ray Data settings for this job's execution, restored afterwards (the context is per process)."""
    from ray.data import DataContext, ExecutionResources

    ctx = DataContext.get_current()
    saved = (ctx.enable_progress_bars, ctx.execution_no_progress_timeout_s,  # type: ignore[attr-defined]
             ctx.execution_options.resource_limits, ctx.target_max_block_size, ctx.wait_for_min_actors_s)
    ctx.enable_progress_bars = pipeline.progress_bars
    # Start dispatching once every pool has its min_actors: otherwise the first actor up takes
    # the blocks of a short clip (two tasks in flight per actor) and, the input consumed, Ray
    # Data cancels the actors still starting, so one actor does all the work.
    ctx.wait_for_min_actors_s = pipeline.actor_start_timeout_s
    # Ray Data merges blocks up to this size: keep read blocks small so frames stream through
    # the stages (and reach the writers) a few at a time instead of a segment at a time.
    ctx.target_max_block_size = int(pipeline.block_mb * 2**20)
    if pipeline.no_progress_timeout_s is not None:
        ctx.execution_no_progress_timeout_s = pipeline.no_progress_timeout_s  # type: ignore[attr-defined]
    if pipeline.object_store_mb is not None:
        ctx.execution_options.resource_limits = ExecutionResources.for_limits(
            object_store_memory=pipeline.object_store_mb * 2**20)
    try:
        yield
    finally:
        (ctx.enable_progress_bars, ctx.execution_no_progress_timeout_s,  # type: ignore[attr-defined]
         ctx.execution_options.resource_limits, ctx.target_max_block_size, ctx.wait_for_min_actors_s) = saved


def _account(batch: Mapping[str, Any], results: list[ItemResult], report: JobReport,
             names: Iterable[str], seen: dict[SegmentKey, int]) -> int:
    """Fold one slim output batch into the counters; returns the frames it holds."""
    frames = 0
    for row in range(len(batch["item"])):
        item = int(batch["item"][row])
        result = results[item]
        error = str(batch["error"][row] or "")
        if int(batch["index"][row]) < 0:
            _fail(result, error or "unreadable")
            continue
        frames += 1
        result.frames += 1
        result.faces_swapped += int(batch["faces_swapped"][row]) if "faces_swapped" in batch else 0
        if error:
            result.frames_failed += 1
            if result.kind == "image":
                _fail(result, error)
            elif not result.error:
                result.error = error  # the first failed frame's message, for the item's report
        elif result.kind == "image":
            result.status = "done"  # the encode stage wrote it before returning the row
        key = (item, int(batch["segment"][row]))
        if seen.get(key, 0) >= 0:
            seen[key] = seen.get(key, 0) + 1
    for name in names:
        if f"busy_ms_{name}" in batch:
            report.stages[name].busy_s += float(batch[f"busy_ms_{name}"].sum()) / 1000.0
            report.stages[name].idle_s += float(batch[f"idle_ms_{name}"].sum()) / 1000.0
    return frames


def _collect_finished(finishing: dict[Any, SegmentKey], videos: Mapping[int, _Video], results: list[ItemResult],
                      items: Sequence[JobItem], metadata: Mapping[str, str], *, block: bool) -> None:
    """Gather finished segments; join a video once all its segments are written."""
    while finishing:
        ready, _ = ray.wait(list(finishing), num_returns=1 if block else len(finishing),
                            timeout=None if block else 0)
        if not ready:
            return
        for ref in ready:
            key = finishing.pop(ref)
            video = videos[key[0]]
            result = results[key[0]]
            try:
                path, _ = ray.get(ref)
                video.finished[key[1]] = path
            except Exception as exc:
                _fail(result, exc)
                continue
            if len(video.finished) == len(video.segments) and result.status == "pending":
                _join(video, items[key[0]], result, metadata)


def _join(video: _Video, item: JobItem, result: ItemResult, metadata: Mapping[str, str]) -> None:
    comment = f"made by fusion_ray {__version__}"
    if "fusion_ray.stand_in_models" in metadata:
        comment += f" with STAND-IN models ({metadata['fusion_ray.stand_in_models']}): not a real face swap"
    if result.frames != video.frame_count:
        _fail(result, f"processed {result.frames} of {video.frame_count} frames")
        return
    if result.frames_failed == result.frames:
        # Nothing was swapped: writing the unchanged clip would make a re-run skip it.
        _fail(result, f"every frame failed ({result.frames_failed} of {result.frames}); first: {result.error}")
        return
    paths = [Path(video.finished[s.index]) for s in video.segments]
    try:
        join_segments(paths, item.output.expanduser().resolve(), fps=video.info.fps,
                      audio_source=item.target if video.info.has_audio else None, metadata={"comment": comment})
    except FusionRayError as exc:
        _fail(result, exc)
        return
    result.status = "done"
    if result.frames_failed:
        result.error = (f"{result.frames_failed} of {result.frames} frame(s) failed and were passed through "
                        f"unchanged; first: {result.error}")
