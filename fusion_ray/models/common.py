"""Helpers shared by the model wrappers: crop <-> tensor conversion and batch handling."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import numpy.typing as npt
import onnxruntime as ort

from fusion_ray.errors import ModelError
from fusion_ray.models.onnx_info import is_stand_in_metadata
from fusion_ray.models.session import NotPicklable, read_metadata
from fusion_ray.models.spec import ModelSpec

FloatArray = npt.NDArray[np.float32]


def crops_to_blob(crops: np.ndarray, spec: ModelSpec) -> FloatArray:
    """(N, S, S, 3) BGR uint8 crops -> (N, 3, S, S) float32 normalised as the spec says."""
    if crops.ndim != 4 or crops.shape[-1] != 3 or crops.shape[1:3] != (spec.crop_size, spec.crop_size):
        raise ValueError(f"{spec.name}: expected crops of shape (N, {spec.crop_size}, {spec.crop_size}, 3), "
                         f"got {crops.shape}")
    pixels = crops[..., ::-1] if spec.color_order == "RGB" else crops
    mean = np.asarray(spec.mean, np.float32)
    std = np.asarray(spec.std, np.float32)
    blob = (pixels.astype(np.float32) - mean) / std
    return np.ascontiguousarray(blob.transpose(0, 3, 1, 2))


def blob_to_crops(blob: np.ndarray, spec: ModelSpec, value_range: tuple[float, float]) -> np.ndarray:
    """(N, 3, S, S) model output in ``value_range`` (spec colour order) -> BGR uint8 crops."""
    low, high = value_range
    scaled = (np.clip(blob, low, high) - low) / (high - low) * 255.0
    pixels = np.rint(scaled.transpose(0, 2, 3, 1)).astype(np.uint8)
    return np.ascontiguousarray(pixels[..., ::-1] if spec.color_order == "RGB" else pixels)


def fixed_batch(session_input: ort.NodeArg) -> int | None:
    """The input's fixed batch size, or None when the batch dimension is dynamic."""
    dim = session_input.shape[0] if session_input.shape else None
    return dim if isinstance(dim, int) and dim > 0 else None


def run_in_batches(n: int, batch: int | None, run: Callable[[slice], np.ndarray]) -> np.ndarray:
    """Call ``run`` on slices of at most ``batch`` items (all at once when batch is None)."""
    if n == 0:
        raise ValueError("run_in_batches: expected at least one item")
    if batch is None:
        return run(slice(0, n))
    return np.concatenate([run(slice(i, min(i + batch, n))) for i in range(0, n, batch)], axis=0)


def input_by_rank(session: ort.InferenceSession, rank: int, preferred: str, model: str) -> ort.NodeArg:
    """The session input called ``preferred``, else the only input of the given rank."""
    inputs = session.get_inputs()
    for item in inputs:
        if item.name == preferred:
            return item
    matches = [i for i in inputs if len(i.shape) == rank]
    if len(matches) != 1:
        raise ModelError(f"{model}: expected an input named {preferred!r} (rank {rank}), "
                         f"got {[(i.name, i.shape) for i in inputs]}")
    return matches[0]


class CropModel(NotPicklable):
    """Base of the wrappers over aligned square crops (embedder, swapper, enhancer).

    Reads the template and crop size from the registry spec, the output name and the
    stand-in label from the session, and finds the (N, 3, S, S) image input.
    """

    def __init__(self, session: ort.InferenceSession, spec: ModelSpec, *, image_input: str | None = None) -> None:
        if spec.template is None:
            raise ModelError(f"{spec.name}: the registry gives no alignment template")
        self.session = session
        self.spec = spec
        self.template: str = spec.template
        self.crop_size = spec.crop_size
        inputs = session.get_inputs()
        if image_input is None:
            if len(inputs) != 1:
                raise ModelError(f"{spec.name}: expected one input, got {[(i.name, i.shape) for i in inputs]}")
            self.image_input = inputs[0]
        else:
            self.image_input = input_by_rank(session, 4, image_input, spec.name)
        expected = [3, spec.crop_size, spec.crop_size]
        if len(self.image_input.shape) != 4 or list(self.image_input.shape[1:]) != expected:
            raise ModelError(f"{spec.name}: expected an image input of shape (N, {', '.join(map(str, expected))}), "
                             f"got {self.image_input.name} {self.image_input.shape}")
        self.batch = fixed_batch(self.image_input)
        self.output_name = session.get_outputs()[0].name
        self.stand_in = is_stand_in_metadata(read_metadata(session))
