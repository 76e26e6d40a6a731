"""Source identities for swappers given the source as an image (blendswap_256, uniface_256): the
identity carries the crop of the row's source template and size, cut where identities are built.
On STAND-INs (labelled, not real swaps) with the real SCRFD detector."""

from __future__ import annotations

import numpy as np
import pytest

from fusion_ray.config import EngineConfig, ModelsConfig, RuntimeConfig, SwapConfig
from fusion_ray.core import identity
from fusion_ray.core.layout import source_crop_layout
from fusion_ray.imageio import read_image
from fusion_ray.ops.align import align_face
from fusion_ray.runners.inline import Engine
from tests.models.session_helpers import recording

CPU = RuntimeConfig(providers=["cpu"])


def _cfg(models_config: ModelsConfig, swapper: str) -> EngineConfig:
    return EngineConfig(models=models_config.model_copy(update={"swapper": swapper}), runtime=CPU)


@pytest.mark.parametrize(("name", "template", "size"), [("blendswap_256", "arcface_112_v2", 112),
                                                        ("uniface_256", "ffhq_512", 256)])
def test_a_crop_fed_row_gets_the_source_crop_of_its_template(rows_models_config, images_dir, name, template,  # type: ignore[no-untyped-def]
                                                             size) -> None:
    cfg = _cfg(rows_models_config, name)
    engine = Engine.load(cfg, cpu_budget=1)
    assert engine.models.embedder is None  # the source is an image: no embedder to load
    source = read_image(images_dir / "biden.jpg").frame
    prepared = engine.prepare_source([source])
    face = identity.largest_face(engine.detect(source))
    assert face is not None and prepared.crop is not None and prepared.latent is None
    expected, _ = align_face(source, face.landmarks_5, template, size)
    assert np.array_equal(prepared.crop, expected)
    backend = engine.backend
    session = recording(backend.model)  # type: ignore[attr-defined]
    engine.process_frame(read_image(images_dir / "obama.jpg").frame, prepared)
    np.testing.assert_allclose(session.fed("source"), (expected[None, ..., ::-1] / 255.0).transpose(0, 3, 1, 2),
                               atol=1e-6)  # the identity's crop, RGB / 255, NCHW


def test_an_identity_made_for_another_swapper_fails_its_frame_not_the_batch(rows_models_config, images_dir) -> None:  # type: ignore[no-untyped-def]
    hyperswap = _cfg(rows_models_config, "hyperswap_1a_256")
    assert source_crop_layout(hyperswap) is None
    embedded = Engine.load(hyperswap, cpu_budget=1).prepare_source(
        [read_image(images_dir / "biden.jpg").frame])
    assert embedded.crop is None and embedded.embedding is not None
    blendswap = _cfg(rows_models_config, "blendswap_256")
    engine = Engine.load(blendswap, cpu_budget=1)
    with pytest.raises(ValueError, match="blendswap_256 needs a source identity with a arcface_112_v2 crop"):
        engine.backend.check_identity(embedded)


def test_classic_keeps_its_swap_crop() -> None:
    layout = source_crop_layout(EngineConfig(swap=SwapConfig(swapper="classic")))
    assert layout is not None and (layout.template, layout.size) == ("arcface_128", 256)
