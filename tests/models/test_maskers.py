"""Occlusion (xseg) and region (BiSeNet) masks: FaceFusion's pre- and post-processing on hand cases,
and the wrappers end to end on their stand-ins."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from fusion_ray.models.maskers import (
    REGION_IDS,
    BisenetParser,
    XsegOccluder,
    occlusion_from_output,
    occlusion_input,
    parser_input,
    region_from_logits,
    region_ids,
)
from fusion_ray.models.registry import get_spec
from fusion_ray.models.standins import make_standin
from fusion_ray.ops.face_masks import feather


def _session(name: str) -> ort.InferenceSession:
    return ort.InferenceSession(make_standin(name).SerializeToString(), providers=["CPUExecutionProvider"])


def test_occlusion_input_is_bgr_over_255_nhwc() -> None:
    crops = np.zeros((2, 128, 128, 3), np.uint8)
    crops[1, ..., 0] = 255  # blue, first in BGR
    blob = occlusion_input(crops)
    assert blob.shape == (2, 256, 256, 3) and blob.dtype == np.float32
    assert blob[1, 10, 10].tolist() == [1.0, 0.0, 0.0]
    assert blob[0].max() == 0.0


def test_occlusion_output_is_clipped_resized_and_feathered() -> None:
    raw = np.full((1, 256, 256, 1), 1.7, np.float32)  # over 1: clipped
    raw[0, 100:, :, 0] = -0.3  # under 0: clipped
    masks = occlusion_from_output(raw, 128)
    assert masks.shape == (1, 128, 128)
    hard = np.zeros((128, 128), np.float32)
    hard[:50] = 1.0
    np.testing.assert_allclose(masks[0], feather(hard), atol=1e-6)


def test_parser_input_is_rgb_imagenet_nchw() -> None:
    crops = np.zeros((1, 64, 64, 3), np.uint8)
    crops[0, ..., 0] = 255  # blue in BGR
    blob = parser_input(crops, get_spec("bisenet_resnet_34"))
    assert blob.shape == (1, 3, 512, 512)
    np.testing.assert_allclose(blob[0, :, 0, 0], [(0 - 0.485) / 0.229, (0 - 0.456) / 0.224, (1 - 0.406) / 0.225],
                               rtol=1e-5)


def test_region_from_logits_takes_the_argmax_in_the_chosen_classes() -> None:
    logits = np.zeros((1, 19, 64, 64), np.float32)
    logits[0, 1, :, :32] = 5.0  # skin on the left half
    logits[0, 4, :, 32:] = 5.0  # left eye on the right half
    skin = region_from_logits(logits, [1], 64)[0]
    hard = np.zeros((64, 64), np.float32)
    hard[:, :32] = 1.0
    np.testing.assert_allclose(skin, feather(hard), atol=1e-6)
    assert region_from_logits(logits, [1, 4], 64)[0].min() == pytest.approx(1.0)


def test_the_ten_regions_by_name() -> None:
    assert dict(REGION_IDS) == {"skin": 1, "left-eyebrow": 2, "right-eyebrow": 3, "left-eye": 4, "right-eye": 5,
                                "glasses": 6, "nose": 10, "mouth": 11, "upper-lip": 12, "lower-lip": 13}
    assert region_ids(["nose", "skin"]) == [10, 1]
    with pytest.raises(ValueError, match="hair"):
        region_ids(["hair"])


def test_xseg_stand_in_reads_a_dark_object_as_an_occlusion() -> None:
    occluder = XsegOccluder(_session("xseg_2"), get_spec("xseg_2"))
    assert occluder.stand_in
    crops = np.full((2, 128, 128, 3), 150, np.uint8)
    crops[1, 80:110, 40:90] = 0  # a microphone over the mouth
    masks = occluder.masks(crops)
    assert masks.shape == (2, 128, 128)
    assert masks[0, 95, 64] > 0.9 and masks[1, 95, 64] == 0.0
    assert masks[1, 50, 64] > 0.9  # the rest of the face is still pasted
    assert masks[0, 0, 0] == 0.0
    assert occluder.masks(np.zeros((0, 128, 128, 3), np.uint8)).shape == (0, 128, 128)


def test_bisenet_stand_in_gives_each_region_its_place() -> None:
    parser = BisenetParser(_session("bisenet_resnet_18"), get_spec("bisenet_resnet_18"))
    crops = np.full((3, 256, 256, 3), 100, np.uint8)  # the feather (sigma 5 px) blurs small parts at 128 px
    skin = parser.masks(crops, ["skin"])
    assert skin.shape == (3, 256, 256)
    cheek, eye = (int(0.27 * 256), int(0.6 * 256)), (int(0.36 * 256), int(0.40 * 256))
    assert skin[0, cheek[1], cheek[0]] > 0.9 and skin[0, eye[1], eye[0]] < 0.1 and skin[0, 2, 2] == 0.0
    eyes = parser.masks(crops, ["left-eye", "right-eye"])
    assert eyes[0, eye[1], eye[0]] > 0.5 and eyes[0, cheek[1], cheek[0]] == 0.0


def test_mask_wrappers_check_the_input_shape() -> None:
    from fusion_ray.errors import ModelError

    with pytest.raises(ModelError, match="xseg_1"):
        XsegOccluder(_session("bisenet_resnet_18"), get_spec("xseg_1"))
