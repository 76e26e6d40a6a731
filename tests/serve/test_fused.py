"""The fused deployment with per-request options, its class called in-process (no Ray): the mask
models requests may ask for are loaded at start, and a batch mixing options equals the engine
configured with each frame's options. The occluder is a labelled STAND-IN; the swap is the classic
one with the real detector (only two paths' pixels are compared)."""

from __future__ import annotations

import numpy as np

from fusion_ray.core import chain
from fusion_ray.core.facefusion_options import NO_OPTIONS, FaceFusionOptions, configured
from fusion_ray.core.frames import FrameJob, FrameRequest
from fusion_ray.imageio import read_image
from fusion_ray.models.hashes import write_hash_record
from fusion_ray.models.standins_quality import build_quality_standins
from fusion_ray.runners.inline import Engine
from fusion_ray.serve.fused import FusedDeployment
from fusion_ray.serve.settings import ServeSettings


def test_the_fused_deployment_loads_the_allowed_mask_models_and_runs_each_frames_options(
        models_config, images_dir, tmp_path):
    xseg = build_quality_standins(tmp_path)["xseg_1"]
    write_hash_record(xseg, "generated")
    models = {**models_config.model_dump(mode="json"), "paths": {**models_config.model_dump(mode="json")["paths"],
                                                                 "xseg_1": str(xseg)}}
    settings = ServeSettings.model_validate({
        "engine": {"models": models, "runtime": {"providers": ["cpu"]}, "swap": {"swapper": "classic"}},
        "deployments": {"fused": {"cpu_budget": 1}, "enhancer_enabled": False},
        "limits": {"mask_models_allowed": ["occlusion"]}})
    fused = FusedDeployment.func_or_class(settings)
    assert fused.models.occluder is not None and fused.models.parser is None
    frame = read_image(images_dir / "biden.jpg").frame
    identity = Engine(fused.cfg, fused.models).prepare_source([read_image(images_dir / "obama.jpg").frame])
    masked = FaceFusionOptions(face_mask_types=("box", "occlusion"))
    jobs = [FrameJob(FrameRequest(frame, chain.Selection("all"), options=o), "o", identity)
            for o in (NO_OPTIONS, masked, NO_OPTIONS)]
    done = [result["done"] for result in fused._process_batch(jobs)]
    for job, result in zip(jobs, done, strict=True):
        engine = Engine(configured(fused.cfg, job.request.options), fused.models)
        assert result.error == "" and np.array_equal(result.frame, engine.process_frame(frame, identity).frame)
    assert not np.array_equal(done[0].frame, done[1].frame) and np.array_equal(done[0].frame, done[2].frame)


def test_a_fused_replica_loads_the_models_of_every_step_a_request_may_run(monkeypatch):
    """Derived from the chain's steps: a step added with its model reaches the replica untold."""
    from fusion_ray.core import steps
    from fusion_ray.serve.fused import fused_components

    settings = ServeSettings.model_validate({"deployments": {"enhancer_enabled": False}})
    assert set(fused_components(settings)) == {"detector", "embedder", "swapper"}
    enhancing = ServeSettings.model_validate({"limits": {"mask_models_allowed": ["region"]}})
    assert set(fused_components(enhancing)) == {"detector", "embedder", "swapper", "enhancer", "parser"}
    parsing = steps.Step("parse", "swapped_mask", lambda tools, rows, batch: batch, ("crops",), ("masks",),
                         model="occluder", wants_gpu=True)
    monkeypatch.setattr(steps, "STEPS", (*steps.STEPS, parsing))
    assert "occluder" in fused_components(settings)


def test_each_deployment_that_embeds_has_its_own_batch_queue():
    # serve.batch keeps one queue (and its wait and size) per decorated function: a function
    # shared by two deployment classes would batch their requests together in one process
    from fusion_ray.serve.deployments import SwapperDeployment
    from fusion_ray.serve.fused import FusedDeployment

    assert SwapperDeployment.func_or_class._embed_batched is not FusedDeployment.func_or_class._embed_batched
