"""Where each video segment of a running job stands: the driver's bookkeeping, no Ray.

A segment is ``PENDING`` until its first frame comes back from the pipeline, ``RECEIVING``
while its frames come back, ``FINISHING`` once every frame has reached its writer (the driver
has asked the writer to close the segment's file), then ``DONE`` (the file is written) or
``FAILED``. A video is complete when all its segments are ``DONE``. A segment resumed from an
earlier run's parts is ``DONE`` from the start.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from fusion_ray.video.segments import Segment

SegmentKey = tuple[int, int]
"""(item, segment)."""


class SegmentState(Enum):
    PENDING = "pending"
    RECEIVING = "receiving"
    FINISHING = "finishing"
    DONE = "done"
    FAILED = "failed"


_OPEN = (SegmentState.PENDING, SegmentState.RECEIVING)


@dataclass
class _Entry:
    expected: int
    received: int = 0
    state: SegmentState = SegmentState.PENDING
    path: Path | None = None


class SegmentTracker:
    """The state of every segment of the videos of one run."""

    def __init__(self, videos: Mapping[int, Sequence[Segment]] | None = None) -> None:
        self._items: dict[int, list[int]] = {}
        self._entries: dict[SegmentKey, _Entry] = {}
        for item, segments in (videos or {}).items():
            self.add(item, segments)

    def add(self, item: int, segments: Sequence[Segment]) -> None:
        """A video's segments (frames of a segment may have come back before: they count)."""
        self._items[item] = [s.index for s in segments]
        for s in segments:
            self._entries.setdefault((item, s.index), _Entry(s.frame_count))

    def known(self, item: int) -> bool:
        """Whether the video's segments were added (its info came back)."""
        return item in self._items

    def resume(self, key: SegmentKey, path: Path) -> int:
        """A segment an earlier run wrote (its file): ``DONE`` before any frame comes back;
        returns its frame count."""
        entry = self._entries[key]
        entry.state, entry.path, entry.received = SegmentState.DONE, Path(path), entry.expected
        return entry.expected

    def state(self, key: SegmentKey) -> SegmentState:
        return self._entries[key].state

    def keys(self, item: int) -> list[SegmentKey]:
        """The item's segments, in order."""
        return [(item, index) for index in self._items[item]]

    def receive(self, counts: Mapping[SegmentKey, int],
                lengths: Mapping[SegmentKey, int] | None = None) -> list[SegmentKey]:
        """Count frames that reached their writers; returns the segments now whole (``FINISHING``).

        A segment not added yet is counted against its length in ``lengths`` (from its rows).
        Frames of a segment already finishing, written or failed are ignored.
        """
        whole = []
        for key, count in counts.items():
            if key not in self._entries:
                self._entries[key] = _Entry((lengths or {})[key])
            entry = self._entries[key]
            if entry.state not in _OPEN:
                continue
            entry.received += count
            entry.state = SegmentState.RECEIVING
            if entry.received >= entry.expected:
                entry.state = SegmentState.FINISHING
                whole.append(key)
        return whole

    def written(self, key: SegmentKey, path: Path) -> bool:
        """A writer closed the segment's file; returns whether this completes its video."""
        entry = self._entries[key]
        entry.state, entry.path = SegmentState.DONE, Path(path)
        return self.complete(key[0])

    def failed(self, key: SegmentKey) -> None:
        self._entries[key].state = SegmentState.FAILED

    def complete(self, item: int) -> bool:
        return self.known(item) and all(self._entries[key].state is SegmentState.DONE for key in self.keys(item))

    def unfinished(self, items: set[int] | None = None) -> list[SegmentKey]:
        """Segments not ``DONE`` (of ``items``, default all): open ones a writer may hold."""
        return [key for key, entry in self._entries.items()
                if entry.state is not SegmentState.DONE and (items is None or key[0] in items)]

    def paths(self, item: int) -> list[Path]:
        """The segment files of a complete video, in order."""
        if not self.complete(item):
            raise ValueError(f"item {item}: {self.progress(item)}")
        return [p for key in self.keys(item) if (p := self._entries[key].path) is not None]

    def progress(self, item: int) -> str:
        keys = self.keys(item)
        done = sum(self._entries[key].state is SegmentState.DONE for key in keys)
        return f"{done} of {len(keys)} segments written"
