"""The Serve live backend over its StreamRoute (no Ray): what opening a stream asks of the service,
and that a stream's frames go to the route's placed chain."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from fusion_ray.core.frames import FrameDone
from fusion_ray.core.provenance import Provenance
from fusion_ray.live.backend import FramePlan, StreamRefused
from fusion_ray.live.protocol import StartMessage
from fusion_ray.serve.limits import ApiError
from fusion_ray.serve.live import ServeStreamBackend, StreamRoute
from fusion_ray.serve.metrics import MetricsRecorder
from fusion_ray.serve.settings import ServeSettings
from fusion_ray.types import SourceIdentity

IDENTITY = SourceIdentity(np.ones(512, np.float32) / np.sqrt(512), None, None, 1)


class EchoChain:
    """A placed chain that returns each frame inverted (what the route's chain is asked, recorded)."""

    placement = "echo"

    def __init__(self) -> None:
        self.requests: list = []

    async def frame(self, t, request, identity):
        key, who = await identity
        self.requests.append((request, key, who))
        return FrameDone(255 - request.frame, 1, np.zeros((1, 5, 2), np.float32))

    def probes(self):
        return {}


def route(chain: EchoChain, *, enhancer: bool = False, token: str | None = None,
          settings: ServeSettings | None = None) -> StreamRoute:
    async def source(t, source_id: str) -> SourceIdentity:
        if source_id != "known":
            raise ApiError(404, "unknown_source", "no such source")
        return IDENTITY

    async def provenance(t, enhance: bool, models: frozenset[str]) -> Provenance:
        return Provenance(stand_in_models=("inswapper_128",))

    async def status(t, ids):
        raise AssertionError("not asked here")

    return StreamRoute(chain, settings or ServeSettings(), MetricsRecorder(), lambda given: token is None or given == token,
                       source, provenance, status, enhancer)


def test_a_stream_is_opened_on_a_known_source_and_its_frames_go_to_the_placed_chain():
    chain = EchoChain()
    backend = ServeStreamBackend(route(chain, token="secret"))
    assert backend.authorize("secret") and not backend.authorize("wrong")
    stream = asyncio.run(backend.open(StartMessage(source_id="known", select="largest")))
    assert stream.stand_in_models == ["inswapper_128"]
    frame = np.zeros((8, 8, 3), np.uint8)
    done = asyncio.run(stream.process(frame, FramePlan(seq=3, level=0, enhance=False)))
    assert np.array_equal(done.frame, 255 - frame) and done.faces_detected == 1
    ((request, key, who),) = chain.requests
    assert who is IDENTITY and key == "stream_known" and request.selection.mode == "largest" and request.seq == 3


@pytest.mark.parametrize("source_id,enhance,code", [("missing", False, "unknown_source"),
                                                    ("known", True, "enhance_unavailable")])
def test_a_stream_is_refused_for_an_unknown_source_or_an_enhancer_the_service_lacks(source_id, enhance, code):
    backend = ServeStreamBackend(route(EchoChain()))
    with pytest.raises(StreamRefused) as refused:
        asyncio.run(backend.open(StartMessage(source_id=source_id, enhance=enhance)))
    assert refused.value.code == code


def test_the_service_defaults_model_masks_and_pixel_boost_are_dropped_at_level_1():
    """The service's engine has the occlusion mask and a pixel boost, the start message neither: the
    stream is costly (level 1 is not skipped) and its level-1 frames ask for the box mask at the
    swap model's own size (128)."""
    settings = ServeSettings.model_validate({"engine": {"masks": {"types": ["box", "occlusion"]},
                                                        "swap": {"pixel_boost": 256}},
                                             "limits": {"mask_models_allowed": ["occlusion"]}})
    chain = EchoChain()
    stream = asyncio.run(ServeStreamBackend(route(chain, settings=settings)).open(StartMessage(source_id="known")))
    assert stream.costly
    frame = np.zeros((8, 8, 3), np.uint8)
    asyncio.run(stream.process(frame, FramePlan(seq=0, level=0, enhance=False)))
    asyncio.run(stream.process(frame, FramePlan(seq=1, level=1, enhance=False, costly=False)))
    full, light = (request.options for request, _, _ in chain.requests)
    assert full.face_mask_types is None and full.face_swapper_pixel_boost is None  # the service's own
    assert light.face_mask_types == ("box",) and light.face_swapper_pixel_boost == "128x128"
    assert not asyncio.run(ServeStreamBackend(route(EchoChain())).open(StartMessage(source_id="known"))).costly


def test_a_stream_that_names_no_selection_takes_the_services():
    """As HTTP requests do (``engine.selection``); a start message's own select and index win."""
    settings = ServeSettings.model_validate({"engine": {"selection": {"mode": "index", "index": 1}}})
    chain = EchoChain()
    backend = ServeStreamBackend(route(chain, settings=settings))
    frame = np.zeros((8, 8, 3), np.uint8)
    for start in (StartMessage(source_id="known"), StartMessage(source_id="known", select="all", face_index=0)):
        asyncio.run(asyncio.run(backend.open(start)).process(frame, FramePlan(seq=0, level=0, enhance=False)))
    (default, *_), (given, *_) = chain.requests
    assert (default.selection.mode, default.selection.index) == ("index", 1)
    assert (given.selection.mode, given.selection.index) == ("all", 0)


def test_the_stream_keeps_the_follower_of_its_newest_frame_whatever_order_they_come_back_in():
    """A placement that follows the faces in another process sends back an updated copy of the
    stream's follower; with two frames in work, an older frame's copy may come back last."""
    from fusion_ray.live.follow import StreamFollower

    class CopyChain(EchoChain):
        async def frame(self, t, request, identity):
            done = await super().frame(t, request, identity)
            return FrameDone(done.frame, 1, done.landmarks, follower=StreamFollower(ServeSettings().engine.tracking))

    chain = CopyChain()
    stream = asyncio.run(ServeStreamBackend(route(chain)).open(StartMessage(source_id="known")))
    frame = np.zeros((8, 8, 3), np.uint8)
    asyncio.run(stream.process(frame, FramePlan(seq=5, level=3, enhance=False)))
    newest = stream.follower
    asyncio.run(stream.process(frame, FramePlan(seq=4, level=3, enhance=False)))  # older, back later
    assert stream.follower is newest
    asyncio.run(stream.process(frame, FramePlan(seq=6, level=3, enhance=False)))
    assert stream.follower is not newest
