"""What a host injects into the stream core: how to authorise, open a source, process a frame.

The in-process host (:mod:`fusion_ray.live.local`) implements it over an :class:`~fusion_ray.runners.inline.Engine`;
the Serve ingress implements it over its detector and swapper deployments.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from fusion_ray.core.chain import Selection
from fusion_ray.core.facefusion_options import FaceFusionOptions
from fusion_ray.core.frames import Follower, FrameRequest
from fusion_ray.errors import FusionRayError
from fusion_ray.live.protocol import StartMessage
from fusion_ray.types import Frame


class StreamRefused(FusionRayError):
    """The backend refuses a stream: sent as an ``error`` event, then the connection is closed."""

    def __init__(self, close_code: int, code: str, message: str) -> None:
        super().__init__(message)
        self.close_code = close_code
        self.code = code
        self.message = message


@dataclass(frozen=True)
class FramePlan:
    """How to process one frame, decided by the stream's degradation level.

    ``costly``: keep the stream's model masks (occlusion, region) and pixel boost, from its options
    or its host's config (off from level 1). ``enhance``: run the enhancer (asked for by the client and allowed by the level,
    off from level 2). ``landmarks`` not None: skip detection and swap the faces at these
    (N, 5, 2) landmarks (the last detected ones, level 3). ``detector_size`` not None: detect
    on this smaller canvas (level 4).
    """

    seq: int
    level: int
    enhance: bool
    landmarks: np.ndarray | None = None
    detector_size: int | None = None
    costly: bool = True

    def request(self, frame: Frame, selection: Selection, *, enhance_blend: float | None, follower: Follower,
                options: FaceFusionOptions, light: FaceFusionOptions) -> FrameRequest:
        """The chain's request for ``frame`` under this plan: a stream's ``options`` while the level
        keeps the costly ones, else its ``light`` options; its enhancer blend where it enhances."""
        return FrameRequest(frame, selection, enhance_blend if self.enhance else None, self.detector_size,
                            self.seq, self.landmarks is not None, follower, options if self.costly else light)


@dataclass(frozen=True)
class Processed:
    """A processed frame; ``landmarks`` (N, 5, 2) of the faces swapped, reused at level 3.

    A frame without a face is returned unchanged with no landmarks. A processor must never
    return a frame whose selected faces were not swapped (it raises instead).
    """

    frame: Frame
    landmarks: np.ndarray
    faces_detected: int


@dataclass(frozen=True)
class SourceStatus:
    """What the host says about open streams' sources: the ids deleted, and whether the service drains."""

    deleted: frozenset[str] = frozenset()
    draining: bool = False


class FrameProcessor(Protocol):
    """One stream's processing (holds the stream's source identity and options)."""

    @property
    def stand_in_models(self) -> list[str]: ...

    @property
    def costly(self) -> bool:
        """Whether the stream's configuration (its options over its host's config) runs a model mask
        or a pixel boost (:func:`~fusion_ray.live.ladder.is_costly`); False: level 1 is skipped."""
        ...

    async def process(self, frame: Frame, plan: FramePlan) -> Processed: ...


class StreamBackend(Protocol):
    """The host side of the stream core."""

    def authorize(self, token: str | None) -> bool:
        """Whether the start message's token is accepted (True when the host has no token)."""
        ...

    async def open(self, start: StartMessage) -> FrameProcessor:
        """The stream's processor; :class:`StreamRefused` (e.g. unknown source, close 1008)."""
        ...

    async def source_status(self, source_ids: set[str]) -> SourceStatus:
        """Which of these sources were deleted (their streams end), and whether the service drains."""
        ...


def token_matches(expected: str | None, given: str | None) -> bool:
    """Constant-time token check; no expected token accepts everything."""
    if expected is None:
        return True
    return bool(given) and hmac.compare_digest(str(given).encode(), expected.encode())
