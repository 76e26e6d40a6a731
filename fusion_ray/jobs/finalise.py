"""The end of a video item: check it came back whole and join its segments (with its audio) into
place; no Ray here (the Ray runner runs ``join_item`` as a task, the local runner in a thread).

``check_video`` runs on the driver, before anything is written (a failed item leaves no
output, so a re-run retries it): every planned frame was processed, and not every frame
failed. ``join_item`` is the body of the join task (:data:`join_task`, run near the data): it
finds the video's frame timestamps again from its packets (the driver never holds them),
joins the segments beside the output, renames or publishes it into place and removes the
parts folder.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import tempfile
from collections.abc import Sequence
from pathlib import Path

from fusion_ray.errors import FusionRayError
from fusion_ray.jobs.parts import parts_folder
from fusion_ray.jobs.plan import ItemPlan, video_times
from fusion_ray.jobs.report import ItemResult
from fusion_ray.storage import Location, Storage, StorageConfig
from fusion_ray.video.join import join_segments
from fusion_ray.video.probe import Media

log = logging.getLogger(__name__)

CLEANUP_TIMEOUT_S = 60.0
"""How long cleanup waits for a writer to abort a video's segments (then it is killed anyway)."""


def check_video(plan: ItemPlan, result: ItemResult) -> str | None:
    """Why a video whose segments are all written must not be joined (None: join it)."""
    if result.frames != plan.expected_frames:
        return f"processed {result.frames} of {plan.expected_frames} frames"
    if result.frames_failed == result.frames:
        # Nothing was swapped: writing the unchanged clip would make a re-run skip it.
        return f"every frame failed ({result.frames_failed} of {result.frames}); first: {result.error}"
    return None


def join_item(plan: ItemPlan, segment_paths: Sequence[Path], comment: str,
              storage: StorageConfig | None = None) -> None:
    """Join a video whose segments are all written into its output (FusionRayError when it
    cannot), then remove its parts folder. A target in a bucket is read by ranges."""
    store = Storage(storage)
    info = plan.video
    if info is None:
        raise ValueError(f"item {plan.index} is not a planned video")
    if plan.frame_times is None:
        plan = dataclasses.replace(plan, frame_times=video_times(plan.item.target, store))
    target = plan.item.target
    with contextlib.ExitStack() as stack:
        audio: Media | None = None
        if info.has_audio:
            audio = stack.enter_context(store.open_media(target)) if isinstance(target, Location) else target
        _join(plan, segment_paths, audio, comment, store)
    _remove_parts(plan, store)


def done_message(result: ItemResult) -> str:
    """A joined video's ``error``: how many of its frames failed (passed through), or nothing."""
    if not result.frames_failed:
        return ""
    return (f"{result.frames_failed} of {result.frames} frame(s) failed and were passed through "
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


def _remove_parts(video: ItemPlan, storage: Storage) -> None:
    """Remove a joined video's parts folder, every key (local or in a bucket); a failure is
    logged, not raised."""
    folder = parts_folder(video.output)
    try:
        storage.remove_tree(folder)
    except FusionRayError as exc:
        log.warning("cleanup: cannot remove %s: %s", folder, exc)
