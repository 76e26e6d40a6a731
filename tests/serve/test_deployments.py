"""The split placement's deployments with per-request options, their classes called in-process
(no Ray): a swap batch mixing requests with different options swaps each as its options' chain does."""

from __future__ import annotations

import numpy as np

from fusion_ray.config import EngineConfig, RuntimeConfig, SwapConfig
from fusion_ray.core.layout import swap_layout
from fusion_ray.core.swapper import ClassicBackend
from fusion_ray.facefusion_options import NO_OPTIONS, FaceFusionOptions, configured
from fusion_ray.serve.deployments import SwapperDeployment
from fusion_ray.serve.settings import ServeSettings
from fusion_ray.types import SourceIdentity


def test_a_swap_batch_runs_each_request_with_its_own_options(models_config):
    cfg = EngineConfig(models=models_config, runtime=RuntimeConfig(providers=["cpu"]), swap=SwapConfig(swapper="classic"))
    settings = ServeSettings.model_validate({"engine": cfg.model_dump(mode="json")})
    swapper = SwapperDeployment.func_or_class(settings)
    rng = np.random.default_rng(0)
    size = swap_layout(cfg).size
    identity = SourceIdentity(None, None, rng.integers(0, 256, (size, size, 3), np.uint8), 1)
    crops = [rng.integers(0, 256, (n, size, size, 3), np.uint8) for n in (1, 2, 1)]
    blurred = FaceFusionOptions(face_mask_blur=0.9)
    options = [NO_OPTIONS, blurred, NO_OPTIONS]
    results = swapper._swap_batch(crops, [identity] * 3, ["a", "b", "c"], options)
    for crop, wanted, result in zip(crops, options, results, strict=True):
        backend = ClassicBackend(swap_layout(configured(cfg, wanted)))
        assert result["error"] == "" and np.array_equal(result["crops"], backend.swap(crop, [identity] * len(crop)))
    plain = ClassicBackend(swap_layout(cfg)).swap(crops[1], [identity] * 2)
    assert not np.array_equal(results[1]["crops"], plain)  # the blur reached the classic swap's mask
    assert results[0]["batch"]["requests"] == 3
