"""A live stream's follower at level 2: which faces it re-detects on crops and which it returns."""

import numpy as np

from fusion_ray.config import TrackingConfig
from fusion_ray.core.facebatch import FaceBatch
from fusion_ray.core.tracking.redetect import RoiResult
from fusion_ray.core.tracking.tracks import FrameFaces
from fusion_ray.live.follow import StreamFollower

HW = (360, 640)


def _face(x: float, y: float, size: float = 60.0) -> tuple[np.ndarray, np.ndarray]:
    """(box, landmarks) of a frontal face whose box starts at (x, y)."""
    box = np.asarray([x, y, x + size, y + size], np.float32)
    rel = np.asarray([[0.3, 0.4], [0.7, 0.4], [0.5, 0.6], [0.35, 0.8], [0.65, 0.8]], np.float32)
    return box, rel * size + np.asarray([x, y], np.float32)


def _batch(*faces: tuple[float, float]) -> FaceBatch:
    boxes, points = zip(*(_face(x, y) for x, y in faces), strict=True)
    return FaceBatch.one_frame(np.stack(points), np.stack(boxes), np.full(len(faces), 0.9, np.float32))


def _found(follower: StreamFollower, seq: int, *faces: tuple[float, float]) -> RoiResult:
    """A crop re-detection that found ``faces`` for the tracks predicted at ``seq``, in order."""
    predictions = follower.predictions(seq, True)
    boxes, points = zip(*(_face(x, y) for x, y in faces), strict=True)
    found = FrameFaces(np.stack(boxes), np.stack(points), np.full(len(faces), 0.9, np.float32))
    return RoiResult(found, {p.track_id: 0.9 for p in predictions}, len(predictions))


def test_a_detected_face_is_followed_with_its_track_id():
    follower = StreamFollower(TrackingConfig())
    assert follower.predictions(0, True) == []  # nothing tracked yet: detect the whole frame
    follower.detected(0, _batch((100, 100)), HW)
    assert [p.track_id for p in follower.predictions(1, True)] == [0]
    assert follower.predictions(1, False) == []  # the plan asks for a full detection
    followed = follower.followed(1, _found(follower, 1, (104, 100)), HW)
    assert followed is not None and followed.track_id.tolist() == [0]
    assert abs(float(followed.bbox_xyxy[0, 0]) - 104) < 4


def test_a_face_not_found_on_its_crop_means_a_full_detection():
    follower = StreamFollower(TrackingConfig())
    follower.detected(0, _batch((100, 100)), HW)
    missed = RoiResult(FrameFaces.empty(), {0: 0.0}, 1)
    assert follower.followed(1, missed, HW) is None


def test_a_track_the_last_detection_lost_is_not_followed_nor_pasted():
    """A scene cut or a face that left: the next full detection finds the face elsewhere (a new
    track) and the old track is no longer re-detected on crops (each frame would otherwise pay a
    failed crop and a full detection until it expires) nor returned where it only is predicted."""
    follower = StreamFollower(TrackingConfig())
    follower.detected(0, _batch((100, 100), (400, 100)), HW)
    follower.detected(3, _batch((100, 100)), HW)  # the second face is gone
    assert [p.track_id for p in follower.predictions(4, True)] == [0]
    followed = follower.followed(4, _found(follower, 4, (101, 100)), HW)
    assert followed is not None and followed.track_id.tolist() == [0]  # not the held second face
    follower.detected(6, _batch((500, 250)), HW)  # a cut: the face is elsewhere
    assert [p.track_id for p in follower.predictions(7, True)] == [2]
