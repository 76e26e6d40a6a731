"""Media and configs for the runner tests: generated clips from the shared photos, the classic
swapper (the one real swap here) and the real SCRFD detector."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import cv2
import pytest

from fusion_ray.config import (
    EngineConfig,
    LandmarkerConfig,
    MaskConfig,
    ModelsConfig,
    RuntimeConfig,
    SwapConfig,
)
from fusion_ray.imageio import read_image
from fusion_ray.jobs.config import JobConfig, LocalConfig, PipelineConfig
from fusion_ray.video import EncodeOptions, make_corrupt_video, make_test_video

NO_FACE = (10, 11, 12, 30)
FPS = Fraction(30000, 1001)


AREA_AND_MOUTH = MaskConfig(types=["box", "area"], areas=["lower-face", "mouth"], mouth_mask=True)
"""Area and mouth masks, on the REAL dlib_68 landmarker."""
OCCLUSION_AND_REGION = MaskConfig(types=["box", "occlusion", "region"], regions=["skin", "nose", "mouth"])
"""Occlusion and region masks, on xseg_1 / bisenet_resnet_34 STAND-INS."""


def engine_config(scrfd: Path, *, tracking: bool = False, masks: MaskConfig | None = None,
                  model_paths: dict[str, Path] | None = None) -> EngineConfig:
    landmarker = "dlib_68" if masks is not None and ("area" in masks.types or masks.mouth_mask) else "none"
    quality = {"masks": masks, "landmarker": LandmarkerConfig(model=landmarker)} if masks is not None else {}
    return EngineConfig(models=ModelsConfig(paths={"scrfd_2.5g": scrfd, **(model_paths or {})}),
                        runtime=RuntimeConfig(providers=["cpu"]), swap=SwapConfig(swapper="classic"),
                        tracking=tracking, **quality)  # type: ignore[arg-type]


@pytest.fixture(scope="session")
def mask_standins(tmp_path_factory) -> dict[str, Path]:  # type: ignore[no-untyped-def]
    """xseg_1 and bisenet_resnet_34 STAND-INS (generated, labelled: not the real models)."""
    from fusion_ray.models.hashes import write_hash_record
    from fusion_ray.models.standins_quality import make_quality_standin

    root = tmp_path_factory.mktemp("mask_standins")
    paths = {}
    for name in ("xseg_1", "bisenet_resnet_34"):
        paths[name] = root / f"{name}.onnx"
        paths[name].write_bytes(make_quality_standin(name).SerializeToString())
        write_hash_record(paths[name], "generated")
    return paths


def job_config(scrfd: Path, *, tracking: bool = False, segment_seconds: float = 0.5,
               masks: MaskConfig | None = None, model_paths: dict[str, Path] | None = None) -> JobConfig:
    pipeline = PipelineConfig(segment_seconds=segment_seconds, block_frames=8, progress_bars=False, writers=2,
                              encode_options=EncodeOptions(preset="ultrafast", crf=12), no_progress_timeout_s=120)
    return JobConfig(engine=engine_config(scrfd, tracking=tracking, masks=masks, model_paths=model_paths),
                     pipeline=pipeline,
                     local=LocalConfig(max_batch=4, batch_wait_ms=5))


@pytest.fixture(scope="session")
def runner_media(tmp_path_factory, images_dir):
    root = tmp_path_factory.mktemp("runner_media")
    obama = read_image(images_dir / "obama.jpg").frame
    clip = make_test_video(root / "clip.mp4", face_image=obama, n_frames=48, fps=FPS, size_wh=(320, 180),
                           no_face_frames=NO_FACE, gop=8)
    image = root / "still.png"
    cv2.imwrite(str(image), cv2.resize(obama, (320, 400)))
    return {"clip": clip, "bad": make_corrupt_video(root / "broken.mp4"), "image": image,
            "group": images_dir / "obama_and_biden.jpg", "source": images_dir / "biden.jpg"}
