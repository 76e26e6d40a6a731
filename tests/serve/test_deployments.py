"""The split placement's module functions, without Ray: a source identity for a swapper given the
source as an image is cut by the detector replica and carried through the embed batch. On
STAND-INs (labelled, not real swaps) with the real SCRFD detector."""

from __future__ import annotations

import numpy as np

from fusion_ray.config import EngineConfig, RuntimeConfig
from fusion_ray.core.modelset import ModelSet
from fusion_ray.core.swapper import swap_backend
from fusion_ray.imageio import read_image
from fusion_ray.serve.deployments import embed_batch, source_face


def test_a_crop_fed_rows_identity_is_cut_by_the_detector_and_kept_by_the_embed_batch(  # type: ignore[no-untyped-def]
        rows_models_config, images_dir) -> None:
    cfg = EngineConfig(models=rows_models_config.model_copy(update={"swapper": "uniface_256"}),
                       runtime=RuntimeConfig(providers=["cpu"]))
    detector = ModelSet.load(cfg, ["detector"])
    face = source_face(detector, cfg, read_image(images_dir / "biden.jpg").frame)
    assert face is not None and face.swap_crop is not None and face.swap_crop.shape == (256, 256, 3)
    swapper = ModelSet.load(cfg, ["swapper", "embedder"])  # as SwapperDeployment loads it
    result = embed_batch(swapper, cfg, [[face]])[0]
    identity = result["identity"]
    assert identity.crop is not None and np.array_equal(identity.crop, face.swap_crop)
    swap_backend(cfg, swapper).check_identity(identity)
    assert swapper.need_swap_model() is swapper.swapper
