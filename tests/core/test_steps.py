"""The chain declared once: its order, and a per-face step added in core/ alone reaching every runner."""

from __future__ import annotations

import asyncio
import dataclasses

import numpy as np
import pytest

from fusion_ray.config import EngineConfig, EnhanceConfig, RuntimeConfig, SwapConfig
from fusion_ray.core import steps
from fusion_ray.core.facebatch import FaceBatch, FrameBatch
from fusion_ray.core.steps import Chain, Rows, Step, Tools
from fusion_ray.imageio import read_image
from fusion_ray.runners.inline import Engine

CPU = RuntimeConfig(providers=["cpu"])


def test_the_chain_is_ordered_by_phase_and_config():
    plain = Chain.of(EngineConfig())
    assert plain.names == ["detect", "select", "align", "swap", "mask", "paste"]
    enhanced = Chain.of(EngineConfig(enhance=EnhanceConfig(enabled=True)))
    assert enhanced.names == ["detect", "select", "align", "swap", "mask", "paste", "enhance_align", "enhance",
                              "enhance_mask", "paste_enhanced"]
    assert [s.name for s in enhanced.steps if s.wants_gpu] == ["swap", "enhance"]
    assert enhanced.components(EngineConfig(enhance=EnhanceConfig(enabled=True))) == ["detector", "swapper",
                                                                                         "enhancer"]


def test_masks_combine_by_minimum():
    faces = FaceBatch.one_frame(np.zeros((2, 5, 2), np.float32))
    a = np.full((2, 4, 4), 0.5, np.float32)
    b = np.zeros((2, 4, 4), np.float32)
    b[:, :2] = 1.0
    combined = faces.with_mask(a).with_mask(b).mask
    assert combined is not None and np.array_equal(combined, np.minimum(a, b))
    assert faces.with_mask(a).take([1]).mask.shape == (1, 4, 4)


def _shut(tools: Tools, rows: Rows, batch: FrameBatch) -> FrameBatch:
    """A test's per-face mask step: every face fully masked out (nothing is pasted)."""
    if not len(batch.faces):
        return batch
    crops, _ = batch.faces.require_crops()
    return dataclasses.replace(batch, faces=batch.faces.with_mask(np.zeros(crops.shape[:3], np.float32)))


SHUT = Step("shut", "target_mask", _shut, ("crops",), ("masks",))


@pytest.fixture()
def with_shut_step(monkeypatch):
    """The step added where a new step goes: core/steps.STEPS (no runner is told)."""
    monkeypatch.setattr(steps, "STEPS", (*steps.STEPS, SHUT))


@pytest.fixture(scope="module")
def setup(models_config, images_dir):
    cfg = EngineConfig(models=models_config, runtime=CPU, swap=SwapConfig(swapper="classic"))
    frame = read_image(images_dir / "obama_and_biden.jpg").frame
    engine = Engine.load(cfg, cpu_budget=1)
    identity = engine.prepare_source([read_image(images_dir / "biden.jpg").frame])
    return cfg, frame, identity


def test_an_added_mask_step_reaches_the_inline_runner(setup, with_shut_step):
    cfg, frame, identity = setup
    engine = Engine.load(cfg, cpu_budget=1)
    assert "shut" in engine.chain.names
    result = engine.process_frame(frame, identity)
    assert result.faces_swapped == 3 and np.array_equal(result.frame, frame)  # swapped, but masked out


def test_without_it_the_faces_are_pasted(setup):
    cfg, frame, identity = setup
    result = Engine.load(cfg, cpu_budget=1).process_frame(frame, identity)
    assert result.faces_swapped == 3 and not np.array_equal(result.frame, frame)


def test_an_added_mask_step_reaches_the_ray_stages(setup, with_shut_step):
    """Without Ray: the stages the Ray runner places, called on a dict batch. The step lands in
    the detect stage and its masks travel to the paste stage in the face_mask column."""
    from fusion_ray.jobs.stages import chain_stages

    cfg, frame, identity = setup
    stages = chain_stages(cfg, {"default": identity}, cpu_budget=1)
    assert [s.name for s in stages] == ["detect", "swap", "paste"]
    assert "shut" in [step.name for step in stages[0].group.steps]
    batch = {"frame": np.stack([frame])}
    for stage in stages:
        batch = stage(batch)
    assert batch["faces_swapped"].tolist() == [3] and np.array_equal(batch["frame"][0], frame)


