"""Wrappers driven by registry rows: the optional swappers and their embedding converters.

Everything model-specific comes from the :class:`ModelSpec` (template, size, mean/std, source
form, converter, output range, weight input), with FaceFusion 3.8.1's processing (read for
facts, ``face_swapper/core.py`` and ``face_enhancer/core.py``):

- swapper ``target``: the crop as RGB, ``(pixel - mean) / std``, NCHW; the output mapped from the
  row's ``output_range`` back to pixels.
- swapper ``source``: an L2-normalised ArcFace embedding (hyperswap); the embedding through the
  row's converter, normalised unless the row says not (ghost); or, for blendswap and uniface, the
  source face as an RGB / 255 crop of the row's source template and size. Embeddings are balanced
  against the target's with ``--face-swapper-weight`` (:mod:`fusion_ray.ops.source_weight`).

fusion_ray's embeddings are already L2-normalised where FaceFusion feeds its converters the raw
ArcFace embedding (norm about 20): the converted vector's direction is the same, its length is
not, which matters only for ghost (whose converted embedding is not normalised).
inswapper keeps its own wrapper (:class:`fusion_ray.models.swapper.InswapperSwapper`); every enhancer
row runs through :class:`fusion_ray.models.enhancer.SpecEnhancer`.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort

from fusion_ray.errors import ModelError
from fusion_ray.models.common import (
    CropModel,
    FloatArray,
    blob_to_crops,
    crops_to_blob,
    fixed_batch,
    input_by_rank,
    run_in_batches,
)
from fusion_ray.models.embedder import l2_normalise
from fusion_ray.models.onnx_info import is_stand_in_metadata
from fusion_ray.models.registry import ModelSpec
from fusion_ray.models.session import NotPicklable, read_metadata
from fusion_ray.ops.source_weight import DEFAULT_SWAPPER_WEIGHT, balance_embedding


class EmbeddingConverter(NotPicklable):
    """A ``crossface_*`` converter: (N, 512) ArcFace embeddings -> (N, 512) in a swapper's space."""

    def __init__(self, session: ort.InferenceSession, spec: ModelSpec) -> None:
        if spec.kind != "converter":
            raise ModelError(f"{spec.name}: expected an embedding converter, got a {spec.kind}")
        self.session = session
        self.spec = spec
        self.input = input_by_rank(session, 2, "input", spec.name)
        self.output_name = session.get_outputs()[0].name
        self.batch = fixed_batch(self.input)
        self.stand_in = is_stand_in_metadata(read_metadata(session))

    def convert(self, embeddings: np.ndarray) -> FloatArray:
        rows = np.ascontiguousarray(np.asarray(embeddings, np.float32).reshape(-1, 512))

        def run(part: slice) -> np.ndarray:
            return np.asarray(self.session.run([self.output_name], {self.input.name: rows[part]})[0])

        return run_in_batches(len(rows), self.batch, run).reshape(len(rows), -1).astype(np.float32)


def source_crop_blob(source_crops: np.ndarray, size: int) -> FloatArray:
    """(N, s, s, 3) BGR uint8 source crops -> (N, 3, s, s) float32 RGB / 255 (blendswap, uniface)."""
    if source_crops.ndim != 4 or source_crops.shape[1:] != (size, size, 3):
        raise ValueError(f"expected source crops of shape (N, {size}, {size}, 3), got {source_crops.shape}")
    return np.ascontiguousarray((source_crops[..., ::-1].astype(np.float32) / 255.0).transpose(0, 3, 1, 2))


class SpecSwapper(CropModel):
    """An optional swapper (hyperswap, simswap, ghost, hififace, blendswap, uniface) from its row."""

    def __init__(self, session: ort.InferenceSession, spec: ModelSpec,
                 converter: EmbeddingConverter | None = None) -> None:
        if spec.kind != "swapper" or spec.source_form in (None, "inswapper_latent"):
            raise ModelError(f"{spec.name}: not a swapper this wrapper runs (inswapper has its own)")
        if spec.source_form == "converted_embedding" and (converter is None or converter.spec.name != spec.converter):
            raise ModelError(f"{spec.name}: needs its embedding converter {spec.converter}")
        super().__init__(session, spec, image_input="target")
        self.source_input = next((i for i in session.get_inputs() if i.name == "source"), None)
        if self.source_input is None:
            raise ModelError(f"{spec.name}: expected an input named 'source'")
        self.converter = converter

    def source_rows(self, embeddings: np.ndarray | None = None, *, source_crops: np.ndarray | None = None,
                    target_embeddings: np.ndarray | None = None,
                    weight: float = DEFAULT_SWAPPER_WEIGHT) -> FloatArray:
        """The ``source`` input for N faces: from (N, 512) source embeddings (balanced against the
        targets' when given), or from (N, s, s, 3) BGR source crops for the crop-fed swappers."""
        if self.spec.source_form == "crop":
            if source_crops is None:
                raise ValueError(f"{self.spec.name}: takes the source as a crop ({self.spec.source_template})")
            return source_crop_blob(source_crops, self.spec.source_size)
        if embeddings is None:
            raise ValueError(f"{self.spec.name}: takes the source as an embedding")
        rows = np.asarray(embeddings, np.float32).reshape(-1, 512)
        if self.converter is not None:
            rows = self.converter.convert(rows)
        if self.spec.normalise_embeddings:
            rows = l2_normalise(rows)
        if target_embeddings is None:
            return rows
        targets = np.asarray(target_embeddings, np.float32).reshape(rows.shape)
        return balance_embedding(rows, targets, weight, normalise_target=self.spec.normalise_embeddings)

    def swap(self, crops: np.ndarray, sources: np.ndarray) -> np.ndarray:
        """(N, S, S, 3) BGR target crops and N :meth:`source_rows` -> (N, S, S, 3) swapped BGR crops."""
        if len(crops) == 0:
            return crops.copy()
        if len(sources) != len(crops):
            raise ValueError(f"expected {len(crops)} source rows, got {len(sources)}")
        blob = crops_to_blob(crops, self.spec)
        source_rows = np.ascontiguousarray(sources, dtype=np.float32)

        def run(part: slice) -> np.ndarray:
            feeds = {self.image_input.name: blob[part], "source": source_rows[part]}
            return np.asarray(self.session.run([self.output_name], feeds)[0])

        return blob_to_crops(run_in_batches(len(blob), self.batch, run), self.spec, self.spec.output_range)
