"""Segment-level resume: a video's finished segments are kept in a parts folder and reused.

A video item's parts folder sits beside its output (``clip.mp4.fusion_ray_parts/``, in the
output's bucket when it is in one). Inside it, one folder per *parts key*: a hash of what the
segments are made of (the target and its fingerprint, the sources and theirs, the engine
settings, the models' files, the segment length and the encoder options). A writer puts a
segment there only once it is complete (a local file is renamed into place, an object is
published whole), so every ``segment_NNNNN.mp4`` found under the current key is reusable: a
re-run after a crash or a ``kill -9`` decodes and swaps only the segments that are missing.
A changed input or setting gives another key, and the folders of other keys are removed.
The parts folder goes when its video is joined; ``fusion-ray job --clean-parts`` removes the
ones left behind (:func:`find_parts_folders`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from fusion_ray.core.modelset import ModelInfo
from fusion_ray.pipeline.config import JobConfig
from fusion_ray.storage import Location, Storage
from fusion_ray.video.segments import Segment

log = logging.getLogger(__name__)

PARTS_SUFFIX = ".fusion_ray_parts"
SEGMENT_NAME = re.compile(r"segment_(\d{5})\.mp4")
Folder = Path | Location


def segment_name(index: int) -> str:
    """The file name of a segment in its parts folder (the writers and the resume agree)."""
    return f"segment_{index:05d}.mp4"


def parts_folder(output: Folder) -> Folder:
    """The parts folder of a video output (every key's folder is inside it)."""
    return output.with_name(output.name + PARTS_SUFFIX)


def parts_key(inputs: Sequence[tuple[str, str]], cfg: JobConfig, models: Mapping[str, ModelInfo]) -> str:
    """What the segments are made of, hashed: ``inputs`` are (name, fingerprint) of the target
    and the sources; the engine settings except ``runtime`` (threads and providers do not
    change what is swapped); the models' files (path, size and mtime); the segment length and
    the encoder options. 16 hex digits."""
    engine = cfg.engine.model_dump(mode="json", exclude={"runtime"})
    record = {
        "inputs": list(inputs),
        "engine": engine,
        "models": sorted((name, info.path, _file_fingerprint(info.path)) for name, info in models.items()),
        "segment_seconds": cfg.pipeline.segment_seconds,
        "encode": cfg.pipeline.encode_options.model_dump(mode="json"),
        "allow_truncated": cfg.allow_truncated,
    }
    text = json.dumps(record, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _file_fingerprint(path: str) -> str:
    try:
        stat = Path(path).stat()
    except OSError:
        return "missing"
    return f"{stat.st_size}:{stat.st_mtime_ns}"


def finished_segments(storage: Storage, work_dir: Folder, segments: Iterable[Segment]) -> dict[int, Folder]:
    """The planned segments whose file is in ``work_dir`` (the current key's folder), by index."""
    wanted = {s.index for s in segments}
    found: dict[int, Folder] = {}
    for location in storage.glob(_child(work_dir, "segment_*.mp4")):
        match = SEGMENT_NAME.fullmatch(location.name)
        if match and int(match.group(1)) in wanted:
            found[int(match.group(1))] = location.path if location.is_local else location
    return found


def remove_other_keys(storage: Storage, work_dir: Folder) -> int:
    """Remove the key folders beside ``work_dir`` (parts of other settings or inputs, now
    invalid); returns how many were removed."""
    folder = work_dir.parent
    stale = {loc.parent.name for loc in storage.glob(_child(folder, "*/segment_*.mp4"))} - {work_dir.name}
    stale |= _local_subfolders(folder) - {work_dir.name}
    for key in sorted(stale):
        log.info("removing parts of other settings or inputs: %s", _child(folder, key))
        storage.remove_tree(_child(folder, key))
    return len(stale)


def _local_subfolders(folder: Folder) -> set[str]:
    """A local parts folder's key folders (also those with no finished segment yet)."""
    if isinstance(folder, Location) or not folder.is_dir():
        return set()
    return {p.name for p in folder.iterdir() if p.is_dir()}


def find_parts_folders(storage: Storage, root: Folder) -> list[Folder]:
    """Every parts folder under ``root`` (a local folder or a bucket prefix), sorted."""
    if isinstance(root, Path):
        return sorted(p for p in root.rglob(f"*{PARTS_SUFFIX}") if p.is_dir())
    found: set[Location] = set()
    for location in storage.glob(root / "**" / "segment_*.mp4"):
        parts = location.key.split("/")
        for depth, name in enumerate(parts):
            if name.endswith(PARTS_SUFFIX):
                found.add(Location(location.scheme, location.bucket, "/".join(parts[:depth + 1])))
                break
    return sorted(found)


def _child(folder: Folder, name: str) -> Folder:
    return folder / name
