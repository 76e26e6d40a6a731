import numpy as np
import pytest

from fusion_ray.config import DetectorConfig, EngineConfig, RuntimeConfig
from fusion_ray.errors import ModelError
from fusion_ray.imageio import read_image
from fusion_ray.models.detector import (
    STRIDES,
    DetectorCanvases,
    ScrfdDetector,
    anchor_centers,
    decode_scrfd,
    nms,
    plan_input,
)
from fusion_ray.models.registry import get_spec
from fusion_ray.models.session import create_session


@pytest.mark.parametrize("frame_hw,cfg,model_hw,canvas,scale", [
    ((360, 640), DetectorConfig(), (None, None), (384, 640), 1.0),
    ((360, 640), DetectorConfig(canvas="square"), (None, None), (640, 640), 1.0),
    ((1080, 1920), DetectorConfig(), (None, None), (384, 640), 640 / 1920),
    ((1137, 910), DetectorConfig(), (None, None), (640, 512), 640 / 1137),
    ((100, 100), DetectorConfig(size=320), (None, None), (320, 320), 3.2),
    ((360, 640), DetectorConfig(), (640, 640), (640, 640), 1.0),
    ((3, 20000), DetectorConfig(), (None, None), (32, 640), 640 / 20000),  # under one pixel: one 32 row
    ((20000, 3), DetectorConfig(), (None, None), (640, 32), 640 / 20000),
])
def test_plan_input(frame_hw, cfg, model_hw, canvas, scale):
    plan = plan_input(frame_hw, cfg, model_hw)
    assert plan.canvas_hw == canvas
    assert plan.scale == pytest.approx(scale)
    assert plan.resized_hw[0] <= canvas[0] and plan.resized_hw[1] <= canvas[1]
    assert all(side % 32 == 0 for side in plan.canvas_hw)


def test_anchor_centers_layout():
    centers = anchor_centers((64, 96), 32)
    # 2 rows x 3 cols, 2 anchors per location, row-major, each centre repeated.
    expected = [[0, 0], [0, 0], [32, 0], [32, 0], [64, 0], [64, 0],
                [0, 32], [0, 32], [32, 32], [32, 32], [64, 32], [64, 32]]
    assert centers.tolist() == expected


