"""inswapper_128: arcface_128 crops plus a source latent in, swapped crops out.

The latent is the source's normalised ArcFace embedding multiplied by ``emap`` (the graph's
last initializer, 512x512) and normalised again. Crops go in as RGB in [0, 1] and come back
the same way. Batched when the export's batch dimension is dynamic (see
``fusion-ray models make-dynamic``), otherwise a loop at batch 1.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper

from fusion_ray.errors import ModelError
from fusion_ray.models.common import (
    CropModel,
    FloatArray,
    blob_to_crops,
    crops_to_blob,
    input_by_rank,
    run_in_batches,
)
from fusion_ray.models.embedder import l2_normalise
from fusion_ray.models.registry import ModelSpec


def read_emap(model_path: Path) -> FloatArray:
    """The 512x512 ``emap`` matrix: the last initializer of the inswapper graph."""
    try:
        model = onnx.load(str(model_path))
    except Exception as exc:
        raise ModelError(f"cannot read {model_path} as ONNX: {exc}") from exc
    if not model.graph.initializer:
        raise ModelError(f"{model_path}: expected initializers, found none")
    emap = numpy_helper.to_array(model.graph.initializer[-1]).astype(np.float32)
    if emap.shape != (512, 512):
        raise ModelError(f"{model_path}: expected the last initializer to be the 512x512 emap, got {emap.shape}")
    return emap


class InswapperSwapper(CropModel):
    """The inswapper_128 face swapper."""

    kind = "inswapper"

    def __init__(self, session: ort.InferenceSession, spec: ModelSpec, emap: FloatArray) -> None:
        super().__init__(session, spec, image_input="target")
        self.emap = emap
        self.source_input = input_by_rank(session, 2, "source", spec.name)

    def latent(self, embedding: np.ndarray) -> FloatArray:
        """Source latent (512,) from a source embedding (normalised first)."""
        normed = l2_normalise(np.asarray(embedding, np.float32).reshape(1, -1))
        return l2_normalise(normed @ self.emap)[0]

    def swap(self, crops: np.ndarray, latents: np.ndarray) -> np.ndarray:
        """(N, 128, 128, 3) BGR target crops and (N, 512) or (512,) latents -> swapped BGR crops."""
        if len(crops) == 0:
            return crops.copy()
        latent_rows = np.asarray(latents, np.float32)
        if latent_rows.ndim == 1:
            latent_rows = np.broadcast_to(latent_rows, (len(crops), latent_rows.shape[0]))
        if latent_rows.shape != (len(crops), 512):
            raise ValueError(f"expected latents of shape ({len(crops)}, 512), got {latent_rows.shape}")
        blob = crops_to_blob(crops, self.spec)
        latent_rows = np.ascontiguousarray(latent_rows)

        def run(part: slice) -> np.ndarray:
            feeds = {self.image_input.name: blob[part], self.source_input.name: latent_rows[part]}
            return np.asarray(self.session.run([self.output_name], feeds)[0])

        return blob_to_crops(run_in_batches(len(blob), self.batch, run), self.spec, (0.0, 1.0))
