"""The end of a video item: join its segments (with its audio) into place, or clean up.

``join_video`` checks that a video came back whole before anything is written (a failed
item leaves no output, so a re-run retries it): every planned frame was processed, and not
every frame failed. ``join_segments`` writes beside the output and renames it into place.
``cleanup`` aborts the open segments of unfinished videos, removes the parts folders of joined
videos (an unfinished one keeps its finished segments, for a re-run) and stops the writers,
whatever fails on the way.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import ray

from fusion_ray.errors import FusionRayError
from fusion_ray.pipeline.parts import parts_folder
from fusion_ray.pipeline.plan import ItemPlan
from fusion_ray.pipeline.report import ItemResult, ItemStatus
from fusion_ray.storage import Location, Storage
from fusion_ray.video.join import join_segments
from fusion_ray.video.probe import Media

log = logging.getLogger(__name__)

CLEANUP_TIMEOUT_S = 60.0
"""How long cleanup waits for a writer to abort a video's segments (then it is killed anyway)."""


def join_video(plan: ItemPlan, result: ItemResult, segment_paths: Sequence[Path], comment: str,
               storage: Storage | None = None) -> None:
    """Join a video whose segments are all written; the item is then ``done`` or ``failed``.
    A target in a bucket is the audio source through ``storage`` (read by ranges)."""
    if result.frames != plan.expected_frames:
        result.fail(f"processed {result.frames} of {plan.expected_frames} frames")
        return
    if result.frames_failed == result.frames:
        # Nothing was swapped: writing the unchanged clip would make a re-run skip it.
        result.fail(f"every frame failed ({result.frames_failed} of {result.frames}); first: {result.error}")
        return
    info = plan.video
    if info is None:
        raise ValueError(f"item {plan.index} is not a planned video")
    target = plan.item.target
    try:
        with contextlib.ExitStack() as stack:
            audio: Media | None = None
            if info.has_audio:
                audio = stack.enter_context((storage or Storage()).open_media(target)) \
                    if isinstance(target, Location) else target
            _join(plan, segment_paths, audio, comment, storage or Storage())
    except FusionRayError as exc:
        result.fail(exc)
        return
    result.status = ItemStatus.DONE
    if result.frames_failed:
        result.error = (f"{result.frames_failed} of {result.frames} frame(s) failed and were passed through "
                        f"unchanged; first: {result.error}")


def _join(plan: ItemPlan, segment_paths: Sequence[Path], audio: Media | None, comment: str,
          storage: Storage) -> None:
    """``join_segments`` into place; for an output in a bucket, the segments (in its parts
    folder there) are copied to a local folder, joined there and the result published whole."""
    info = plan.video
    assert info is not None
    if not isinstance(plan.output, Location):
        join_segments(list(segment_paths), plan.output, fps=info.fps, frame_times=plan.frame_times,
                      audio_source=audio, metadata={"comment": comment})
        return
    parts = plan.work_dir
    assert isinstance(parts, Location)
    with tempfile.TemporaryDirectory(prefix="fusion_ray_join.") as tmp:
        local = [Path(tmp) / path.name for path in segment_paths]
        for path in local:
            path.write_bytes(storage.read_bytes(parts / path.name))
        joined = Path(tmp) / f"joined{plan.output.suffix}"
        join_segments(local, joined, fps=info.fps, frame_times=plan.frame_times, audio_source=audio,
                      metadata={"comment": comment})
        storage.publish(joined, plan.output, move=True)


def cleanup(videos: Iterable[ItemPlan], results: Sequence[ItemResult], writers: Sequence[Any],
            storage: Storage | None = None) -> None:
    """Abort the open segments of unfinished videos, remove the parts folders of joined ones
    (an unfinished video's finished segments stay, for a re-run to resume), stop the writers.

    Each step is independent: a dead or stuck writer is logged and the cleanup goes on, so the
    joined videos' parts folders are always removed and an exception being handled is not replaced.
    """
    for video in videos:
        result = results[video.index]
        if result.status != ItemStatus.DONE:
            keys = [(video.index, s.index) for s in video.segments]
            for writer in writers:
                try:
                    ray.get(writer.abort.remote(keys), timeout=CLEANUP_TIMEOUT_S)
                except Exception as exc:
                    log.warning("cleanup: a writer could not abort the segments of %s: %s: %s",
                                result.target, type(exc).__name__, exc)
            log.info("%s: its finished segments are kept in %s for a re-run", result.target, video.work_dir)
        else:
            _remove_parts(video, storage or Storage())
    for writer in writers:
        try:
            ray.kill(writer)
        except Exception as exc:
            log.warning("cleanup: cannot stop a segment writer: %s: %s", type(exc).__name__, exc)


def _remove_parts(video: ItemPlan, storage: Storage) -> None:
    """Remove a joined video's parts folder, every key (local or in a bucket); a failure is
    logged, not raised."""
    folder = parts_folder(video.output)
    if not isinstance(folder, Location):
        shutil.rmtree(folder, ignore_errors=True)
        return
    try:
        storage.remove_tree(folder)
    except FusionRayError as exc:
        log.warning("cleanup: cannot remove %s: %s", folder, exc)
