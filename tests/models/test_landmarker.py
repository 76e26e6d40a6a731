"""68-point landmarkers: dlib_68 (real, on the shared photos) and 2dfan4 (on its stand-in)."""

from __future__ import annotations

import sys
from pathlib import Path

import cv2
import numpy as np
import onnxruntime as ort
import pytest

from fusion_ray.config import DetectorConfig
from fusion_ray.errors import ModelMissingError
from fusion_ray.imageio import read_image
from fusion_ray.models.detector import ScrfdDetector
from fusion_ray.models.landmarker import Dlib68Landmarker, Fan68Landmarker
from fusion_ray.models.registry import get_spec
from fusion_ray.models.standins import make_standin
from fusion_ray.models.standins_quality import synthetic_face_68
from fusion_ray.ops.landmarks import alignment_points, landmarks_68_to_5


@pytest.fixture(scope="module")
def detector(scrfd_path: Path) -> ScrfdDetector:
    session = ort.InferenceSession(str(scrfd_path), providers=["CPUExecutionProvider"])
    return ScrfdDetector(session, get_spec("scrfd_2.5g"), DetectorConfig())


@pytest.fixture(scope="module")
def dlib_68() -> Dlib68Landmarker:
    pytest.importorskip("dlib")
    pytest.importorskip("face_recognition_models")
    return Dlib68Landmarker()


@pytest.mark.parametrize("name", ["obama.jpg", "biden.jpg"])
def test_dlib_68_lands_on_the_face(dlib_68: Dlib68Landmarker, detector: ScrfdDetector, images_dir: Path,
                                   name: str) -> None:
    frame = read_image(images_dir / name).frame
    faces = detector.detect(frame)
    boxes = np.stack([f.bbox_xyxy for f in faces])
    five = np.stack([f.landmarks_5 for f in faces])
    result = dlib_68.detect(frame, boxes, five)
    assert result.points.shape == (len(faces), 68, 2) and result.scores.shape == (len(faces),)
    points, box = result.points[0], boxes[0]
    margin = 0.1 * (box[2] - box[0])
    assert (points[:, 0] > box[0] - margin).all() and (points[:, 0] < box[2] + margin).all()
    assert (points[:, 1] > box[1] - margin).all() and (points[:, 1] < box[3] + margin).all()
    eyes_y = points[36:48, 1].mean()
    assert points[17:27, 1].mean() < eyes_y < points[30, 1] < points[48:68, 1].mean() < points[8, 1]
    assert points[36:42, 0].mean() < points[42:48, 0].mean()  # image-left eye first
    eye_distance = np.linalg.norm(five[0, 1] - five[0, 0])
    assert np.linalg.norm(landmarks_68_to_5(points) - five[0], axis=1).max() < 0.15 * eye_distance
    assert result.scores[0] > 0.5  # agrees with the detector: its 5 points are used for alignment


@pytest.mark.parametrize("degrees", [30.0, 45.0, -45.0])
def test_dlib_68_lands_on_a_rolled_face(dlib_68: Dlib68Landmarker, detector: ScrfdDetector, images_dir: Path,
                                        degrees: float) -> None:
    """The photo turned about the mouth: the lips are fitted where the upright fit put them, turned
    (dlib fitted a face rolled 45 degrees as it was and put the lips 0.5 mouth widths away)."""
    frame = read_image(images_dir / "obama.jpg").frame
    face = detector.detect(frame)[0]
    upright = dlib_68.detect(frame, face.bbox_xyxy[None], face.landmarks_5[None]).points[0].astype(np.float64)
    mouth = upright[48:60].mean(axis=0)
    matrix = cv2.getRotationMatrix2D((float(mouth[0]), float(mouth[1])), degrees, 1.0)
    turned = np.asarray(cv2.warpAffine(frame, matrix, (frame.shape[1], frame.shape[0]),
                                       borderMode=cv2.BORDER_REFLECT), np.uint8)
    truth = upright @ matrix[:, :2].T + matrix[:, 2]
    rolled = detector.detect(turned)[0]
    result = dlib_68.detect(turned, rolled.bbox_xyxy[None], rolled.landmarks_5[None])
    width = np.linalg.norm(truth[54] - truth[48])
    assert np.linalg.norm(result.points[0][48:60] - truth[48:60], axis=1).mean() < 0.05 * width
    assert result.scores[0] > 0.5


