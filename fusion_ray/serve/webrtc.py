"""WebRTC sessions in the replica that runs the chain (the fused placement), and their pinning.

Signalling travels like any request: the WHIP ``POST`` reaches the ingress, which authorises it,
checks the query (the live start message's fields), looks up the source, checks the options
against the caps and hands the offer to a fused replica (:meth:`ReplicaWebRtc.publish`). That
replica holds the peer connection: the camera's decoded frames go straight into its
cross-stream batcher (``FusedDeployment.process``, the same ``@serve.batch`` HTTP requests and
WebSocket streams reach) and the swapped frames straight to the track's encoder. Media never
crosses Serve's proxy, the ingress or a pickle.

A session's id starts with its replica's id. ``DELETE`` and WHEP viewers go to that replica:
:class:`SessionRouter` (the fused deployment's request router) routes ``webrtc_end`` and
``webrtc_view`` calls to the replica their session id names, and every other call as Serve's
default router does. A replica that is gone has taken its sessions with it: the call then goes
anywhere and is answered "unknown session" (404).

The split placement has no replica that runs the whole chain: its ingress would hold the peer
connection and every frame would cross to the detector and swapper deployments as WebSocket
frames do, which the fused placement exists to avoid, and a second ingress replica could not be
reached for ``DELETE``. A split service answers WHIP with 501 and serves live streams over the
WebSocket (``/v1/stream``).
"""

from __future__ import annotations

import asyncio
import copy
import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

from ray.serve._private.request_router.pow_2_router import PowerOfTwoChoicesRequestRouter
from ray.serve.request_router import PendingRequest, RunningReplica

from fusion_ray.core.frames import FrameDone, FrameJob, FrameRequest
from fusion_ray.live.backend import SourceStatus
from fusion_ray.live.hub import LiveHub
from fusion_ray.live.offer import OfferError
from fusion_ray.live.protocol import StartMessage
from fusion_ray.live.whip import WebRtcHost, refusal_of
from fusion_ray.serve.live import PreparedStream, ServeStreamProcessor
from fusion_ray.serve.metrics import FlushingSink, MetricsBuffer, record_batch
from fusion_ray.serve.placement import Identity
from fusion_ray.serve.settings import ServeSettings
from fusion_ray.serve.timing import Timings

log = logging.getLogger(__name__)

PINNED_METHODS = frozenset({"webrtc_end", "webrtc_view"})
SESSION_ID = re.compile(r"^[A-Za-z0-9]{1,40}-[A-Za-z0-9]{1,40}$")
"""``<replica id>-<stream id>``."""


def session_replica(session_id: str) -> str | None:
    """The replica id a session id names (None for a malformed id)."""
    return session_id.split("-", 1)[0] if SESSION_ID.match(session_id) else None


class SessionRouter(PowerOfTwoChoicesRequestRouter):  # type: ignore[misc]
    """Serve's default router, but a call about one WebRTC session goes to the replica that holds it."""

    async def choose_replicas(self, candidate_replicas: list[RunningReplica],
                              pending_request: PendingRequest | None = None) -> list[list[RunningReplica]]:
        if pending_request is not None and pending_request.metadata.call_method in PINNED_METHODS:
            replica = session_replica(str(pending_request.args[0])) if pending_request.args else None
            pinned = [r for r in candidate_replicas if r.replica_id.unique_id == replica]
            if pinned:
                return [pinned]
        return await super().choose_replicas(candidate_replicas, pending_request)  # type: ignore[no-any-return]


SESSION_ROUTER = f"{__name__}.SessionRouter"
"""The fused deployment's request router, by import path."""


