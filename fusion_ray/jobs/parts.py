"""Segment-level resume: a video's finished segments are kept in a parts folder and reused.

A video item's parts folder sits beside its output (``clip.mp4.fusion_ray_parts/``, in the
output's bucket when it is in one). Inside it, one folder per *parts key*: a hash of what the
segments are made of (the target and its fingerprint, the sources and theirs, the engine
settings, the models' files, the segment length and the encoder options). A writer puts a
segment there only once it is complete (a local file is renamed into place, an object is
published whole), so every ``segment_NNNNN.mp4`` found under the current key is reusable: a
re-run after a crash or a ``kill -9`` decodes and swaps only the segments that are missing.
A changed input or setting gives another key (the folders of other keys stay until the video
is joined: a key that changed by mistake loses nothing). The parts folder, every key, goes
when its video is joined; ``fusion-ray job --clean-parts`` removes the
ones left behind (:func:`find_parts_folders`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from fusion_ray.core.modelset import ModelInfo
from fusion_ray.errors import FusionRayError
from fusion_ray.jobs.config import JobConfig
from fusion_ray.storage import Location, Storage
from fusion_ray.video.segments import Segment

log = logging.getLogger(__name__)

PARTS_SUFFIX = ".fusion_ray_parts"
SEGMENT_NAME = re.compile(r"segment_(\d{5})\.mp4")
Folder = Path | Location


@dataclass
class SegmentCounts:
    """What a segment's frames went through (kept beside its file: a resumed segment's frames
    count as the run that made them counted them)."""

    frames_failed: int = 0
    faces_swapped: int = 0
    first_error: str = ""

    def add(self, error: str, faces: int) -> None:
        self.faces_swapped += faces
        if error:
            self.frames_failed += 1
            self.first_error = self.first_error or error

    def to_json(self) -> bytes:
        return json.dumps(dataclasses.asdict(self)).encode()

    @classmethod
    def from_json(cls, data: bytes) -> SegmentCounts:
        return cls(**json.loads(data))


def counts_name(segment_file: str) -> str:
    """The counts file beside a segment file (written first: a segment file always has one)."""
    return segment_file.removesuffix(".mp4") + ".json"


@dataclass(frozen=True)
class ResumedSegment:
    """A finished segment an earlier run left: its file and its frames' counts."""

    path: str
    counts: SegmentCounts


def segment_name(index: int) -> str:
    """The file name of a segment in its parts folder (the writers and the resume agree)."""
    return f"segment_{index:05d}.mp4"


def parts_folder(output: Folder) -> Folder:
    """The parts folder of a video output (every key's folder is inside it)."""
    return output.with_name(output.name + PARTS_SUFFIX)


OUTPUT_REVISION = 2
"""Raised when the same inputs, settings and models give other pixels than before (2: the source
face aligned on a confident 68-point landmarker's points, dlib's points on rolled faces), so a
job resumed across an upgrade never joins segments of both."""


def parts_key(inputs: Sequence[tuple[str, str]], cfg: JobConfig, models: str) -> str:
    """What the segments are made of, hashed: ``inputs`` are (name, fingerprint) of the target,
    the sources and the reference image; the engine settings except ``runtime`` (threads and
    providers do not change what is swapped); ``models`` (:func:`models_fingerprint`); the
    segment length and the encoder options; :data:`OUTPUT_REVISION`. 16 hex digits."""
    record = {
        "revision": OUTPUT_REVISION,
        "inputs": list(inputs),
        "engine": cfg.engine.model_dump(mode="json", exclude={"runtime"}),
        "models": models,
        "segment_seconds": cfg.pipeline.segment_seconds,
        "encode": cfg.pipeline.encode_options.model_dump(mode="json"),
        "allow_truncated": cfg.allow_truncated,
    }
    text = json.dumps(record, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def models_fingerprint(models: Mapping[str, ModelInfo]) -> str:
    """The model files' paths, sizes and mtimes, read once on the driver (a planning task on
    another node would see its own copies)."""
    return json.dumps(sorted((name, info.path, _file_fingerprint(info.path)) for name, info in models.items()))


def _file_fingerprint(path: str) -> str:
    try:
        stat = Path(path).stat()
    except OSError:
        return "missing"
    return f"{stat.st_size}:{stat.st_mtime_ns}"


def finished_segments(storage: Storage, work_dir: Folder, segments: Iterable[Segment]) -> dict[int, ResumedSegment]:
    """The planned segments whose file (and counts file) is in ``work_dir`` (the current key's
    folder), by index."""
    wanted = {s.index for s in segments}
    found: dict[int, ResumedSegment] = {}
    for location in storage.glob(work_dir / "segment_*.mp4"):
        match = SEGMENT_NAME.fullmatch(location.name)
        if not match or int(match.group(1)) not in wanted:
            continue
        try:
            counts = SegmentCounts.from_json(storage.read_bytes(counts_name(str(location))))
        except (FusionRayError, OSError, ValueError, TypeError) as exc:  # written first: a segment without is not reused
            log.warning("not resuming %s: its counts cannot be read (%s)", location, exc)
            continue
        found[int(match.group(1))] = ResumedSegment(str(location), counts)
    return found


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

