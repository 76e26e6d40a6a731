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
from fusion_ray.pipeline.config import JobConfig, LocalConfig, PipelineConfig
from fusion_ray.video import EncodeOptions, make_corrupt_video, make_test_video

NO_FACE = (10, 11, 12, 30)
FPS = Fraction(30000, 1001)


AREA_AND_MOUTH = MaskConfig(types=["box", "area"], areas=["lower-face", "mouth"], mouth_mask=True)
"""Area and mouth masks (issue 18), on the REAL dlib_68 landmarker."""


def engine_config(scrfd: Path, *, tracking: bool = False, masks: MaskConfig | None = None) -> EngineConfig:
    quality = {"masks": masks, "landmarker": LandmarkerConfig(model="dlib_68")} if masks is not None else {}
    return EngineConfig(models=ModelsConfig(paths={"scrfd_2.5g": scrfd}), runtime=RuntimeConfig(providers=["cpu"]),
                        swap=SwapConfig(swapper="classic"), tracking=tracking, **quality)


def job_config(scrfd: Path, *, tracking: bool = False, segment_seconds: float = 0.5,
               masks: MaskConfig | None = None) -> JobConfig:
    pipeline = PipelineConfig(segment_seconds=segment_seconds, block_frames=8, progress_bars=False, writers=2,
                              encode_options=EncodeOptions(preset="ultrafast", crf=12), no_progress_timeout_s=120)
    return JobConfig(engine=engine_config(scrfd, tracking=tracking, masks=masks), pipeline=pipeline,
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