class InReplicaChain:
    """The chain as the replica's own WebRTC streams reach it: a call to its batched ``process``."""

    placement = "fused"

    def __init__(self, process: Callable[[FrameJob], Awaitable[dict[str, Any]]], metrics: MetricsBuffer) -> None:
        self.process = process
        self.metrics = metrics

    async def frame(self, t: Timings, request: FrameRequest, identity: Identity) -> FrameDone:
        """As a handle call would: the frame's follower goes as a copy and comes back updated (with
        two frames of a stream in work, each updates its own copy; the stream keeps the newest)."""
        key, who = await identity
        if request.follower is not None:
            request = replace(request, follower=copy.deepcopy(request.follower))
        result = await self.process(FrameJob(request, key, who))
        record_batch(self.metrics, "fused", result)
        done: FrameDone = result["done"]
        if done.error:
            raise ValueError(f"the chain failed: {done.error}")
        return done

    def probes(self) -> dict[str, Callable[[], Any]]:
        return {}


class _ReplicaStreams:
    """The hub's backend in the replica: the ingress authorised the stream and opened its source;
    deleted sources and draining come from the state deployment, as for the ingress' streams."""

    def __init__(self, state: Any) -> None:
        self.state = state

    def authorize(self, token: str | None) -> bool:
        return True

    async def open(self, start: StartMessage) -> ServeStreamProcessor:
        raise RuntimeError("a replica's WebRTC streams are opened with the ingress' prepared stream")

    async def source_status(self, source_ids: set[str]) -> SourceStatus:
        return await self.state.source_status.remote(sorted(source_ids))  # type: ignore[no-any-return]


class ReplicaWebRtc:
    """One fused replica's WebRTC sessions: its own hub (the stream caps, fair slots, the ladder),
    their streams' frames into ``process``, their counts flushed to the state deployment."""

    def __init__(self, settings: ServeSettings, state: Any, replica_id: str,
                 process: Callable[[FrameJob], Awaitable[dict[str, Any]]]) -> None:
        self.settings = settings
        self.replica_id = replica_id
        self.metrics = MetricsBuffer(lambda snap: state.merge_metrics.remote(snap))
        self.hub = LiveHub(settings.live, _ReplicaStreams(state), metrics=FlushingSink(self.metrics))
        self.rtc = WebRtcHost(self.hub, settings.live.webrtc)
        self.chain = InReplicaChain(process, self.metrics)
        self._flusher: asyncio.Task[None] | None = None

    async def _flush_every(self, interval_s: float) -> None:
        """The sessions' counts reach the state deployment even when no frame flows (a session's end)."""
        while True:
            await asyncio.sleep(interval_s)
            await self.metrics.flush()

    async def publish(self, offer: str, prepared: PreparedStream) -> dict[str, Any]:
        """Answer a WHIP offer here: ``{"session_id", "answer", "deadline_ms", "stand_in_models"}``,
        or ``{"refused": (status, code, detail)}``."""
        identity, start, quality, stand_ins = prepared
        if self._flusher is None:
            self._flusher = asyncio.create_task(self._flush_every(self.metrics.interval_s))

        async def opener(admitted: StartMessage) -> ServeStreamProcessor:
            return ServeStreamProcessor(self.chain, self.metrics, self.settings, identity, admitted, quality, stand_ins)

        try:
            published = await self.rtc.publish(offer, start, opener, id_prefix=f"{self.replica_id}-")
        except Exception as exc:
            refused = refusal_of(exc)
            if refused is None:
                raise
            return {"refused": refused}
        return {"session_id": published.session_id, "answer": published.answer, "deadline_ms": published.deadline_ms,
                "stand_in_models": list(published.stand_in_models)}

    async def end(self, session_id: str) -> bool:
        return await self.rtc.end(session_id)

    async def view(self, session_id: str, offer: str) -> dict[str, Any]:
        try:
            return {"answer": await self.rtc.view(session_id, offer)}
        except OfferError as exc:
            return {"refused": (exc.status, exc.code, exc.detail)}

    async def shut_down(self, timeout_s: float) -> None:
        await self.rtc.shut_down(timeout_s)
        if self._flusher is not None:
            self._flusher.cancel()
        await self.metrics.flush()
