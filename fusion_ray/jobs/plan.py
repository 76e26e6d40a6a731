"""The job planner: items in, a plan out (no Ray here). ``plan_job`` runs on the driver before
anything runs and plans the first ``plan_on_driver`` items there; ``plan_item`` plans the
others in the job's Ray tasks (:mod:`fusion_ray.runners.ray.stream`).

Per item the plan says what it is (an image or a video), what the read tasks decode (a video's
keyframe segments, an image's size from its header), how many frames the pipeline delivers,
and whether the item runs, is skipped (its output exists and ``force`` is off) or has already
failed: a target that is missing or cannot be read, an output outside the output root or that
is one of its inputs (through links, even with ``force``), a video output not named
.mp4/.m4v/.mov, a frame size the encoder refuses, a truncated video (unless
``allow_truncated``), engine options that are not a valid config, a model of its group that is
missing or corrupt. Items with the same engine options form a group, run as one pipeline.
What a runnable item will change is a warning: a variable frame rate (the output keeps the
timestamps), an image's format change (16-bit written as 8-bit, alpha dropped). Reading headers,
demuxing packets and locating model files is all the planner does with the files (an image
is decoded only when its header says it may change); it creates no folder and writes nothing.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from fusion_ray.animation import check_animated_output, is_animated
from fusion_ray.core.modelset import ModelInfo, inspect_models
from fusion_ray.core.steps import required_components
from fusion_ray.errors import FusionRayError, InputError, VideoError, describe_error
from fusion_ray.fsutil import check_input_file, check_not_an_input, resolve_path
from fusion_ray.imageheader import SUPPORTED_FORMATS
from fusion_ray.imageio import (
    DEFAULT_MAX_PIXELS,
    check_header,
    check_image_suffix,
    decode_image,
    format_changes,
)
from fusion_ray.jobs.config import JobConfig, with_overrides
from fusion_ray.jobs.parts import models_fingerprint, parts_folder, parts_key
from fusion_ray.jobs.report import ItemKind, ItemResult, ItemStatus, typed_error
from fusion_ray.storage import Location, Storage, StorageConfig
from fusion_ray.storage import confine as confine_location
from fusion_ray.video.encode import check_encodable, check_video_output, pix_fmt_change
from fusion_ray.video.probe import VIDEO_EXTENSIONS, VideoInfo, is_video_file, probe
from fusion_ray.video.segments import Segment, Shortfall, find_shortfall, index_packets, segments_of
from fusion_ray.video.timing import FrameTimes

log = logging.getLogger(__name__)

Input = Path | Location
"""A source or target: a local path, or a Location in a bucket (read through ``Storage``)."""
Output = Path | Location
"""An output (or the output root): a local path, or a Location in a bucket."""


@dataclass(frozen=True)
class JobItem:
    """One thing to do: faces of ``sources`` into ``target``, written to ``output``.

    ``options`` are engine-config overrides for this item (e.g. ``{"selection": {"mode":
    "largest"}}``); items with the same options run in the same pipeline.
    """

    sources: tuple[Input, ...]
    target: Input
    output: Output
    options: str = "{}"
    """JSON object of engine overrides (a string, so that items stay hashable)."""


@dataclass(frozen=True)
class ItemPlan:
    """What the job does with one item."""

    index: int
    item: JobItem
    output: Output
    """The output path, resolved (or the output's Location in a bucket)."""
    kind: ItemKind = ItemKind.UNKNOWN
    status: ItemStatus = ItemStatus.PENDING
    """``PENDING``: the item runs; ``SKIPPED`` or ``FAILED``: it does not (``error`` says why)."""
    error: str = ""
    cause: FusionRayError | None = None
    """The error that failed the item at planning (a one-item command raises it)."""
    frame_hw: tuple[int, int] = (0, 0)
    """(height, width) of its frames."""
    video: VideoInfo | None = None
    segments: tuple[Segment, ...] = ()
    shortfall: Shortfall | None = None
    """What a truncated video lacks."""
    frame_times: FrameTimes | None = None
    """A video's frame timestamps: the output keeps them (a variable frame rate, a gap)."""
    format_changes: tuple[str, ...] = ()
    """What writing the item changes (:func:`fusion_ray.imageio.format_changes` for an image,
    :func:`fusion_ray.video.encode.pix_fmt_change` for a video)."""
    frames: int = 1
    """An image's frames: more than one for an animated GIF, WebP or APNG (swapped as a whole
    by :mod:`fusion_ray.jobs.animated`, not decoded by the read tasks)."""
    pix_fmt: str = ""
    """A video's encoded pixel format, chosen from its source's (:func:`~fusion_ray.video.encode.check_encodable`)."""
    warnings: tuple[str, ...] = ()
    """What a runnable item will lose or change (a truncated video's missing frames, a
    variable frame rate, an image's format changes)."""
    fingerprints: tuple[tuple[str, str], ...] = ()
    """A video's inputs (target, sources) with their fingerprints (size with mtime or ETag)."""
    planned: bool = True
    """False for an item the planner left to a Ray task (:mod:`fusion_ray.runners.ray.stream`):
    only its index, item and output are known; it is ``PENDING`` until the task plans it."""
    parts_key: str = ""
    """A video's parts key (:func:`fusion_ray.jobs.parts.parts_key`): its group's settings
    and its inputs' fingerprints; its finished segments are kept under it for a re-run."""

    @property
    def runs(self) -> bool:
        return self.status is ItemStatus.PENDING

    @property
    def expected_frames(self) -> int:
        """Frames the read tasks deliver: a video's segment plan (from its packets; not the
        container's sample count, which also counts the frames an edit list hides), or 1."""
        return sum(s.frame_count for s in self.segments) if self.kind is ItemKind.VIDEO else self.frames

    @property
    def work_dir(self) -> Output:
        """Where a video's segment files go: its parts key's folder in the parts folder beside
        the output (in its bucket)."""
        folder = parts_folder(self.output)
        return folder / self.parts_key if self.parts_key else folder

    def result(self) -> ItemResult:
        """The item's result before it runs."""
        result = ItemResult(str(self.item.target), str(self.item.output), kind=self.kind,
                            status=self.status, error=self.error)
        if self.shortfall is not None:
            result.frames_missing = self.shortfall.frames_missing
            result.missing_from_s = round(self.shortfall.missing_from_s, 3)
        for warning in self.warnings if self.runs else ():
            result.warn(warning)
        return result


@dataclass(frozen=True)
class GroupPlan:
    """Items run as one pipeline, with their group's config."""

    cfg: JobConfig
    members: tuple[int, ...]
    models: Mapping[str, ModelInfo] = dataclasses.field(default_factory=dict)
    """What planning found of every model the group's pipeline needs (files, integrity, stand-ins)."""
    models_fingerprint: str = ""
    """The model files' identity, for the parts keys (:func:`fusion_ray.jobs.parts.models_fingerprint`)."""


@dataclass(frozen=True)
class JobPlan:
    items: tuple[ItemPlan, ...]
    groups: tuple[GroupPlan, ...]
    storage: StorageConfig = StorageConfig()
    """How the planner reached inputs in buckets; the read tasks and the join use the same."""
    output_root: Output | None = None
    force: bool = False
    """How the items left unplanned are planned (in Ray tasks)."""

    @property
    def runs(self) -> bool:
        """Whether any item runs (else no Ray is needed)."""
        return bool(self.groups)


def confine(output: Path, root: Path | None) -> Path:
    """``output`` resolved; InputError when it falls outside ``root``."""
    resolved = resolve_path(output)
    if root is not None:
        base = resolve_path(root)
        if not resolved.is_relative_to(base):
            raise InputError(f"output {output} is outside the output root {base}")
    return resolved


def resolve_output(output: Output) -> Output:
    """A local output resolved (``~``, links); an object's Location as it is. Never raises: an
    output that cannot be resolved (a symbolic-link loop) is kept absolute, and planning
    fails its item (:func:`confine`)."""
    if isinstance(output, Location):
        return output
    try:
        return resolve_path(output)
    except InputError:
        return output.expanduser().absolute()


def confine_output(output: Output, root: Output | None) -> Output:
    """``confine`` for local outputs; an output in a bucket must be under a root in a bucket,
    segment by segment (``s3://b/out2/x`` is not under ``s3://b/out``)."""
    if not isinstance(output, Location) and not isinstance(root, Location):
        return confine(output, root)
    loc = output if isinstance(output, Location) else Location.parse(output.expanduser())
    base = None if root is None else root if isinstance(root, Location) else Location.parse(root.expanduser())
    resolved = confine_location(loc, base)
    return resolved.path if resolved.is_local else resolved


def plan_job(items: Sequence[JobItem], cfg: JobConfig, *, output_root: Output | None = None,
             force: bool = False, storage: Storage | None = None, on_driver: int | None = None) -> JobPlan:
    """Plan the first ``on_driver`` items (default: the config's ``pipeline.plan_on_driver``;
    all when None is configured) here, and leave the others to Ray tasks (``planned`` False);
    group the items that may run by options. Inputs in buckets are read through ``storage``
    (default: the AWS SDK's own credential chain)."""
    storage = storage or Storage()
    limit = cfg.pipeline.plan_on_driver if on_driver is None else on_driver
    plans = [plan_item(n, item, cfg, output_root=output_root, force=force, storage=storage)
             if limit is None or n < limit else ItemPlan(n, item, resolve_output(item.output), planned=False)
             for n, item in enumerate(items)]
    members: dict[str, list[int]] = {}
    for plan in plans:
        if plan.runs:
            members.setdefault(plan.item.options, []).append(plan.index)
    groups = []
    for options, indices in members.items():
        try:
            group_cfg = with_overrides(cfg, options)
            # every model the pipeline needs: missing or corrupt, before Ray
            models = inspect_models(group_cfg.engine, required_components(group_cfg.engine))
            fingerprint = models_fingerprint(models)
            groups.append(GroupPlan(group_cfg, tuple(indices), models, fingerprint))
            for n in indices:
                plans[n] = with_parts_key(plans[n], group_cfg, fingerprint)
        except FusionRayError as exc:
            log.info("a group of %d item(s) cannot run: %s", len(indices), typed_error(exc))
            for n in indices:
                plans[n] = dataclasses.replace(plans[n], status=ItemStatus.FAILED, error=typed_error(exc), cause=exc)
    return JobPlan(tuple(plans), tuple(groups), storage.config, output_root, force)


def with_parts_key(plan: ItemPlan, cfg: JobConfig, models: str) -> ItemPlan:
    """A planned video with its parts key (its group's settings and models, its inputs' fingerprints)."""
    if plan.kind is not ItemKind.VIDEO or not plan.runs:
        return plan
    return dataclasses.replace(plan, parts_key=parts_key(plan.fingerprints, cfg, models))


def video_times(target: Input, storage: Storage) -> FrameTimes:
    """A video's frame timestamps, from its packets (what planning found; the join finds them
    again near the data, so that the driver never holds them)."""
    if isinstance(target, Location):
        with storage.open_media(target) as media:
            index = index_packets(media)
    else:
        index = index_packets(target)
    return FrameTimes(index.time_base, index.pts, index.start_pts)


def plan_item(n: int, item: JobItem, cfg: JobConfig, *, output_root: Output | None = None,
              force: bool = False, storage: Storage | None = None) -> ItemPlan:
    """One item's plan; an item that cannot run is ``SKIPPED`` or ``FAILED``, never raised."""
    storage = storage or Storage()
    plan = ItemPlan(n, item, resolve_output(item.output))
    try:
        plan = dataclasses.replace(plan, output=confine_output(item.output, output_root))
        if isinstance(item.output, Location):
            if item.output in (item.target, *item.sources):
                raise InputError(f"output {item.output} is one of the item's inputs")
        else:
            check_not_an_input(item.output, _inputs(item, cfg), what="output")  # even with force
        if _output_exists(plan.output, storage) and not force:
            return dataclasses.replace(plan, status=ItemStatus.SKIPPED)
        # a missing file, a link loop, a folder, a pipe, an empty or unreadable file, each named
        for what, path in (("", item.target), *(("source", source) for source in item.sources)):
            if not isinstance(path, Location):  # objects: by stat
                check_input_file(path, what)
        stat = storage.stat(item.target)  # a missing object or bucket, refused credentials: one line
        if stat.size == 0:  # before it is taken for an image or a video: neither reads nothing
            raise InputError(f"{item.target} is empty (0 bytes)")
        if _is_video(item.target):
            plan = dataclasses.replace(plan, kind=ItemKind.VIDEO,
                                       fingerprints=((str(item.target), stat.fingerprint),
                                                     *_source_fingerprints(item, cfg, storage)))
            check_video_output(str(plan.output))  # before any work: the output would be MP4 under another name
            return _plan_video(plan, cfg, storage)
        plan = dataclasses.replace(plan, kind=ItemKind.IMAGE)
        return _plan_image(plan, storage)
    except (FusionRayError, OSError) as exc:
        error = describe_error(exc)
        log.info("%s: %s", item.target, error)  # the item's error: the CLI prints it once
        return dataclasses.replace(plan, status=ItemStatus.FAILED, error=error,
                                   cause=exc if isinstance(exc, FusionRayError) else None)
    except Exception as exc:  # noqa: BLE001 - one item's surprise never stops the others
        error = f"cannot plan this item: {typed_error(exc)}"
        log.warning("%s: %s", item.target, error, exc_info=True)
        return dataclasses.replace(plan, status=ItemStatus.FAILED, error=error)



def _source_fingerprints(item: JobItem, cfg: JobConfig, storage: Storage) -> list[tuple[str, str]]:
    """The sources' and the reference image's fingerprints (one that cannot be read fails later,
    when it is embedded; its key then matches no earlier run's)."""
    out = []
    reference = cfg.engine.selection.reference_path
    for source in (*item.sources, *((reference,) if reference is not None else ())):
        try:
            out.append((str(source), storage.stat(source).fingerprint))
        except (FusionRayError, OSError):
            out.append((str(source), "unreadable"))
    return out


def _output_exists(output: Output, storage: Storage) -> bool:
    return storage.exists(output) if isinstance(output, Location) else output.exists()


def _inputs(item: JobItem, cfg: JobConfig) -> list[tuple[str, Path]]:
    """Every local file the item is made from, with what names it (an object in a bucket is
    never a local output)."""
    inputs = [("target", item.target), *(("source", s) for s in item.sources)]
    reference = cfg.engine.selection.reference_path
    local = [(what, p) for what, p in inputs if isinstance(p, Path)]
    return [*local, ("reference", reference)] if reference is not None else local


def _is_video(target: Input) -> bool:
    """A local file as ``is_video_file`` says; an object by its extension (no download)."""
    if isinstance(target, Location):
        return target.suffix.lower() in VIDEO_EXTENSIONS
    return is_video_file(target)


def _plan_video(plan: ItemPlan, cfg: JobConfig, storage: Storage) -> ItemPlan:
    """Probe the video, split its packets into segments, and compare them with what it declares.
    A video in a bucket is read by ranges (``Storage.open_media``), never downloaded whole."""
    target = plan.item.target
    if isinstance(target, Location):
        try:
            with storage.open_media(target) as media:
                info = probe(media)
                index = index_packets(media)
        except VideoError as exc:  # FFmpeg names the object bucket/key: lead with its URI
            raise VideoError(f"{target}: {exc}") from exc
    else:
        info = probe(target)
        index = index_packets(target)
    # the encoder opens for this size (e.g. not an odd size as yuv420p), before any work
    pix_fmt = check_encodable(info.width, info.height, cfg.pipeline.encode_options, info.pix_fmt)
    change = pix_fmt_change(info.pix_fmt, pix_fmt)
    segments = tuple(segments_of(index, cfg.pipeline.segment_seconds, str(target)))
    shortfall = find_shortfall(info, index)
    times = FrameTimes(index.time_base, index.pts, index.start_pts)
    plan = dataclasses.replace(plan, video=info, segments=segments, frame_hw=(info.height, info.width),
                               shortfall=shortfall, frame_times=times, pix_fmt=pix_fmt,
                               format_changes=(change,) if change else ())
    warnings = [f"{target}: {change}"] if change else []
    if shortfall is not None:
        if not cfg.allow_truncated:
            error = VideoError(f"{shortfall.describe(str(target))} (--allow-truncated processes the frames present)")
            return dataclasses.replace(plan, status=ItemStatus.FAILED, error=str(error), cause=error)
        warnings.append(f"{shortfall.describe(str(target))}; the frames present are processed and keep their "
                        "timestamps")
    else:
        note = times.note(info.fps)
        warnings += [f"{target}: {note}"] if note else []
    return dataclasses.replace(plan, warnings=tuple(warnings))


def _plan_image(plan: ItemPlan, storage: Storage) -> ItemPlan:
    """An image's size and format changes. Its size comes from its header; formats the header
    reader does not know (TIFF, GIF, ...), and images whose header says they may have more
    than 8 bits, an alpha channel or an EXIF orientation to apply, are decoded. InputError
    when it is not a readable image or too large."""
    path = plan.item.target
    try:
        data = storage.read_bytes(path) if isinstance(path, Location) else path.read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror or exc}") from exc
    header = check_header(data, str(path), DEFAULT_MAX_PIXELS)
    if is_animated(header):  # swapped frame by frame in a task of its own (jobs.animated)
        check_animated_output(header, plan.output.suffix, str(path))
        return dataclasses.replace(plan, frame_hw=(header.height, header.width), frames=header.frames)
    check_image_suffix(plan.output.suffix)  # an image item named .mp4: before any work, not the encoder's error
    if header.format in SUPPORTED_FORMATS and not header.may_lose_in_8_bit and header.orientation == 1:
        return dataclasses.replace(plan, frame_hw=(header.height, header.width))
    loaded = decode_image(data, str(path), DEFAULT_MAX_PIXELS)
    height, width = loaded.frame.shape[:2]
    changes = tuple(format_changes(loaded, plan.output.suffix))
    return dataclasses.replace(plan, frame_hw=(int(height), int(width)), format_changes=changes,
                               warnings=tuple(f"{path}: {change}" for change in changes))
