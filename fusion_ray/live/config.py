"""Typed settings of live streams: per-replica limits, per-frame deadline, degradation ladder.

Memory bound per replica (what the limits guarantee, whatever the clients send):

- waiting frames: ``max_streams x queue_depth x max_frame_bytes`` (encoded, before decoding;
  the default 8 x 1 x 2 MB = 16 MB);
- frames being worked on: ``max_streams x stream_inflight`` of them, each at most
  ``max_frame_bytes`` encoded plus about ``6 x 3 x max_frame_pixels`` bytes decoded
  (frame, output and the model crops; default 8 x 1 x (2 MB + 37 MB) = 312 MB at the pixel cap,
  about 8 x 4 MB for 640x360 streams);
- results waiting for a slow client: ``max_streams x send_queue x max_frame_bytes``
  (8 x 2 x 2 MB = 32 MB), plus ``max_streams x max_events`` small text events;
- a message being received, which the WebSocket server buffers whole before the stream sees
  it: ``max_streams x max_message_bytes`` at worst (8 x 16 MiB = 128 MiB), for a moment: a frame
  over ``max_frame_bytes`` is dropped (``too_large``) as soon as it has arrived.

A WebRTC session's frames come decoded from its track (no encoded bytes wait): per stream, at
most ``queue_depth`` decoded frames wait, and one result per viewer waits for its encoder.

Nothing else grows with time or with a client's behaviour: latency windows are bounded
deques and per-reason counters are fixed.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

from fusion_ray.live.protocol import HEADER_SIZE

TRANSPORT_MAX_BYTES = 16 * 1024 * 1024
"""The WebSocket message cap of Serve's proxy (uvicorn's default ``ws_max_size``; Ray Serve 2.60
does not let it be set): a longer message closes the connection with 1009 (message too big)."""

LEVEL_NAMES = ("normal", "masks_off", "enhancer_off", "detect_every_k", "small_detector", "low_quality")
"""Degradation levels, in the order the ladder steps down through them."""


class _Config(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class LadderConfig(_Config):
    """When a stream steps down one degradation level and back up (with hysteresis)."""

    allowed_levels: tuple[int, ...] = Field(
        default=(0, 1, 2, 3, 4, 5),
        description="Levels the ladder may use (0 normal, 1 model masks (occlusion, region) and the "
        "stream's pixel boost off, 2 enhancer off, 3 detection every k-th frame, 4 smaller detector canvas, "
        "5 lower JPEG quality); a level left out is skipped and its degradation never applied.")
    degrade_drop_rate: float = Field(
        default=0.25, ge=0.0, le=1.0,
        description="Unhealthy when more than this share of incoming frames is dropped (stale or deadline).")
    degrade_latency: float = Field(
        default=0.8, gt=0.0, le=1.0,
        description="Unhealthy when server-side p99 latency exceeds this fraction of the stream's deadline.")
    recover_drop_rate: float = Field(default=0.05, ge=0.0, le=1.0,
                                     description="Healthy when at most this share is dropped ...")
    recover_latency: float = Field(default=0.5, gt=0.0, le=1.0,
                                   description="... and p99 is at most this fraction of the deadline.")
    degrade_after_s: float = Field(default=2.0, gt=0.0, description="Unhealthy this long: step down one level.")
    recover_after_s: float = Field(default=5.0, gt=0.0, description="Healthy this long: step up one level.")
    detect_every: int = Field(default=3, ge=2, description="Level 3: run detection on every k-th frame.")
    small_detector_size: int = Field(default=320, ge=64, description="Level 4: detector canvas (multiple of 32).")
    low_quality: int = Field(default=50, ge=1, le=100, description="Level 5: JPEG quality of results at most this.")

    @model_validator(mode="after")
    def _check(self) -> LadderConfig:
        levels = self.allowed_levels
        if 0 not in levels or any(level not in range(len(LEVEL_NAMES)) for level in levels):
            raise ValueError(f"allowed_levels must include 0 and be within 0..{len(LEVEL_NAMES) - 1}, got {levels}")
        if tuple(sorted(set(levels))) != levels:
            raise ValueError(f"allowed_levels must be increasing without repeats, got {levels}")
        if self.recover_drop_rate > self.degrade_drop_rate or self.recover_latency > self.degrade_latency:
            raise ValueError("recover thresholds must not be above the degrade thresholds (hysteresis)")
        if self.small_detector_size % 32:
            raise ValueError(f"small_detector_size must be a multiple of 32, got {self.small_detector_size}")
        return self


class IceServer(_Config):
    """A STUN or TURN server given to WebRTC peers (a TURN server relays media where the service's
    UDP ports cannot be reached, e.g. pods without host networking)."""

    urls: list[str] = Field(min_length=1, description="e.g. ['turn:turn.example.com:3478?transport=udp'].")
    username: str | None = None
    credential: str | None = None


class WebRtcConfig(_Config):
    """WebRTC sessions (WHIP ingest, WHEP playback) on a replica; their streams share the limits above."""

    ice_servers: list[IceServer] = Field(
        default_factory=list, description="STUN/TURN servers for the service's peer connections (none: host "
        "candidates only, enough where clients reach the replica's UDP ports directly).")
    max_viewers: int = Field(default=4, ge=0, description="WHEP viewers per session; more are refused (503).")


class LiveConfig(_Config):
    """Limits of live streams on one replica (see the module docstring for the memory bound)."""

    max_streams: int = Field(default=8, ge=1, description="Streams per replica; more are refused (close 1013).")
    max_streams_per_token: int | None = Field(
        default=None, ge=1, description="Streams one token may run on a replica (None: only max_streams); "
        "more are refused (close 1013, or 503 over WebRTC).")
    slots: int = Field(default=2, ge=1,
                       description="Frames processed at once on this replica, shared fairly by its streams.")
    stream_inflight: int = Field(default=1, ge=1, le=4, description="Frames of one stream processed at once.")
    queue_depth: int = Field(default=1, ge=1, le=8,
                             description="Waiting frames per stream; a newer frame replaces the oldest (stale).")
    send_queue: int = Field(default=2, ge=1, le=16,
                            description="Results waiting for a slow client; more are dropped (overload).")
    max_events: int = Field(default=64, ge=8, description="Text events waiting for a slow client (oldest lost).")
    max_frame_bytes: int = Field(default=2_000_000, ge=1024, description="Largest frame image (too_large).")
    max_message_bytes: int = Field(
        default=TRANSPORT_MAX_BYTES, ge=2048, le=TRANSPORT_MAX_BYTES,
        description="The WebSocket server's cap on one message (the in-process host's; Serve's proxy has "
        "16 MiB): a frame over max_frame_bytes but within it is dropped as too_large and the stream goes "
        "on; a longer message closes the connection with 1009. It must exceed max_frame_bytes.")
    max_frame_pixels: int = Field(default=1920 * 1080, ge=64,
                                  description="Largest frame, from its header before decoding (too_large).")
    max_fps: float = Field(default=60.0, gt=0.0,
                           description="Incoming frame rate per stream; frames above it are dropped (overload).")
    burst_frames: int = Field(default=10, ge=1, description="Frames allowed above max_fps in a burst.")
    deadline_ms: int = Field(default=300, ge=10, description="Default per-frame deadline from arrival.")
    min_deadline_ms: int = Field(default=20, ge=1, description="Smallest deadline a client may ask for.")
    max_deadline_ms: int = Field(default=5000, ge=10, description="Largest deadline a client may ask for.")
    start_timeout_s: float = Field(default=10.0, gt=0.0, description="Time to send the start message.")
    idle_timeout_s: float = Field(default=15.0, gt=0.0, description="No frame this long: the stream is closed.")
    max_session_s: float = Field(default=3600.0, gt=0.0, description="Longest stream.")
    stats_interval_s: float = Field(default=1.0, gt=0.0, description="Period of `stats` events and ladder checks.")
    work_timeout_s: float = Field(
        default=10.0, gt=0.0,
        description="A frame's work still running this long after its deadline is abandoned (a hung stage).")
    source_check_s: float = Field(
        default=0.5, gt=0.0, le=1.0,
        description="While streams are open, how often the replica checks whether their sources were "
        "deleted (their streams end with source_deleted, close 1008) or the service drains.")
    latency_window: int = Field(default=256, ge=8, description="Recent latencies kept for p50/p99.")
    ladder: LadderConfig = LadderConfig()
    webrtc: WebRtcConfig = WebRtcConfig()

    @model_validator(mode="after")
    def _check(self) -> LiveConfig:
        if not self.min_deadline_ms <= self.deadline_ms <= self.max_deadline_ms:
            raise ValueError("deadline_ms must be within [min_deadline_ms, max_deadline_ms]")
        if self.max_frame_bytes + HEADER_SIZE >= self.max_message_bytes:
            raise ValueError(f"max_frame_bytes ({self.max_frame_bytes}) plus the {HEADER_SIZE}-byte header must be "
                             f"below max_message_bytes ({self.max_message_bytes}), the transport's cap: an "
                             "oversized frame is then dropped as too_large, not the connection closed (1009)")
        return self