def test_an_added_mask_step_reaches_the_local_runner(setup, with_shut_step, images_dir, scrfd_path, tmp_path):
    from fusion_ray.runners.job import JobItem, run_job
    from tests.runners.conftest import job_config

    _, frame, _ = setup
    out = tmp_path / "out.png"
    report = run_job([JobItem((images_dir / "biden.jpg",), images_dir / "obama_and_biden.jpg", out)],
                     job_config(scrfd_path), output_root=tmp_path, runner="local")
    assert report.items[0].status == "done" and report.items[0].faces_swapped == 3
    assert np.array_equal(read_image(out).frame, frame)  # swapped, but masked out
    assert "shut" in report.stages


def test_an_added_mask_step_reaches_the_live_in_process_backend(setup, with_shut_step):
    """``fusion-ray live`` without a server: the stream backend over FrameChain, full detection
    (level 2) and faces followed on crops (level 3, given to the chain)."""
    from fusion_ray.live.backend import FramePlan
    from fusion_ray.live.local import EngineBackend
    from fusion_ray.live.protocol import StartMessage

    cfg, frame, _ = setup
    backend = EngineBackend(Engine.load(cfg, cpu_budget=1))
    source = backend.add_source(frame)
    stream = asyncio.run(backend.open(StartMessage(source_id=source)))
    detected = stream.process_sync(frame, FramePlan(seq=0, level=2, enhance=False))
    followed = stream.process_sync(frame, FramePlan(seq=1, level=3, enhance=False, landmarks=detected.landmarks))
    assert stream.follower.crops  # the second frame's faces were re-detected on crops
    for done in (detected, followed):
        assert done.faces_detected == 3 and len(done.landmarks) == 3
        assert np.array_equal(done.frame, frame)  # swapped, but masked out


def test_an_added_mask_step_reaches_the_fused_serve_placement(setup, with_shut_step, models_config):
    """The fused Serve deployment's batch (its class called in-process: a monkeypatch does not
    reach a Ray replica); one batch of two frames, one of them enhanced."""
    from fusion_ray.core import chain
    from fusion_ray.core.frames import FrameJob, FrameRequest
    from fusion_ray.serve.fused import FusedDeployment
    from fusion_ray.serve.settings import ServeSettings

    cfg, frame, identity = setup
    settings = ServeSettings.model_validate({
        "engine": cfg.model_dump(mode="json"),
        "deployments": {"fused": {"cpu_budget": 1}, "enhancer_enabled": True}})
    fused = FusedDeployment.func_or_class(settings)
    jobs = [FrameJob(FrameRequest(frame, chain.Selection("all")), "b", identity),
            FrameJob(FrameRequest(frame, chain.Selection("all"), enhance_blend=1.0), "b", identity)]
    plain, enhanced = (result["done"] for result in fused._process_batch(jobs))
    assert plain.error == enhanced.error == "" and plain.faces_swapped == enhanced.faces_swapped == 3
    assert np.array_equal(plain.frame, frame)  # swapped, but masked out
    engine = Engine(cfg.model_copy(update={"enhance": EnhanceConfig(enabled=True, blend=1.0)}), fused.models)
    assert "shut" in engine.chain.names  # the engine's chain with the same step and enhancement
    assert np.array_equal(enhanced.frame, engine.process_frame(frame, identity).frame)


def test_steps_are_written_in_run_order():
    """STEPS reads as the chain runs: ordering by phase moves no step."""
    phases = [steps.PHASES.index(s.phase) for s in steps.STEPS]
    assert phases == sorted(phases)
    every = EngineConfig(enhance=EnhanceConfig(enabled=True))
    assert Chain.of(every).names == [s.name for s in steps.STEPS if s.enabled(every)]


def test_the_models_a_config_needs_come_from_its_steps(monkeypatch):
    """A step's model kind reaches what a config loads with no other module told."""
    cfg = EngineConfig()
    assert steps.required_components(cfg) == {"detector", "embedder", "swapper"}  # the source is embedded
    assert steps.required_components(EngineConfig(swap=SwapConfig(swapper="classic"))) == {"detector", "swapper"}
    parsing = Step("parse", "swapped_mask", _shut, ("crops",), ("masks",), model="parser", wants_gpu=True)
    monkeypatch.setattr(steps, "STEPS", (*steps.STEPS, parsing))
    assert "parser" in steps.required_components(cfg)
    assert Chain.of(cfg).components(cfg) == ["detector", "swapper", "parser"]
