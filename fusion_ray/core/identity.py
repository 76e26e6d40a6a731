"""Source identities: pick the source face, embed it, average several images, derive the latent.

Used by the image command (``Engine``), the job driver and the Serve deployments, which split
the work across replicas: the detector cuts :class:`SourceFace` crops, the swapper replica
embeds them in a batch and calls :func:`identity_from`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from fusion_ray.config import EngineConfig
from fusion_ray.core.layout import CropLayout, align_crops, embed_layout, source_crop_layout
from fusion_ray.core.modelset import ModelSet
from fusion_ray.errors import FusionRayError, NoFaceError
from fusion_ray.models.embedder import ArcFaceEmbedder, l2_normalise
from fusion_ray.models.swapper import InswapperSwapper
from fusion_ray.ops.landmarks import alignment_points
from fusion_ray.types import Crop, Embedding, Face, Frame, SourceIdentity, check_frame


@dataclass(frozen=True)
class SourceFace:
    """The chosen face of one source image, cut for the embedder and, for a swapper given the source
    as an image (classic, blendswap, uniface), for the swap (:func:`source_crop_layout`)."""

    embed_crop: Crop
    swap_crop: Crop | None
    score: float


def largest_face(faces: Sequence[Face]) -> Face | None:
    """The face with the biggest box (the source face of a source image), or None."""
    return max(faces, key=lambda f: f.area) if faces else None


def landmarked_face(models: ModelSet, cfg: EngineConfig, frame: Frame, face: Face) -> Face:
    """``face`` aligned as the target faces are: on the 5 points made from its 68 when the
    configured landmarker is loaded and scores the face over ``landmarker.score``, else on the
    detector's 5 (FaceFusion embeds and crops every face, the source's too, on these points)."""
    landmarker = models.landmarker
    if cfg.landmarker.model == "none" or landmarker is None:
        return face
    found = landmarker.detect(frame, face.bbox_xyxy[None], face.landmarks_5[None])
    five = alignment_points(face.landmarks_5, found.points[0], float(found.scores[0]), cfg.landmarker.score)
    return replace(face, landmarks_5=five)


def cut_source_face(frame: Frame, face: Face, cfg: EngineConfig) -> SourceFace:
    """Embedder crop, and the source crop when the configured swapper takes the source as an image
    (the classic swapper's swap crop; a crop-fed row's source template and size)."""
    embed_crop = align_crops(frame, face.landmarks_5[None], embed_layout(cfg))[0][0]
    layout = source_crop_layout(cfg)
    swap_crop = align_crops(frame, face.landmarks_5[None], layout)[0][0] if layout is not None else None
    return SourceFace(embed_crop, swap_crop, face.score)


def embed_faces(embedder: ArcFaceEmbedder, frame: Frame, faces: Sequence[Face]) -> list[Face]:
    """The faces, each with its embedding (reference selection): cut on the embedder's own
    template and size with the same :func:`align_crops` as :func:`cut_source_face`."""
    layout = CropLayout(embedder.template, embedder.crop_size, np.ones((embedder.crop_size,) * 2, np.float32))
    crops, _ = align_crops(frame, np.asarray([f.landmarks_5 for f in faces], np.float32).reshape(-1, 5, 2), layout)
    embeddings = embedder.embed_crops(crops)
    return [face.with_embedding(e) for face, e in zip(faces, embeddings, strict=True)]


def average_embedding(vectors: np.ndarray) -> Embedding:
    """One L2-normalised identity from (k, 512) embeddings of the same person."""
    rows = np.asarray(vectors, np.float32).reshape(len(vectors), -1)
    if not len(rows):
        raise ValueError("average_embedding: expected at least one embedding")
    return l2_normalise(rows.mean(axis=0, keepdims=True))[0]


def embed_source_faces(embedder: ArcFaceEmbedder, faces: Sequence[SourceFace]) -> np.ndarray:
    """(k, 512) embeddings of the source faces, in one batched call."""
    return embedder.embed_crops(np.stack([f.embed_crop for f in faces]))


def identity_from(faces: Sequence[SourceFace], vectors: np.ndarray | None, cfg: EngineConfig,
                  inswapper: InswapperSwapper | None) -> SourceIdentity:
    """The identity of ``faces`` (their embeddings ``vectors``, None without an embedder).

    A swapper given the source as an image (classic, blendswap, uniface) gets the crop of the
    best-scored face. The inswapper's latent is derived here when its model is at hand; otherwise
    (a job driver preparing sources for a pipeline) the swap stage derives it from the embedding.
    """
    if not faces:
        raise NoFaceError("no source image given")
    embedding = average_embedding(vectors) if vectors is not None else None
    crop = latent = None
    if source_crop_layout(cfg) is not None:
        crop = faces[int(np.argmax([f.score for f in faces]))].swap_crop
    else:
        if embedding is None:
            raise FusionRayError(f"{cfg.models.swapper} needs the embedder to prepare a source")
        latent = inswapper.latent(embedding) if inswapper is not None else None
    return SourceIdentity(embedding=embedding, latent=latent, crop=crop, num_images=len(faces))


def prepare_source(models: ModelSet, cfg: EngineConfig, images: Sequence[Frame],
                   names: Sequence[str] | None = None) -> SourceIdentity:
    """Embed the largest face of each source image once; several images average into one identity."""
    if not images:
        raise NoFaceError("no source image given")
    labels = list(names) if names is not None else [f"source #{i + 1}" for i in range(len(images))]
    detector = models.need_detector()
    faces = []
    for image, label in zip(images, labels, strict=True):
        face = largest_face(detector.detect(check_frame(image, label)))
        if face is None:
            raise NoFaceError(f"no face found in source image {label}")
        faces.append(cut_source_face(image, landmarked_face(models, cfg, image, face), cfg))
    vectors = embed_source_faces(models.embedder, faces) if models.embedder is not None else None
    return identity_from(faces, vectors, cfg, models.inswapper)


def prepare_reference(models: ModelSet, cfg: EngineConfig, image: Frame,
                      name: str = "reference image") -> Embedding:
    """The embedding of the largest face in the reference image, cut on the detector's 5 points
    as the target faces it is matched with are (selection runs before the landmark step)."""
    face = largest_face(models.need_detector().detect(check_frame(image, name)))
    if face is None:
        raise NoFaceError(f"no face found in {name}")
    return embed_source_faces(models.need_embedder(), [cut_source_face(image, face, cfg)])[0]
