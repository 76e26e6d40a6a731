"""The in-process stream backend with FaceFusion's options in the start message: checked at open,
run per frame, and dropped by the ladder's level 1 (model masks and pixel boost off).

The occluder is a labelled STAND-IN (generated here); the swap is the classic one with the real
SCRFD detector. Only pixels of two paths are compared: no output is presented as a real mask.
"""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from fusion_ray.config import EngineConfig, RuntimeConfig, SwapConfig
from fusion_ray.core.facefusion_options import configured
from fusion_ray.imageio import read_image
from fusion_ray.live.backend import FramePlan, StreamRefused
from fusion_ray.live.local import EngineBackend
from fusion_ray.live.protocol import StartMessage
from fusion_ray.models.hashes import write_hash_record
from fusion_ray.models.standins_quality import build_quality_standins
from fusion_ray.runners.inline import Engine


@pytest.fixture(scope="module")
def engine(models_config, tmp_path_factory):
    directory = tmp_path_factory.mktemp("quality_standins")
    written = build_quality_standins(directory)
    write_hash_record(written["xseg_1"], "generated")
    models = models_config.model_copy(update={"paths": {**models_config.paths, "xseg_1": written["xseg_1"]}})
    cfg = EngineConfig(models=models, runtime=RuntimeConfig(providers=["cpu"]), swap=SwapConfig(swapper="classic"))
    loading = cfg.model_copy(update={"masks": cfg.masks.model_copy(update={"types": ["box", "occlusion"]})})
    loaded = Engine.load(loading, components=["detector", "occluder"], cpu_budget=1)
    return Engine(cfg, loaded.models)


@pytest.fixture(scope="module")
def backend(engine, images_dir):
    backend = EngineBackend(engine)
    backend.source = backend.add_source(read_image(images_dir / "obama.jpg").frame)
    return backend


def test_a_stream_runs_its_options_and_level_1_drops_the_model_masks(backend, engine, images_dir):
    start = StartMessage.model_validate({"source_id": backend.source, "face_mask_types": "box occlusion",
                                         "face_mask_blur": 0.5})
    processor = asyncio.run(backend.open(start))
    frame = read_image(images_dir / "biden.jpg").frame
    identity = backend.sources.get(backend.source)
    full = processor.process_sync(frame, FramePlan(seq=0, level=0, enhance=False))
    light = processor.process_sync(frame, FramePlan(seq=1, level=1, enhance=False, costly=False))
    expected_full = Engine(configured(engine.cfg, start.facefusion), engine.models).process_frame(frame, identity)
    box_only = start.facefusion.model_copy(update={"face_mask_types": ("box",)})
    expected_light = Engine(configured(engine.cfg, box_only), engine.models).process_frame(frame, identity)
    assert np.array_equal(full.frame, expected_full.frame) and np.array_equal(light.frame, expected_light.frame)
    assert not np.array_equal(full.frame, light.frame)  # the occlusion mask ran at level 0 only
    assert light.faces_detected == full.faces_detected == 1


@pytest.mark.parametrize(("options", "words"), [
    ({"face_swapper_model": "inswapper_128"}, "runs 'classic'"),
    ({"face_mask_types": ["area"]}, "68 points"),
    ({"face_mask_types": ["region"]}, "parser"),
    ({"face_enhancer_blend": 50}, "no enhancer"),
])
def test_options_the_engine_cannot_run_refuse_the_stream(backend, options, words):
    start = StartMessage.model_validate({"source_id": backend.source, **options})
    with pytest.raises(StreamRefused) as refused:
        asyncio.run(backend.open(start))
    assert refused.value.close_code == 1003 and words in refused.value.message


def _levels_0_and_1(backend, images_dir):
    """A stream of obama on biden.jpg: its processor, the frame, the identity, and the frame
    processed at level 0 and at level 1 (masks off)."""
    source = backend.add_source(read_image(images_dir / "obama.jpg").frame)
    processor = asyncio.run(backend.open(StartMessage(source_id=source)))
    frame = read_image(images_dir / "biden.jpg").frame
    full = processor.process_sync(frame, FramePlan(seq=0, level=0, enhance=False))
    light = processor.process_sync(frame, FramePlan(seq=1, level=1, enhance=False, costly=False))
    return processor, frame, backend.sources.get(source), full, light


def test_level_1_runs_without_the_pixel_boost_of_the_command_line(models_config, images_dir):
    """``fusion-ray live --face-swapper-pixel-boost 256`` puts the boost in the engine's config (not
    in the start message): level 1 swaps at the model's own size (128) all the same. The inswapper
    is a labelled STAND-IN: only the pixels of two paths are compared."""
    cfg = EngineConfig(models=models_config, runtime=RuntimeConfig(providers=["cpu"]), swap=SwapConfig(pixel_boost=256))
    engine = Engine.load(cfg, cpu_budget=1)
    processor, frame, identity, full, light = _levels_0_and_1(EngineBackend(engine), images_dir)
    unboosted = cfg.model_copy(update={"swap": cfg.swap.model_copy(update={"pixel_boost": None})})
    assert processor.costly and processor.light.face_swapper_pixel_boost == "128x128"
    assert np.array_equal(light.frame, Engine(unboosted, engine.models).process_frame(frame, identity).frame)
    assert np.array_equal(full.frame, engine.process_frame(frame, identity).frame)
    assert not np.array_equal(full.frame, light.frame)  # the boost ran at level 0 only


def test_a_default_occlusion_mask_is_dropped_at_level_1(engine, images_dir):
    """The host's config (a service default) has the occlusion mask, the start message no mask
    types: the stream is costly (it does not skip level 1) and level 1 pastes through the box only."""
    occluding = engine.cfg.model_copy(update={"masks": engine.cfg.masks.model_copy(update={"types": ["box", "occlusion"]})})
    processor, frame, identity, full, light = _levels_0_and_1(EngineBackend(Engine(occluding, engine.models)), images_dir)
    assert processor.costly and processor.light.face_mask_types == ("box",)
    assert np.array_equal(light.frame, engine.process_frame(frame, identity).frame)  # engine: box only
    assert not np.array_equal(full.frame, light.frame)


def test_select_reference_streams_take_the_configured_reference_face(engine, images_dir):
    """``fusion-ray live`` with the engine's selection ``reference``: the reference photo's face is
    embedded once and a stream that names no selection selects by it (its frames do not fail; the
    embedder is a STAND-IN, so which face matches is not checked)."""
    from fusion_ray.config import SelectionConfig

    cfg = engine.cfg.model_copy(update={"selection": SelectionConfig(mode="reference",
                                                                     reference_path=images_dir / "biden.jpg")})
    backend = EngineBackend(Engine(cfg, Engine.load(cfg, components=["detector", "embedder"], cpu_budget=1).models))
    source_id = backend.add_source(read_image(images_dir / "obama.jpg").frame)
    processor = asyncio.run(backend.open(StartMessage(source_id=source_id)))
    assert processor.selection.mode == "reference" and processor.selection.reference is not None
    frame = read_image(images_dir / "obama_and_biden.jpg").frame
    done = processor.process_sync(frame, FramePlan(seq=0, level=0, enhance=False))
    assert done.faces_detected == 3 and len(done.landmarks) <= 1  # at most the reference's face
