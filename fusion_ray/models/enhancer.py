"""GFPGAN 1.4 face enhancer: ffhq_512 crops in, restored crops out (blended with the original)."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort

from fusion_ray.models.common import CropModel, blob_to_crops, crops_to_blob, run_in_batches
from fusion_ray.models.registry import ModelSpec


def blend_crops(original: np.ndarray, enhanced: np.ndarray, ratio: float) -> np.ndarray:
    """``ratio`` of the enhanced crop over the original (FaceFusion's default is 0.8)."""
    if not 0.0 <= ratio <= 1.0:
        raise ValueError(f"blend ratio: expected a value in [0, 1], got {ratio}")
    mixed = original.astype(np.float32) * (1.0 - ratio) + enhanced.astype(np.float32) * ratio
    return np.clip(np.rint(mixed), 0, 255).astype(np.uint8)


class GfpganEnhancer(CropModel):
    """The GFPGAN 1.4 enhancer; batched when the export's batch dimension is dynamic."""

    def __init__(self, session: ort.InferenceSession, spec: ModelSpec) -> None:
        super().__init__(session, spec)

    def enhance(self, crops: np.ndarray, blend: float) -> np.ndarray:
        """(N, 512, 512, 3) BGR crops -> enhanced crops, ``blend`` of the enhanced over the original."""
        if len(crops) == 0:
            return crops.copy()
        blob = crops_to_blob(crops, self.spec)

        def run(part: slice) -> np.ndarray:
            return np.asarray(self.session.run([self.output_name], {self.image_input.name: blob[part]})[0])

        enhanced = blob_to_crops(run_in_batches(len(blob), self.batch, run), self.spec, (-1.0, 1.0))
        return blend_crops(crops, enhanced, blend)
