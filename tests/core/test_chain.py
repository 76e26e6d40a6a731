"""The core chain: per-frame failures mark their frame, fatal ones raise; identities in one place."""

import numpy as np
import pytest

from fusion_ray.config import EngineConfig, EnhanceConfig, RuntimeConfig, SwapConfig
from fusion_ray.core import chain, identity
from fusion_ray.core.facebatch import FaceBatch
from fusion_ray.core.layout import swap_layout
from fusion_ray.core.modelset import ModelSet
from fusion_ray.core.swapper import ClassicBackend, swap_backend
from fusion_ray.errors import ModelError, is_fatal
from fusion_ray.imageio import read_image
from fusion_ray.types import SourceIdentity

CPU = RuntimeConfig(providers=["cpu"])


def _detect_select_align(detector, frames, errors, layout, source_ids=None):
    """The chain's detect, select ("all") and align functions over ``frames``, as the steps call them."""
    selections = [chain.Selection("all")] * len(frames)
    found = chain.detect_faces(detector, frames, errors, range(len(frames)), selections)
    chosen = chain.select(found, selections, errors)
    faces = FaceBatch.from_faces([chosen.get(r, []) for r in range(len(frames))], source_ids)
    return found, chain.align(frames, faces, layout, errors, "align")


@pytest.fixture(scope="module")
def photos(images_dir):
    return {n: read_image(images_dir / f"{n}.jpg").frame for n in ("obama", "biden", "obama_and_biden")}


def test_is_fatal_tells_worker_failures_from_input_failures(standin_dir):
    import onnxruntime as ort

    session = ort.InferenceSession(str(standin_dir / "gfpgan_1.4.onnx"), providers=["CPUExecutionProvider"])
    with pytest.raises(Exception) as err:  # a real ONNX Runtime failure: wrong input rank
        session.run(None, {session.get_inputs()[0].name: np.zeros((1, 3), np.float32)})
    assert is_fatal(err.value)
    assert is_fatal(MemoryError()) and is_fatal(ModelError("broken"))
    assert not is_fatal(ValueError("bad frame")) and not is_fatal(KeyError("source"))


def test_a_bad_frame_is_marked_and_the_others_go_on(models_config, photos):
    cfg = EngineConfig(models=models_config, runtime=CPU)
    models = ModelSet.load(cfg, ["detector"], cpu_budget=1)
    errors = ["", "", ""]
    frames = [photos["obama"], np.zeros((10, 10), np.uint8), photos["obama_and_biden"]]
    found, faces = _detect_select_align(models.need_detector(), frames, errors, swap_layout(cfg))
    assert errors[0] == "" and errors[1].startswith("detect: ValueError") and errors[2] == ""
    assert {r: len(f) for r, f in found.items()} == {0: 1, 1: 0, 2: 3} and faces.counts(3).tolist() == [1, 0, 3]


def test_a_model_failure_of_the_whole_batch_raises_instead_of_retrying_rows(models_config):
    cfg = EngineConfig(models=models_config, runtime=CPU, enhance=EnhanceConfig(enabled=True))
    models = ModelSet.load(cfg, ["enhancer"], cpu_budget=1)
    faces = FaceBatch.from_faces([[], []]).with_crops(np.zeros((0, 512, 512, 3), np.uint8), np.zeros((0, 2, 3)))
    assert len(chain.enhance(models.need_enhancer(), faces, 0.8)) == 0
    wrong = FaceBatch(np.array([0, 1]), np.zeros((2, 4)), np.zeros((2, 5, 2)), np.ones(2),
                      np.array(["", ""], object), np.full(2, -1), crop=np.zeros((2, 256, 256, 3), np.uint8),
                      affine_matrix=np.zeros((2, 2, 3)))
    with pytest.raises(ValueError, match="expected crops of shape"):
        chain.enhance(models.need_enhancer(), wrong, 0.8)


def test_unknown_or_unusable_sources_mark_only_their_frames(models_config, photos):
    cfg = EngineConfig(models=models_config, runtime=CPU, swap=SwapConfig(swapper="classic"))
    models = ModelSet.load(cfg, ["detector"], cpu_budget=1)
    source = identity.prepare_source(models, cfg, [photos["biden"]])
    backend = swap_backend(cfg, models)
    assert isinstance(backend, ClassicBackend)
    errors = ["", "", ""]
    frames = [photos["obama"]] * 3
    _, faces = _detect_select_align(models.need_detector(), frames, errors, backend.layout,
                                    source_ids=["ok", "nope", "empty"])
    broken = SourceIdentity(embedding=None, latent=None, crop=None, num_images=1)  # no crop for classic
    swapped = chain.swap(backend, faces, {"ok": source, "empty": broken}, errors)
    assert errors[0] == "" and "unknown source_id 'nope'" in errors[1] and "source crop" in errors[2]
    assert swapped.frame_index.tolist() == [0]


def test_identity_averages_sources_and_picks_the_largest_face(models_config, photos):
    cfg = EngineConfig(models=models_config, runtime=CPU)
    models = ModelSet.load(cfg, ["detector", "embedder", "swapper"], cpu_budget=1)
    one = identity.prepare_source(models, cfg, [photos["biden"]])
    two = identity.prepare_source(models, cfg, [photos["biden"], photos["obama"]])
    assert one.num_images == 1 and two.num_images == 2
    assert one.latent is not None and np.isclose(np.linalg.norm(two.embedding), 1.0, atol=1e-5)
    detector = models.need_detector()
    group = detector.detect(photos["obama_and_biden"])
    assert identity.largest_face(group) is max(group, key=lambda f: f.area)
    assert identity.largest_face([]) is None
