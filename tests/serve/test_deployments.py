"""The split placement's deployments with per-request options, their classes called in-process
(no Ray): a swap batch mixing requests with different options swaps each as its options' chain does;
a source identity for a swapper given the source as an image is cut by the detector replica and
carried through the embed batch (STAND-INs, labelled, not real swaps, with the real SCRFD detector)."""

from __future__ import annotations

import numpy as np

from fusion_ray.config import EngineConfig, RuntimeConfig, SwapConfig
from fusion_ray.core.layout import swap_layout
from fusion_ray.core.modelset import ModelSet
from fusion_ray.core.swapper import ClassicBackend, swap_backend
from fusion_ray.facefusion_options import NO_OPTIONS, FaceFusionOptions, configured
from fusion_ray.imageio import read_image
from fusion_ray.serve.deployments import SwapperDeployment, embed_batch, source_face
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


def test_the_detector_runs_the_steps_before_the_swap_with_the_requests_options(models_config, images_dir, tmp_path):
    """Split: the detector deployment loads the allowed occluder and makes each request's target-crop
    masks (a labelled STAND-IN occluder: only the presence and shape of its mask are checked)."""
    from fusion_ray.imageio import read_image
    from fusion_ray.models.hashes import write_hash_record
    from fusion_ray.models.standins_quality import build_quality_standins
    from fusion_ray.serve.deployments import DetectorDeployment

    xseg = build_quality_standins(tmp_path)["xseg_1"]
    write_hash_record(xseg, "generated")
    models = models_config.model_dump(mode="json")
    models["paths"]["xseg_1"] = str(xseg)
    settings = ServeSettings.model_validate({
        "engine": {"models": models, "runtime": {"providers": ["cpu"]}, "swap": {"swapper": "classic"}},
        "limits": {"mask_models_allowed": ["occlusion"]}})
    detector = DetectorDeployment.func_or_class(settings)
    frame = read_image(images_dir / "obama_and_biden.jpg").frame
    plain = detector.detect(frame, "all", 0)
    masked = detector.detect(frame, "all", 0, None, FaceFusionOptions(face_mask_types=("box", "occlusion")))
    assert plain.error == masked.error == "" and plain.faces_detected == masked.faces_detected == 3
    assert plain.faces.mask is None and masked.faces.mask is not None
    assert masked.faces.mask.shape == masked.faces.crop.shape[:3]
    assert np.array_equal(plain.faces.crop, masked.faces.crop)


def test_a_pixel_boost_cuts_and_pastes_the_crops_at_its_size_in_the_split_placement(models_config, images_dir):
    """inswapper (STAND-IN here: only crop sizes are checked): the detector cuts a boosted request's
    crops at k x the model's 128, and the ingress pastes at the same layout."""
    from fusion_ray.imageio import read_image
    from fusion_ray.serve.chain import LocalStages
    from fusion_ray.serve.deployments import DetectorDeployment

    settings = ServeSettings.model_validate({"engine": {"models": models_config.model_dump(mode="json"),
                                                        "runtime": {"providers": ["cpu"]}}})
    detector = DetectorDeployment.func_or_class(settings)
    frame = read_image(images_dir / "biden.jpg").frame
    boost = FaceFusionOptions(face_swapper_pixel_boost="256x256")
    assert detector.detect(frame, "all", 0).faces.crop.shape[1:3] == (128, 128)
    assert detector.detect(frame, "all", 0, None, boost).faces.crop.shape[1:3] == (256, 256)
    local = LocalStages(settings)
    assert (local.layout(NO_OPTIONS).size, local.layout(boost).size) == (128, 256)


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


def test_an_enhance_batch_runs_each_request_at_its_own_enhancer_weight(rows_models_config):
    """Split: the enhancer deployment groups a batch by the requests' enhancer weights (the codeformer
    STAND-IN, labelled, not a real model, whose output moves with its weight input)."""
    from fusion_ray.core import chain
    from fusion_ray.models.enhancer import blend_crops
    from fusion_ray.serve.deployments import EnhancerDeployment, _crops_batch

    models = rows_models_config.model_copy(update={"enhancer": "codeformer"})
    settings = ServeSettings.model_validate({"engine": {"models": models.model_dump(mode="json"),
                                                        "runtime": {"providers": ["cpu"]}}})
    enhancer = EnhancerDeployment.func_or_class(settings)
    rng = np.random.default_rng(1)
    crops = [rng.integers(0, 256, (n, 512, 512, 3), np.uint8) for n in (1, 2, 1)]
    weights = [None, 0.9, 0.1]
    results = enhancer._enhance_batch(crops, [1.0, 0.8, 1.0], weights)
    for crop, blend, weight, result in zip(crops, [1.0, 0.8, 1.0], weights, results, strict=True):
        full = chain.enhance(enhancer.models.need_enhancer(), _crops_batch([crop], [""]), 1.0, weight).crop
        assert result["error"] == "" and np.array_equal(result["crops"], blend_crops(crop, full, blend))
    at_service_weight = enhancer._enhance_batch([crops[2]], [1.0], [None])[0]["crops"]
    assert not np.array_equal(results[2]["crops"], at_service_weight)  # the request's weight was used
    assert results[0]["batch"]["requests"] == 3
