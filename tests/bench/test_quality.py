"""The pixel-boost and mask benchmarks run, and both pixel-boost paths give the same pixels."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import onnxruntime as ort
import pytest

from fusion_ray.bench.mask_pictures import face_crop, make_pictures, picture_masks
from fusion_ray.bench.quality import mask_bench, pixel_boost_bench
from fusion_ray.config import DetectorConfig
from fusion_ray.models.detector import ScrfdDetector
from fusion_ray.models.landmarker import Dlib68Landmarker
from fusion_ray.models.registry import get_spec


def test_pixel_boost_bench_compares_one_call_with_batch_1_calls(tmp_path: Path) -> None:
    (row,) = pixel_boost_bench(tmp_path, sizes=(256,), faces=2, repeats=1, threads=1)
    assert row["tiles_per_face"] == 4 and row["batch1_calls"] == 8 and row["batched_calls"] == 1
    assert row["max_pixel_difference"] <= 1  # the same tiles through the same model
    assert row["batched_ms_per_face"] > 0 and row["batch1_ms_per_face"] > 0
    assert "STAND-IN" in row["model"]


def test_mask_bench_times_each_mask() -> None:
    rows = mask_bench(crop_size=64, repeats=1)
    assert {r["mask"] for r in rows} >= {"box", "mouth (Deep-Live-Cam)"}
    assert all(r["ms_per_face"] >= 0 for r in rows)



def test_mask_pictures_keep_the_target_mouth(scrfd_path: Path, images_dir: Path, tmp_path: Path) -> None:
    pytest.importorskip("dlib")
    written = make_pictures(images_dir / "obama.jpg", images_dir / "biden.jpg", scrfd_path, tmp_path)
    assert [p.name for p in written] == ["masks.png", "swaps.png"]
    assert cv2.imread(str(written[1])).shape == (200, 1000, 3)  # target, then the chain with 4 mask settings
    session = ort.InferenceSession(str(scrfd_path), providers=["CPUExecutionProvider"])
    detector = ScrfdDetector(session, get_spec("scrfd_2.5g"), DetectorConfig())
    target = face_crop(detector, Dlib68Landmarker(), images_dir / "obama.jpg", 256)
    masks = picture_masks(target)
    mouth = np.round(target.points_in_crop[48:60].mean(axis=0)).astype(int)
    nose = np.round(target.points_in_crop[30]).astype(int)
    assert masks["mouth"][mouth[1], mouth[0]] < 0.01 and masks["box"][mouth[1], mouth[0]] > 0.99
    assert masks["mouth"][nose[1], nose[0]] > 0.99 and masks["area"][nose[1], nose[0]] > 0.99
    assert masks["area"][5, 5] == 0.0 and masks["box"][128, 64] > 0.99  # the area mask leaves the background
