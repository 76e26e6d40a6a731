"""The split placement's deployments, their classes called in-process (no Ray): its parts, run one
after the other as the placement runs them, give the fused deployment's pixels for requests with
different options batched together (the region mask and the swapper weight included); the detector
runs the steps before the swap; a source identity for a swapper given the source as an image is cut
by the detector replica and carried through the embed batch. STAND-INs (labelled, not real swaps)
for every model but the real SCRFD detector."""

from __future__ import annotations

import numpy as np
import pytest

from fusion_ray.config import EngineConfig, RuntimeConfig
from fusion_ray.core.chain import Selection
from fusion_ray.core.facefusion_options import NO_OPTIONS, FaceFusionOptions
from fusion_ray.core.frames import FrameChain, FrameJob, FrameRequest, FrameState
from fusion_ray.core.modelset import ModelSet
from fusion_ray.core.swapper import swap_backend
from fusion_ray.imageio import read_image
from fusion_ray.serve.deployments import embed_batch, source_face
from fusion_ray.serve.settings import ServeSettings


@pytest.fixture(scope="module")
def split_service(rows_models_config, tmp_path_factory):
    """ServeSettings over STAND-INs with the occluder and the parser allowed and the codeformer
    enhancer (whose output moves with its weight input)."""
    from fusion_ray.models.hashes import write_hash_record
    from fusion_ray.models.standins_quality import make_quality_standin

    models = rows_models_config.model_copy(update={"enhancer": "codeformer"}).model_dump(mode="json")
    root = tmp_path_factory.mktemp("split_masks")
    for name in ("xseg_1", "bisenet_resnet_34"):
        path = root / f"{name}.onnx"
        path.write_bytes(make_quality_standin(name).SerializeToString())
        write_hash_record(path, "generated")
        models["paths"][name] = str(path)
    return ServeSettings.model_validate({"engine": {"models": models, "runtime": {"providers": ["cpu"]}},
                                         "limits": {"mask_models_allowed": ["occlusion", "region"],
                                                    "enhancer_allowed": True}})


OPTIONS = [
    (NO_OPTIONS, None),
    (FaceFusionOptions(face_mask_types=("box", "region"), face_mask_regions=("skin", "nose")), None),
    (FaceFusionOptions(face_swapper_weight=0.9), None),
    (FaceFusionOptions(face_mask_types=("box", "occlusion"), face_mask_blur=0.6), 0.8),
    (FaceFusionOptions(face_swapper_pixel_boost="256x256", face_enhancer_weight=0.1), 1.0),
]
"""Each request's options and enhancer blend (None: not enhanced)."""


def test_the_split_parts_in_turn_give_the_fused_pixels_for_a_batch_of_mixed_options(split_service, images_dir):
    from fusion_ray.serve.deployments import (
        DetectorDeployment,
        EnhancerDeployment,
        SwapperDeployment,
    )
    from fusion_ray.serve.downstream import LocalStages
    from fusion_ray.serve.fused import FusedDeployment
    from fusion_ray.serve.placement import _without_frame

    detector = DetectorDeployment.func_or_class(split_service)
    swapper = SwapperDeployment.func_or_class(split_service)
    enhancer = EnhancerDeployment.func_or_class(split_service)
    local = LocalStages(split_service)
    frame = read_image(images_dir / "obama_and_biden.jpg").frame
    face = source_face(detector.models, detector.cfg, read_image(images_dir / "biden.jpg").frame)
    identity = embed_batch(swapper.models, swapper.cfg, [[face]])[0]["identity"]
    requests = [FrameRequest(frame, Selection("all"), blend, options=options) for options, blend in OPTIONS]

    states: list[FrameState] = [detector.find(FrameJob(r, "", None))["state"].for_source("s") for r in requests]
    jobs = [FrameJob(r, "s", identity) for r in requests]
    shipped = [_without_frame(job) for job in jobs]  # neither the swap nor the enhancer part reads the frame
    assert not local.reads_frame(NO_OPTIONS, "target_mask", "swapped_mask")
    swapped = swapper.part.run(shipped, states)
    assert swapped[0]["batch"]["requests"] == len(jobs) and "region_mask" in swapped[0]["steps"]
    states = [local.advance(j, r["state"], "swapped_mask", "enhance_align", {}) for j, r in zip(jobs, swapped, strict=True)]
    states = [r["state"] for r in enhancer.part.run(shipped, states)]
    states = [local.advance(j, s, "enhance_mask", "paste_enhanced", {}) for j, s in zip(jobs, states, strict=True)]
    split = FrameChain.done(jobs, states)

    fused = FusedDeployment.func_or_class(split_service).chain.run(jobs)
    for k, (a, b) in enumerate(zip(split, fused, strict=True)):
        assert a.error == b.error == "" and a.faces_swapped == b.faces_swapped == 3, k
        assert np.array_equal(a.frame, b.frame), f"request {k} ({OPTIONS[k]})"
    outputs = [d.frame for d in split]
    for k in range(1, len(outputs)):  # each option reached the pixels
        assert not np.array_equal(outputs[0], outputs[k]), OPTIONS[k]


