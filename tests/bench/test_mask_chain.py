"""``fusion-ray bench mask-chain``: each setting runs its mask steps through the chain."""

from __future__ import annotations

from pathlib import Path

import pytest

from fusion_ray.bench.mask_chain import mask_chain_bench


def test_each_setting_runs_its_steps(scrfd_path: Path, images_dir: Path) -> None:
    pytest.importorskip("dlib")
    pytest.importorskip("face_recognition_models")
    rows = mask_chain_bench(images_dir / "obama_and_biden.jpg", images_dir / "biden.jpg", scrfd_path, repeats=1)
    steps = {row["setting"]: set(row["steps_ms"]) for row in rows}
    assert all(row["faces"] == 3 for row in rows)
    assert "landmark" not in steps["box"] and {"landmark", "area_mask", "mouth_mask"} <= steps[
        "box + area + mouth (dlib_68)"]
    assert {"occlusion_mask", "region_mask"} <= steps["box + occlusion + region (STAND-INS)"]
