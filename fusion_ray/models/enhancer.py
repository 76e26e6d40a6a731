"""Face enhancers driven by their registry rows: gfpgan_1.2/1.3/1.4, codeformer, gpen_bfr_256..2048,
restoreformer_plus_plus.

Everything model-specific comes from the :class:`ModelSpec` (template, size, mean/std, output
range), with FaceFusion 3.8.1's processing (``face_enhancer/core.py``, read for facts): ``input``
is the crop as RGB ``(x / 255 - 0.5) / 0.5``, NCHW, plus ``weight`` (float64, shape (1,)) when the
model has that input (codeformer: ``--face-enhancer-weight``); the output, in [-1, 1], is mapped
back to pixels and blended over the original crop (80% by default). Batched when the export's
batch dimension is dynamic, otherwise a loop at its fixed batch.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort

from fusion_ray.errors import ModelError
from fusion_ray.models.common import CropModel, blob_to_crops, crops_to_blob, run_in_batches
from fusion_ray.models.registry import ModelSpec

DEFAULT_ENHANCER_WEIGHT = 0.5
"""FaceFusion's default ``--face-enhancer-weight``."""


def blend_crops(original: np.ndarray, enhanced: np.ndarray, ratio: float) -> np.ndarray:
    """``ratio`` of the enhanced crop over the original (FaceFusion's default is 0.8)."""
    if not 0.0 <= ratio <= 1.0:
        raise ValueError(f"blend ratio: expected a value in [0, 1], got {ratio}")
    mixed = original.astype(np.float32) * (1.0 - ratio) + enhanced.astype(np.float32) * ratio
    return np.clip(np.rint(mixed), 0, 255).astype(np.uint8)


class SpecEnhancer(CropModel):
    """Any enhancer row; ``weight`` is what its ``weight`` input gets (models without one ignore it)."""

    def __init__(self, session: ort.InferenceSession, spec: ModelSpec,
                 weight: float = DEFAULT_ENHANCER_WEIGHT) -> None:
        if spec.kind != "enhancer":
            raise ModelError(f"{spec.name}: expected an enhancer, got a {spec.kind}")
        super().__init__(session, spec, image_input="input")
        self.has_weight = any(i.name == "weight" for i in session.get_inputs())
        self.weight = weight

    def enhance(self, crops: np.ndarray, blend: float, weight: float | None = None) -> np.ndarray:
        """(N, S, S, 3) BGR crops -> enhanced, ``blend`` of the enhanced over the original;
        ``weight`` (None: the one given at construction) goes to the model's ``weight`` input."""
        if len(crops) == 0:
            return crops.copy()
        blob = crops_to_blob(crops, self.spec)
        chosen = self.weight if weight is None else weight
        extra = {"weight": np.array([chosen], np.float64)} if self.has_weight else {}

        def run(part: slice) -> np.ndarray:
            return np.asarray(self.session.run([self.output_name], {self.image_input.name: blob[part], **extra})[0])

        enhanced = blob_to_crops(run_in_batches(len(blob), self.batch, run), self.spec, self.spec.output_range)
        return blend_crops(crops, enhanced, blend)
