"""Model masks: the xseg occluders and the BiSeNet face parsers, batched over crops.

FaceFusion 3.8.1's processing (``face_masker.py``), read for facts:

- occlusion (``xseg_1/2/3``), on the TARGET crop before the swap: the crop resized to 256x256,
  BGR kept, / 255, NHWC ``(N, 256, 256, 3)`` into ``input``; the output ``(N, 256, 256, 1)``
  clipped to [0, 1], resized to the crop, then :func:`fusion_ray.ops.face_masks.feather`.
- region (``bisenet_resnet_18/34``), on the SWAPPED crop: resized to 512x512, BGR -> RGB, / 255,
  ImageNet mean/std, NCHW into ``input``; argmax over the 19 classes of the output; 1 where the
  class is one of the chosen regions; resized to the crop; feathered the same way.

Both return one mask per crop, (N, S, S) float32 in [0, 1], to join the element-wise minimum.
"""

from __future__ import annotations

from collections.abc import Iterable
from types import MappingProxyType

import cv2
import numpy as np
import numpy.typing as npt
import onnxruntime as ort

from fusion_ray.errors import ModelError
from fusion_ray.models.common import fixed_batch, run_in_batches
from fusion_ray.models.onnx_info import is_stand_in_metadata
from fusion_ray.models.registry import ModelSpec
from fusion_ray.models.session import NotPicklable, read_metadata
from fusion_ray.ops.face_masks import feather

FloatArray = npt.NDArray[np.float32]

REGION_IDS: MappingProxyType[str, int] = MappingProxyType({
    "skin": 1, "left-eyebrow": 2, "right-eyebrow": 3, "left-eye": 4, "right-eye": 5, "glasses": 6,
    "nose": 10, "mouth": 11, "upper-lip": 12, "lower-lip": 13,
})
"""FaceFusion's ``--face-mask-regions``: the ten regions by name, with their BiSeNet class ids."""


def _check_crops(crops: np.ndarray) -> np.ndarray:
    if crops.ndim != 4 or crops.shape[-1] != 3 or crops.shape[1] != crops.shape[2] or crops.dtype != np.uint8:
        raise ValueError(f"expected (N, S, S, 3) uint8 crops, got {crops.shape} {crops.dtype}")
    return crops


def _resize_all(images: np.ndarray, size: int) -> np.ndarray:
    return np.stack([cv2.resize(image, (size, size)) for image in images])


def occlusion_input(crops: np.ndarray, size: int = 256) -> FloatArray:
    """(N, S, S, 3) BGR uint8 crops -> (N, size, size, 3) float32 BGR / 255 (NHWC)."""
    return (_resize_all(_check_crops(crops), size).astype(np.float32) / np.float32(255.0))


def occlusion_from_output(raw: np.ndarray, crop_size: int) -> FloatArray:
    """(N, H, W, 1) occluder output -> (N, S, S) masks: clip, resize to the crop, feather."""
    maps = np.clip(np.asarray(raw, np.float32).reshape(len(raw), raw.shape[1], raw.shape[2]), 0.0, 1.0)
    return np.stack([feather(cv2.resize(m, (crop_size, crop_size))) for m in maps])


def region_ids(regions: Iterable[str]) -> list[int]:
    """The BiSeNet class ids of the named regions; ValueError naming the ten for an unknown one."""
    chosen = list(regions)
    unknown = [r for r in chosen if r not in REGION_IDS]
    if unknown or not chosen:
        raise ValueError(f"regions: expected some of {list(REGION_IDS)}, got {chosen}")
    return [REGION_IDS[r] for r in chosen]


def parser_input(crops: np.ndarray, spec: ModelSpec) -> FloatArray:
    """(N, S, S, 3) BGR uint8 crops -> (N, 3, 512, 512) float32 RGB, ImageNet-normalised (NCHW)."""
    resized = _resize_all(_check_crops(crops), spec.crop_size)[..., ::-1].astype(np.float32)
    blob = (resized - np.asarray(spec.mean, np.float32)) / np.asarray(spec.std, np.float32)
    return np.ascontiguousarray(blob.transpose(0, 3, 1, 2))


def region_from_logits(logits: np.ndarray, ids: list[int], crop_size: int) -> FloatArray:
    """(N, C, H, W) parser logits -> (N, S, S) masks: argmax in the chosen ids, resize, feather."""
    chosen = np.isin(np.asarray(logits).argmax(axis=1), ids).astype(np.float32)
    return np.stack([feather(cv2.resize(m, (crop_size, crop_size))) for m in chosen])


class _MaskModel(NotPicklable):
    def __init__(self, session: ort.InferenceSession, spec: ModelSpec, expected: list[int]) -> None:
        inputs = session.get_inputs()
        if len(inputs) != 1 or list(inputs[0].shape[1:]) != expected:
            raise ModelError(f"{spec.name}: expected one input of shape (N, {', '.join(map(str, expected))}), "
                             f"got {[(i.name, i.shape) for i in inputs]}")
        self.session = session
        self.spec = spec
        self.input_name = inputs[0].name
        self.output_name = session.get_outputs()[0].name
        self.batch = fixed_batch(inputs[0])
        self.stand_in = is_stand_in_metadata(read_metadata(session))

    def _run(self, blob: np.ndarray) -> np.ndarray:
        def run(part: slice) -> np.ndarray:
            return np.asarray(self.session.run([self.output_name], {self.input_name: blob[part]})[0])

        return run_in_batches(len(blob), self.batch, run)


class XsegOccluder(_MaskModel):
    """An xseg occluder (``xseg_1``, ``xseg_2``, ``xseg_3``): NHWC input, one mask per crop."""

    def __init__(self, session: ort.InferenceSession, spec: ModelSpec) -> None:
        super().__init__(session, spec, [spec.crop_size, spec.crop_size, 3])

    def masks(self, crops: np.ndarray) -> FloatArray:
        """(N, S, S, 3) BGR target crops -> (N, S, S) occlusion masks (0 where something covers the face)."""
        if len(crops) == 0:
            return np.zeros((0, *crops.shape[1:3]), np.float32)
        raw = self._run(occlusion_input(crops, self.spec.crop_size))
        return occlusion_from_output(raw, crops.shape[1])


class BisenetParser(_MaskModel):
    """A BiSeNet face parser (``bisenet_resnet_18``, ``bisenet_resnet_34``): one region mask per crop."""

    def __init__(self, session: ort.InferenceSession, spec: ModelSpec) -> None:
        super().__init__(session, spec, [3, spec.crop_size, spec.crop_size])

    def masks(self, crops: np.ndarray, regions: Iterable[str]) -> FloatArray:
        """(N, S, S, 3) BGR swapped crops -> (N, S, S) masks, 1 on the named regions."""
        ids = region_ids(regions)
        if len(crops) == 0:
            return np.zeros((0, *crops.shape[1:3]), np.float32)
        return region_from_logits(self._run(parser_input(crops, self.spec)), ids, crops.shape[1])
