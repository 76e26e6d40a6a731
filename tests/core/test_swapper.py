"""The swap backends: pixel boost on the inswapper (the crop at k x 128, every tile of every
face in one batched model call), and every other swapper row through SpecBackend. On STAND-INs
(labelled: not real swaps)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from fusion_ray.config import EngineConfig, ModelsConfig, RuntimeConfig, SwapConfig
from fusion_ray.core.layout import swap_layout
from fusion_ray.core.lru import LockedLru
from fusion_ray.core.modelset import ModelSet
from fusion_ray.core.swapper import (
    ClassicBackend,
    InswapperBackend,
    SpecBackend,
    crop_key,
    swap_backend,
)
from fusion_ray.errors import ConfigError
from fusion_ray.imageio import read_image
from fusion_ray.models.registry import get_spec
from fusion_ray.ops.color import LabSource, color_transfer
from fusion_ray.ops.pixel_boost import merge_tiles, split_tiles
from fusion_ray.ops.source_weight import balance_embedding
from fusion_ray.runners.inline import Engine
from fusion_ray.types import SourceIdentity
from tests.models.session_helpers import recording

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
        engine = Engine.load(_cfg(models_config, boost), cpu_budget=1)
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


# ---------------------------------------------------------------- every other swapper row (SpecBackend)
# On STAND-INs of the rows (labelled, not real swaps). The crop each row is cut at, from FaceFusion
# 3.8.1's model set (apart from the registry, so that a wrong row fails).
ROW_CROPS = {
    "hyperswap_1a_256": ("arcface_128", 256), "hyperswap_1b_256": ("arcface_128", 256),
    "hyperswap_1c_256": ("arcface_128", 256), "simswap_256": ("arcface_112_v1", 256),
    "simswap_unofficial_512": ("arcface_112_v1", 512), "ghost_1_256": ("arcface_112_v1", 256),
    "ghost_2_256": ("arcface_112_v1", 256), "ghost_3_256": ("arcface_112_v1", 256),
    "hififace_unofficial_256": ("mtcnn_512", 256), "blendswap_256": ("ffhq_512", 256),
    "uniface_256": ("ffhq_512", 256),
}


def _row_cfg(models_config: ModelsConfig, name: str, *, boost: int | None = None,
             weight: float = 0.5) -> EngineConfig:
    return EngineConfig(models=models_config.model_copy(update={"swapper": name}), runtime=CPU,
                        swap=SwapConfig(pixel_boost=boost, weight=weight))


def _row_engine(models_config: ModelsConfig, name: str, **kwargs: Any) -> Engine:
    cfg = _row_cfg(models_config, name, **kwargs)
    return Engine.load(cfg, cpu_budget=1)


@pytest.mark.parametrize("name", sorted(ROW_CROPS))
def test_each_row_swaps_a_frame_at_its_own_crop(rows_models_config, images_dir, name) -> None:  # type: ignore[no-untyped-def]
    engine = _row_engine(rows_models_config, name)
    backend = engine.backend
    assert isinstance(backend, SpecBackend) and backend.model.spec.name == name
    assert (backend.layout.template, backend.layout.size) == ROW_CROPS[name]
    session = recording(backend.model)
    frame = read_image(images_dir / "obama_and_biden.jpg").frame
    result = engine.process_frame(frame, engine.prepare_source([read_image(images_dir / "biden.jpg").frame]))
    assert result.faces_swapped == 3 and not np.array_equal(result.frame, frame)
    size = ROW_CROPS[name][1]
    assert session.fed("target").shape == (3, 3, size, size)  # the three faces in one call
    assert name in engine.stand_in_models


@pytest.mark.parametrize("name", ["simswap_256", "ghost_1_256", "hififace_unofficial_256"])
def test_the_converter_modelset_loads_turns_the_embedding_into_the_source(rows_models_config, images_dir,  # type: ignore[no-untyped-def]
                                                                          name) -> None:
    engine = _row_engine(rows_models_config, name)
    backend = engine.backend
    assert isinstance(backend, SpecBackend) and backend.model.converter is not None
    converter = backend.model.converter
    assert converter.spec.name == get_spec(name).converter and converter.spec.name in engine.model_info
    converter_session, swapper_session = recording(converter), recording(backend.model)
    prepared = engine.prepare_source([read_image(images_dir / "biden.jpg").frame])
    assert prepared.embedding is not None
    identity = replace(prepared, embedding=prepared.embedding * 2.0)  # off the unit sphere: normalising shows
    crops = np.random.default_rng(7).integers(0, 256, (2, 256, 256, 3), dtype=np.uint8)
    backend.swap(crops, [identity, identity])
    np.testing.assert_allclose(converter_session.fed("input"), identity.embedding[None], rtol=1e-6)  # once
    converted = converter_session.returned()[0]
    fed = swapper_session.fed("source")
    expected = converted if name.startswith("ghost") else converted / np.linalg.norm(converted)  # ghost: raw
    np.testing.assert_allclose(fed, np.stack([expected, expected]), rtol=1e-5)
    assert np.linalg.norm(fed[0]) == pytest.approx(2.0 if name.startswith("ghost") else 1.0, rel=1e-4)


def test_the_weight_balances_each_face_for_a_row(rows_models_config, images_dir) -> None:  # type: ignore[no-untyped-def]
    from fusion_ray.core.steps import Chain

    cfg = _row_cfg(rows_models_config, "hyperswap_1b_256", weight=0.0)
    assert "target_embed" in Chain.of(cfg).names
    assert "target_embed" not in Chain.of(_row_cfg(rows_models_config, "blendswap_256", weight=0.0)).names
    engine = _row_engine(rows_models_config, "hyperswap_1b_256", weight=0.0)
    backend = engine.backend
    assert isinstance(backend, SpecBackend)
    session = recording(backend.model)
    identity = engine.prepare_source([read_image(images_dir / "biden.jpg").frame])
    targets = np.random.default_rng(8).normal(size=(2, 512)).astype(np.float32)
    backend.swap(np.zeros((2, 256, 256, 3), np.uint8), [identity, identity], targets)
    assert identity.embedding is not None
    np.testing.assert_allclose(session.fed("source"), balance_embedding(np.stack([identity.embedding] * 2), targets,
                                                                        0.0), rtol=1e-5)


def test_pixel_boost_2x_on_a_row_sends_every_tile_in_one_call(rows_models_config, images_dir) -> None:  # type: ignore[no-untyped-def]
    engine = _row_engine(rows_models_config, "hyperswap_1a_256", boost=512)
    backend = engine.backend
    assert isinstance(backend, SpecBackend) and (backend.layout.template, backend.layout.size) == ("arcface_128", 512)
    session = recording(backend.model)
    identity = engine.prepare_source([read_image(images_dir / "biden.jpg").frame])
    crops = np.random.default_rng(9).integers(0, 256, (2, 512, 512, 3), dtype=np.uint8)
    out = backend.swap(crops, [identity, identity])
    assert len(session.calls) == 1 and session.fed("target").shape == (8, 3, 256, 256)  # 2 faces x 2^2 tiles
    source = backend.model.source_rows(np.stack([identity.embedding]))  # type: ignore[list-item]
    expected = merge_tiles(backend.model.swap(split_tiles(crops, 2), np.repeat(source, 8, axis=0)), 2)
    assert np.array_equal(out, expected)
    with pytest.raises(ConfigError, match="multiple of the model size 256"):
        swap_layout(_row_cfg(rows_models_config, "hyperswap_1a_256", boost=384))


def test_an_unknown_swapper_is_a_config_error_naming_the_valid_ones(rows_models_config) -> None:  # type: ignore[no-untyped-def]
    cfg = _row_cfg(rows_models_config, "hyperswap_9z_256")
    with pytest.raises(ConfigError, match="--face-swapper-model 'hyperswap_9z_256'.*hyperswap_1a_256.*uniface_256"):
        swap_layout(cfg)
    with pytest.raises(ConfigError, match="crossface_ghost.*not a registered swapper"):
        ModelSet.load(_row_cfg(rows_models_config, "crossface_ghost"), ["swapper"])


def _classic_identity(crop: np.ndarray) -> SourceIdentity:
    return SourceIdentity(embedding=None, latent=None, crop=crop, num_images=1)


def test_the_classic_backend_prepares_each_source_crop_once_and_keeps_them_apart(monkeypatch) -> None:
    """Keyed by the crop's content: an identity unpickled anew (a Serve call) finds its entry, and
    two different crops never share one."""
    import pickle

    import fusion_ray.core.swapper as swapper_module

    layout = swap_layout(EngineConfig(swap=SwapConfig(swapper="classic", classic_crop_size=64)))
    rng = np.random.default_rng(3)
    first = _classic_identity(rng.integers(0, 120, (64, 64, 3), dtype=np.uint8))
    second = _classic_identity(rng.integers(120, 256, (64, 64, 3), dtype=np.uint8))
    crops = rng.integers(0, 256, (4, 64, 64, 3), dtype=np.uint8)
    backend = ClassicBackend(layout)
    prepared: list[bytes] = []
    make = swapper_module.lab_source

    def counted(crop: np.ndarray, weight) -> LabSource:  # type: ignore[no-untyped-def]
        prepared.append(crop.tobytes())
        return make(crop, weight)

    monkeypatch.setattr(swapper_module, "lab_source", counted)
    identities = [first, second, first, second]
    out = backend.swap(crops, identities)
    out_again = backend.swap(crops, [pickle.loads(pickle.dumps(i)) for i in identities])  # copies, as in Serve
    for k, identity in enumerate(identities):  # each face with its own identity's colours
        assert identity.crop is not None
        np.testing.assert_array_equal(out[k], color_transfer(identity.crop, crops[k], layout.mask))
    assert not np.array_equal(out[0], backend.swap(crops[:1], [second])[0])
    np.testing.assert_array_equal(out_again, out)
    assert first.crop is not None and second.crop is not None
    assert prepared == [first.crop.tobytes(), second.crop.tobytes()]  # once each, over every call
    changed = first.crop.copy()
    changed[0, 0, 0] ^= 1  # one bit of one pixel: another source
    backend.swap(crops[:1], [replace(first, crop=changed)])
    assert prepared[-1] == changed.tobytes() and len(prepared) == 3


def test_the_classic_backend_keeps_at_most_max_sources() -> None:
    layout = swap_layout(EngineConfig(swap=SwapConfig(swapper="classic", classic_crop_size=64)))
    backend = ClassicBackend(layout)
    backend._sources = LockedLru(2)
    crop = np.zeros((1, 64, 64, 3), np.uint8)
    identities = [_classic_identity(np.full((64, 64, 3), k * 40, np.uint8)) for k in range(3)]
    for identity in identities:
        backend.swap(crop, [identity])
    kept = backend._sources.keys()  # least recently used first
    assert kept == [crop_key(np.full((64, 64, 3), k * 40, np.uint8)) for k in (1, 2)]
