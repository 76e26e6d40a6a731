"""ArcFace identity embedder (w600k_r50): arcface_112_v2 crops in, L2-normalised 512-d vectors out."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort

from fusion_ray.models.common import CropModel, FloatArray, crops_to_blob, run_in_batches
from fusion_ray.models.registry import ModelSpec
from fusion_ray.types import Crop


def l2_normalise(vectors: np.ndarray) -> FloatArray:
    """Rows scaled to unit length (zero rows stay zero)."""
    norms = np.linalg.norm(vectors, axis=-1, keepdims=True)
    return (vectors / np.maximum(norms, 1e-12)).astype(np.float32)


class ArcFaceEmbedder(CropModel):
    """Batched ArcFace embedder; batches of any size when the export's batch dim is dynamic."""

    def __init__(self, session: ort.InferenceSession, spec: ModelSpec) -> None:
        super().__init__(session, spec)

    def embed_crops(self, crops: np.ndarray) -> FloatArray:
        """(N, 112, 112, 3) BGR crops -> (N, 512) unit vectors."""
        if len(crops) == 0:
            return np.zeros((0, 512), np.float32)
        blob = crops_to_blob(crops, self.spec)

        def run(part: slice) -> np.ndarray:
            return np.asarray(self.session.run([self.output_name], {self.image_input.name: blob[part]})[0])

        return l2_normalise(run_in_batches(len(blob), self.batch, run).reshape(len(blob), -1))

    def embed_crop(self, crop: Crop) -> FloatArray:
        return self.embed_crops(crop[None])[0]
