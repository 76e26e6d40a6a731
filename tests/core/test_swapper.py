"""Pixel boost wired into the inswapper backend (issue 18): the crop at k x 128, every tile of every
face in one batched model call. On the inswapper STAND-IN (labelled: not a real swap)."""

from __future__ import annotations

import numpy as np
import pytest

from fusion_ray.config import EngineConfig, ModelsConfig, RuntimeConfig, SwapConfig
from fusion_ray.core.layout import swap_layout
from fusion_ray.core.modelset import ModelSet
from fusion_ray.core.swapper import InswapperBackend, swap_backend
from fusion_ray.engine import Engine
from fusion_ray.errors import ConfigError
from fusion_ray.imageio import read_image
from fusion_ray.ops.pixel_boost import merge_tiles, split_tiles

CPU = RuntimeConfig(providers=["cpu"])


def _cfg(models_config: ModelsConfig, boost: int | None) -> EngineConfig:
    return EngineConfig(models=models_config, runtime=CPU, swap=SwapConfig(pixel_boost=boost))


def test_the_swap_crop_is_at_the_pixel_boost_size(models_config) -> None:  # type: ignore[no-untyped-def]
    assert swap_layout(_cfg(models_config, None)).size == 128
    boosted = swap_layout(_cfg(models_config, 512))
    assert boosted.size == 512 and boosted.mask.shape == (512, 512)
    with pytest.raises(ConfigError, match="multiple of the model size 128"):
        swap_layout(_cfg(models_config, 384 + 64))
    with pytest.raises(ValueError, match="classic"):
        EngineConfig(swap=SwapConfig(swapper="classic", pixel_boost=256))


def test_every_tile_of_every_face_goes_in_one_call(models_config, images_dir) -> None:  # type: ignore[no-untyped-def]
    cfg = _cfg(models_config, 256)
    engine = Engine.load(cfg, cpu_budget=1)
    identity = engine.prepare_source([read_image(images_dir / "biden.jpg").frame])
    backend = swap_backend(cfg, engine.models)
    assert isinstance(backend, InswapperBackend)
    calls: list[int] = []
    model = backend.model
    plain = model.swap

    def counted(crops: np.ndarray, latents: np.ndarray) -> np.ndarray:
        calls.append(len(crops))
        return plain(crops, latents)

    rng = np.random.default_rng(0)
    crops = rng.integers(0, 256, (3, 256, 256, 3), dtype=np.uint8)
    model.swap = counted  # type: ignore[method-assign]
    out = backend.swap(crops, [identity] * 3)
    assert calls == [12]  # 3 faces x 2^2 tiles, one call
    latent = backend.latent(identity)
    expected = merge_tiles(plain(split_tiles(crops, 2), np.repeat(latent[None], 12, axis=0)), 2)
    assert out.shape == crops.shape and np.array_equal(out, expected)


def test_a_boosted_frame_swaps_through_the_chain(models_config, images_dir) -> None:  # type: ignore[no-untyped-def]
    frame = read_image(images_dir / "obama_and_biden.jpg").frame
    results = []
    for boost in (None, 256):
        engine = Engine(_cfg(models_config, boost), ModelSet.load(_cfg(models_config, boost), cpu_budget=1))
        identity = engine.prepare_source([read_image(images_dir / "biden.jpg").frame])
        result = engine.process_frame(frame, identity)
        assert result.faces_swapped == 3
        results.append(result.frame)
    assert not np.array_equal(results[0], results[1]) and not np.array_equal(results[1], frame)


def test_the_swapper_weight_balances_each_face_against_its_own(models_config, images_dir) -> None:  # type: ignore[no-untyped-def]
    from fusion_ray.core.steps import Chain
    from fusion_ray.ops.source_weight import balance_embedding

    frame = read_image(images_dir / "obama_and_biden.jpg").frame
    source = read_image(images_dir / "biden.jpg").frame
    assert "target_embed" not in Chain.of(_cfg(models_config, None)).names  # 0.5: the source unchanged
    weighted = EngineConfig(models=models_config, runtime=CPU, swap=SwapConfig(weight=0.0))
    assert Chain.of(weighted).names.index("target_embed") == Chain.of(weighted).names.index("align") + 1
    engine = Engine.load(weighted, cpu_budget=1)
    identity = engine.prepare_source([source])
    backend = engine.backend
    assert isinstance(backend, InswapperBackend)
    targets = np.random.default_rng(1).normal(size=(2, 512)).astype(np.float32)
    latents = backend.balanced_latents([identity, identity], targets)
    assert identity.embedding is not None
    assert np.allclose(latents[1], backend.model.latent(balance_embedding(identity.embedding, targets[1], 0.0)))
    assert not np.allclose(latents[0], backend.latent(identity))
    plain = Engine.load(_cfg(models_config, None), cpu_budget=1)
    assert not np.array_equal(engine.process_frame(frame, identity).frame,
                              plain.process_frame(frame, plain.prepare_source([source])).frame)