def test_dlib_68_batch_matches_per_frame(dlib_68: Dlib68Landmarker, detector: ScrfdDetector,
                                         images_dir: Path) -> None:
    frames = [read_image(images_dir / n).frame for n in ("obama.jpg", "biden.jpg")]
    faces = [detector.detect(f)[0] for f in frames]
    boxes = np.stack([f.bbox_xyxy for f in faces])
    five = np.stack([f.landmarks_5 for f in faces])
    batch = dlib_68.detect_batch(frames, [0, 1], boxes, five)
    for i, frame in enumerate(frames):
        single = dlib_68.detect(frame, boxes[i:i + 1], five[i:i + 1])
        np.testing.assert_array_equal(batch.points[i], single.points[0])
    empty = dlib_68.detect(frames[0], np.zeros((0, 4)), np.zeros((0, 5, 2)))
    assert empty.points.shape == (0, 68, 2)


def test_dlib_68_missing_is_a_one_line_error_with_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "dlib", None)  # import dlib now raises ImportError
    with pytest.raises(ModelMissingError) as info:
        Dlib68Landmarker()
    message = str(info.value)
    assert "\n" not in message
    assert "shape_predictor_68_face_landmarks.dat" in message and "pip install 'fusion-ray[landmarks]'" in message


@pytest.fixture(scope="module")
def fan() -> Fan68Landmarker:
    session = ort.InferenceSession(make_standin("2dfan4").SerializeToString(), providers=["CPUExecutionProvider"])
    return Fan68Landmarker(session, get_spec("2dfan4"))


def _upright_five(box: np.ndarray) -> np.ndarray:
    side = box[2] - box[0]
    return (box[:2] + landmarks_68_to_5(synthetic_face_68()) * side)[None].astype(np.float32)


def test_2dfan4_points_come_back_into_the_box(fan: Fan68Landmarker) -> None:
    assert fan.stand_in
    frame = np.full((400, 400, 3), 77, np.uint8)  # 0.3 of full brightness
    box = np.array([100.0, 80.0, 300.0, 280.0], np.float32)
    result = fan.detect(frame, box[None], _upright_five(box))
    # the stand-in puts its synthetic face where FaceFusion's crop puts the box: the box comes back
    expected = box[:2] + synthetic_face_68() * 200.0
    np.testing.assert_allclose(result.points[0], expected, atol=0.05)
    assert result.scores[0] == pytest.approx(2 * 77 / 255 / 0.9, abs=0.01)


def test_2dfan4_rotated_face_comes_back_rotated(fan: Fan68Landmarker) -> None:
    frame = np.full((400, 400, 3), 77, np.uint8)
    box = np.array([100.0, 100.0, 300.0, 300.0], np.float32)
    five = _upright_five(box)[0]
    centre = np.array([200.0, 200.0])
    turn = np.array([[0.0, -1.0], [1.0, 0.0]])  # 90 degrees (y down): the eye line points down
    turned_five = ((five - centre) @ turn.T + centre)[None].astype(np.float32)
    result = fan.detect(frame, box[None], turned_five)
    expected = ((box[:2] + synthetic_face_68() * 200.0) - centre) @ turn.T + centre
    np.testing.assert_allclose(result.points[0], expected, atol=0.05)


def test_2dfan4_dark_crop_scores_low_and_the_detector_points_stay(fan: Fan68Landmarker) -> None:
    frame = np.zeros((300, 300, 3), np.uint8)
    box = np.array([50.0, 50.0, 250.0, 250.0], np.float32)
    five = _upright_five(box)
    result = fan.detect(frame, box[None], five)
    assert result.scores[0] < 0.1  # CLAHE lifts the black crop (mean lightness < 30) only a little
    np.testing.assert_array_equal(alignment_points(five[0], result.points[0], float(result.scores[0])), five[0])


def test_2dfan4_batches_faces_of_several_frames(fan: Fan68Landmarker) -> None:
    frames = [np.full((300, 300, 3), v, np.uint8) for v in (40, 90)]
    boxes = np.array([[20, 20, 120, 120], [150, 100, 250, 200], [60, 60, 200, 200]], np.float32)
    five = np.concatenate([_upright_five(b) for b in boxes])
    batch = fan.detect_batch(frames, [0, 0, 1], boxes, five)
    for i, f in enumerate([0, 0, 1]):
        single = fan.detect(frames[f], boxes[i:i + 1], five[i:i + 1])
        np.testing.assert_allclose(batch.points[i], single.points[0], atol=1e-4)
        assert batch.scores[i] == pytest.approx(single.scores[0])
    with pytest.raises(ValueError, match="frame_index"):
        fan.detect_batch(frames, [0, 2, 1], boxes, five)