def test_the_detector_runs_the_steps_before_the_swap_with_the_requests_options(split_service, images_dir):
    """The allowed occluder's target-crop masks and a pixel boost's crop size, per request (STAND-INs:
    only the presence and shape of the masks are checked)."""
    from fusion_ray.serve.deployments import DetectorDeployment

    detector = DetectorDeployment.func_or_class(split_service)
    frame = read_image(images_dir / "obama_and_biden.jpg").frame

    def find(options: FaceFusionOptions) -> FrameState:
        return detector.find(FrameJob(FrameRequest(frame, Selection("all"), options=options), "", None))["state"]

    plain, masked = find(NO_OPTIONS), find(FaceFusionOptions(face_mask_types=("box", "occlusion")))
    boosted = find(FaceFusionOptions(face_swapper_pixel_boost="256x256"))
    assert plain.error == masked.error == "" and plain.detected == masked.detected == 3
    assert plain.faces.mask is None and masked.faces.mask is not None
    assert masked.faces.mask.shape == masked.faces.crop.shape[:3]
    assert np.array_equal(plain.faces.crop, masked.faces.crop)
    assert (plain.faces.crop.shape[1:3], boosted.faces.crop.shape[1:3]) == ((128, 128), (256, 256))


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




class InProcess:
    """A deployment object called the way a Serve handle is (``handle.method.remote(...)`` gives an
    awaitable), in this process: the split placement's own loop runs over the real deployment
    classes with no Ray. A batched part's ``advance`` runs its batch of one directly
    (``@serve.batch`` needs a replica). Each call is recorded with its arguments."""

    def __init__(self, target) -> None:  # type: ignore[no-untyped-def]
        self.target = target
        self.calls: list[tuple[str, tuple]] = []

    def __getattr__(self, name: str):  # type: ignore[no-untyped-def]
        import inspect
        from types import SimpleNamespace

        if name == "advance":
            def method(job, state):  # type: ignore[no-untyped-def]
                return self.target.part.run([job], [state])[0]
        else:
            method = getattr(self.target, name)

        def remote(*args):  # type: ignore[no-untyped-def]
            self.calls.append((name, args))

            async def run():  # type: ignore[no-untyped-def]
                result = method(*args)
                return await result if inspect.isawaitable(result) else result

            return run()

        return SimpleNamespace(remote=remote)


def test_the_split_chain_ships_no_frame_to_the_model_parts_and_skips_them_without_faces(split_service, images_dir):
    """``SplitChain.frame`` (the placement's loop, no Ray): the fused pixels for a frame with faces,
    enhanced; the swapper and the enhancer get neither the request's frame nor the pasted one; a
    frame with no face never reaches them; a part that fails is a 500."""
    import asyncio

    from fusion_ray.serve.deployments import (
        DetectorDeployment,
        EnhancerDeployment,
        SwapperDeployment,
    )
    from fusion_ray.serve.downstream import Downstream, LocalStages
    from fusion_ray.serve.fused import FusedDeployment
    from fusion_ray.serve.limits import ApiError
    from fusion_ray.serve.metrics import MetricsRecorder
    from fusion_ray.serve.placement import SplitChain, known
    from fusion_ray.serve.timing import Timings
    from fusion_ray.types import SourceIdentity

    detector, swapper, enhancer = (InProcess(d.func_or_class(split_service))
                                   for d in (DetectorDeployment, SwapperDeployment, EnhancerDeployment))
    metrics = MetricsRecorder()
    split = SplitChain(Downstream((detector, swapper, enhancer, None), timeout_s=60, retry_headers={},
                                  metrics=metrics), LocalStages(split_service))
    face = source_face(detector.target.models, detector.target.cfg, read_image(images_dir / "biden.jpg").frame)
    identity = embed_batch(swapper.target.models, swapper.target.cfg, [[face]])[0]["identity"]
    frame = read_image(images_dir / "obama_and_biden.jpg").frame
    request = FrameRequest(frame, Selection("all"), 0.8, options=FaceFusionOptions(face_mask_types=("box", "region")))

    def run(request: FrameRequest, who: SourceIdentity = identity):  # type: ignore[no-untyped-def]
        return asyncio.run(split.frame(Timings(metrics), request, known("s", who)))

    done = run(request)
    fused = FusedDeployment.func_or_class(split_service).chain.run([FrameJob(request, "s", identity)])[0]
    assert done.faces_swapped == fused.faces_swapped == 3 and np.array_equal(done.frame, fused.frame)
    for handle in (swapper, enhancer):
        ((_, (job, state)),) = handle.calls
        assert job.request.frame.size == 3 and state.frame is None and job.request.follower is None
    blank = FrameRequest(np.full((64, 64, 3), 127, np.uint8), Selection("all"), 0.8)
    assert run(blank).faces_detected == 0 and len(swapper.calls) == len(enhancer.calls) == 1
    with pytest.raises(ApiError) as failed:
        run(request, SourceIdentity(None, None, None, 1))  # no latent for the inswapper: the swap part fails
    assert (failed.value.status, failed.value.code) == (500, "stage_failed")