def _synthetic_outputs(canvas_hw, hits):
    """Raw SCRFD-shaped outputs, zero everywhere except the anchors in ``hits``."""
    scores, boxes, kps = [], [], []
    for stride in STRIDES:
        n = (canvas_hw[0] // stride) * (canvas_hw[1] // stride) * 2
        scores.append(np.zeros((n, 1), np.float32))
        boxes.append(np.ones((n, 4), np.float32))
        kps.append(np.zeros((n, 10), np.float32))
    for stride, index, score, box, kp in hits:
        i = STRIDES.index(stride)
        scores[i][index, 0] = score
        boxes[i][index] = box
        kps[i][index] = kp
    return scores + boxes + kps


def test_decode_one_kept_box():
    canvas = (64, 64)
    # stride 16: 4x4 locations x 2 anchors; anchor 10 is location 5 -> (col 1, row 1) -> centre (16, 16).
    kp = np.array([-1, -1, 1, -1, 0, 0, -1, 1, 1, 1], np.float32)
    outputs = _synthetic_outputs(canvas, [(16, 10, 0.9, [0.5, 0.5, 1.0, 2.0], kp)])
    scores, boxes, landmarks = decode_scrfd(outputs, canvas, threshold=0.5)
    assert scores.tolist() == pytest.approx([0.9])
    assert boxes[0].tolist() == pytest.approx([8, 8, 32, 48])  # centre -/+ distance * stride
    np.testing.assert_allclose(landmarks[0], [[0, 0], [32, 0], [16, 16], [0, 32], [32, 32]])


@pytest.mark.parametrize("threshold,kept", [(0.95, 0), (0.5, 2), (0.1, 3)])
def test_decode_threshold(threshold, kept):
    canvas = (64, 64)
    outputs = _synthetic_outputs(canvas, [
        (8, 0, 0.9, [1, 1, 1, 1], np.zeros(10)),
        (32, 3, 0.6, [1, 1, 1, 1], np.zeros(10)),
        (16, 7, 0.2, [1, 1, 1, 1], np.zeros(10)),
    ])
    scores, boxes, landmarks = decode_scrfd(outputs, canvas, threshold=threshold)
    assert len(scores) == len(boxes) == len(landmarks) == kept


def test_decode_rejects_wrong_shapes():
    with pytest.raises(ModelError, match="expected 9 outputs"):
        decode_scrfd([np.zeros((1, 1))] * 6, (64, 64), 0.5)
    outputs = _synthetic_outputs((64, 64), [])
    with pytest.raises(ModelError, match="stride 8"):
        decode_scrfd(outputs, (96, 64), 0.5)


@pytest.mark.parametrize("boxes,scores,iou,expected", [
    ([[0, 0, 10, 10], [1, 1, 11, 11], [50, 50, 60, 60]], [0.9, 0.8, 0.7], 0.4, [0, 2]),
    ([[0, 0, 10, 10], [1, 1, 11, 11]], [0.5, 0.8], 0.4, [1]),
    ([[0, 0, 10, 10], [5, 0, 15, 10]], [0.9, 0.8], 0.4, [0, 1]),  # IoU 1/3 is kept
    ([[0, 0, 10, 10], [5, 0, 15, 10]], [0.9, 0.8], 0.3, [0]),
    (np.zeros((0, 4)), [], 0.4, []),
])
def test_nms(boxes, scores, iou, expected):
    keep = nms(np.asarray(boxes, np.float32), np.asarray(scores, np.float32), iou)
    assert keep.tolist() == expected


@pytest.fixture(scope="module")
def detector(scrfd_path):
    session, _ = create_session(scrfd_path, RuntimeConfig(providers=["cpu"]), cpu_budget=1)
    return ScrfdDetector(session, get_spec("scrfd_2.5g"), EngineConfig().detector)


@pytest.mark.parametrize("name,count", [("obama.jpg", 1), ("biden.jpg", 1), ("obama_and_biden.jpg", 3)])
def test_real_detector_on_shared_photos(detector, images_dir, name, count):
    frame = read_image(images_dir / name).frame
    faces = detector.detect(frame)
    assert len(faces) == count
    for face in faces:
        x1, y1, x2, y2 = face.bbox_xyxy
        lm = face.landmarks_5
        assert (lm[:, 0] >= x1).all() and (lm[:, 0] <= x2).all()
        assert (lm[:, 1] >= y1).all() and (lm[:, 1] <= y2).all()
        assert lm[0, 1] < lm[3, 1] and lm[1, 1] < lm[4, 1]  # eyes above the mouth corners
        assert lm[0, 0] < lm[1, 0]  # left eye left of the right eye (image coordinates)
        assert face.score >= 0.5


def test_real_detector_square_canvas_agrees_with_fit(scrfd_path, images_dir):
    frame = read_image(images_dir / "obama_and_biden.jpg").frame
    session, _ = create_session(scrfd_path, RuntimeConfig(providers=["cpu"]), cpu_budget=1)
    fit = ScrfdDetector(session, get_spec("scrfd_2.5g"), DetectorConfig(canvas="fit")).detect(frame)
    square = ScrfdDetector(session, get_spec("scrfd_2.5g"), DetectorConfig(canvas="square")).detect(frame)
    assert len(fit) == len(square) == 3
    for a, b in zip(sorted(fit, key=lambda f: f.bbox_xyxy[0]), sorted(square, key=lambda f: f.bbox_xyxy[0]), strict=True):
        assert np.abs(a.landmarks_5 - b.landmarks_5).max() < 6.0


def test_real_detector_no_face_is_empty(detector):
    assert detector.detect(np.full((360, 640, 3), 127, np.uint8)) == []


@pytest.mark.parametrize("hw", [(3, 20000), (20000, 3), (1, 1), (1, 5000)])
def test_real_detector_takes_extreme_aspect_ratios(detector, hw):
    """A strip that scales to under one detector pixel is placed on a 32-pixel canvas (it crashed
    in OpenCV's copyMakeBorder)."""
    assert detector.detect(np.full((*hw, 3), 127, np.uint8)) == []


def test_detector_is_not_picklable(detector):
    import pickle

    with pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps(detector)


def test_fixed_size_export_uses_its_own_canvas(scrfd_path, images_dir, tmp_path):
    """An export with a fixed 1x3x640x640 input: the detector plans its canvas from the model."""
    import onnx

    model = onnx.load(str(scrfd_path))
    dims = model.graph.input[0].type.tensor_type.shape.dim
    dims[2].ClearField("dim_param")
    dims[3].ClearField("dim_param")
    dims[2].dim_value = dims[3].dim_value = 640
    fixed = tmp_path / "scrfd_fixed.onnx"
    onnx.save(model, str(fixed))
    session, _ = create_session(fixed, RuntimeConfig(providers=["cpu"]), cpu_budget=1)
    detector = ScrfdDetector(session, get_spec("scrfd_2.5g"), DetectorConfig(canvas="fit"))
    assert detector.model_hw == (640, 640)
    frame = read_image(images_dir / "obama_and_biden.jpg").frame
    blob, plan = detector.preprocess(frame)
    assert blob.shape == (1, 3, 640, 640) and plan.canvas_hw == (640, 640)
    assert len(detector.detect(frame)) == 3


def test_detector_canvases_share_the_session_and_are_made_once(detector, images_dir):
    canvases = DetectorCanvases(detector)
    assert canvases.get() is detector and canvases.get(detector.cfg.size) is detector
    small, square = canvases.get(320), canvases.get(192, square=True)
    assert canvases.get(320) is small and canvases.get(192, square=True) is square
    assert small.session is square.session is detector.session
    assert (small.cfg.size, square.cfg.size, square.cfg.canvas) == (320, 192, "square")
    assert len(small.detect(read_image(images_dir / "obama.jpg").frame)) == 1
