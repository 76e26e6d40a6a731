"""The Ray runner's encode stage: image items written (with their alpha), failed ones not."""

import cv2
import numpy as np

from fusion_ray.jobs.writer import ImageTarget
from fusion_ray.runners.ray.datasource import pack
from fusion_ray.runners.ray.encode_stage import EncodeStage
from tests.jobs.test_writer import _frame


def _image_batch(frames, errors, targets, alphas=None, read_failed=None):
    n = len(frames)
    target = np.empty(n, dtype=object)
    target[:] = [pack(t) for t in targets]  # as the read tasks send them
    return {"frame": np.stack(frames), "item": np.arange(n), "segment": np.zeros(n, int), "index": np.zeros(n, int),
            "error": np.array(errors, dtype=object), "alpha": np.array(alphas or [b""] * n, dtype=object),
            "read_failed": np.array(read_failed or [False] * n), "image": np.ones(n, bool), "seg_start": np.zeros(n, int),
            "seg_count": np.ones(n, int), "target": target}


def test_the_encode_stage_writes_images_but_not_failed_ones(tmp_path):
    good, failed, unread = tmp_path / "good.png", tmp_path / "failed.png", tmp_path / "unread.png"
    stage = EncodeStage([])
    batch = _image_batch([_frame(3)] * 3, ["", "swap: RuntimeError: boom", "read: not an image"],
                         [ImageTarget(str(p), {}) for p in (good, failed, unread)], read_failed=[False, False, True])
    out = stage(batch)
    assert good.is_file()
    assert not failed.exists()  # else a re-run would skip the failed item
    assert not unread.exists()
    assert "frame" not in out and list(out["error"])[:2] == ["", "swap: RuntimeError: boom"]
    assert "alpha" not in out and "target" not in out  # pixels (and targets) do not go back to the driver


def test_the_encode_stage_writes_the_alpha_that_came_with_the_image(tmp_path):
    """The read task decoded the alpha plane: the stage re-attaches it (no re-read of the target)."""
    alpha = np.tile(np.arange(96, dtype=np.uint8)[None, :] * 2, (64, 1))
    outputs = [tmp_path / "a.png", tmp_path / "a.jpg"]
    stage = EncodeStage([])
    stage(_image_batch([_frame(3)] * 2, ["", ""], [ImageTarget(str(p), {"Software": "test"}) for p in outputs],
                       alphas=[alpha.tobytes()] * 2))
    written = cv2.imread(str(outputs[0]), cv2.IMREAD_UNCHANGED)
    assert written.shape == (64, 96, 4) and np.array_equal(written[..., 3], alpha)
    assert np.array_equal(written[..., :3], _frame(3))
    assert cv2.imread(str(outputs[1]), cv2.IMREAD_UNCHANGED).shape == (64, 96, 3)  # JPEG has no alpha
