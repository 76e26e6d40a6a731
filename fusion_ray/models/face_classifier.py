"""The face classifier capability: FaceFusion's ``fairface`` model (gender, age and race of a face),
in one file: its registry row, its stand-in, its wrapper, the selector's filters on its answers, the
``classify`` step and the :class:`~fusion_ray.capability.Capability` that declares them all
(:data:`CAPABILITY`, listed in :data:`fusion_ray.models.capabilities.CAPABILITIES`). Its options
(``--face-selector-gender``, ``-race``, ``-age-start``, ``-age-end``) are rows of
:data:`fusion_ray.options_table.OPTIONS`; they set the selection's fields, which the step reads.

Facts from FaceFusion 3.8.1 (``face_classifier.py``, ``face_selector.py``, ``types.py``,
``choices.py``, ``program.py``; read for facts, not copied):

- The file is ``fairface.onnx`` of facefusion-assets release ``models-3.0.0``, its CRC32 in
  ``fairface.hash`` beside it (vendor dchen236, licence CC-BY-4.0).
- Input ``input``: the face aligned by its 5 points to the ``arcface_112_v2`` template at
  224x224 (``cv2.warpAffine``, ``INTER_AREA``, replicated border), RGB / 255, minus ImageNet's
  mean (0.485, 0.456, 0.406), over its standard deviation (0.229, 0.224, 0.225), NCHW.
- Three outputs, in this order: the race id, the gender id and the age id, one integer per face
  (FaceFusion reads them by position, so their names are not in its source; this project's
  stand-in calls them ``race_id``, ``gender_id``, ``age_id`` and the wrapper reads by position).
- Gender id 1 is female, any other male. Race ids: 1 black, 2 latino, 3 and 4 asian, 5 indian,
  6 arabic, any other (0) white. Age ids 0-7 are the ranges 0-2, 3-9, 10-19, 20-29, 30-39,
  40-49, 50-59, 60-69 (Python ranges: the end excluded), any other 70-100.
- The selector keeps a face whose gender (race) is the one asked for, and one whose age range
  meets ``range(age_start, age_end)`` (``--face-selector-age-start`` / ``-end``, 0 to 100).

The stand-in (:func:`make_fairface_standin`) is NOT the real model: it classifies nothing. It has
the real file's input name and shape and three int64 outputs in the real value ranges, computed
from the crop's mean colour (deterministic), and carries the ``fusion_ray.stand_in`` label.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, get_args

import cv2
import numpy as np
import onnx
from onnx import TensorProto, helper

from fusion_ray.capability import Capability, Step
from fusion_ray.config import Gender, Race
from fusion_ray.errors import is_fatal
from fusion_ray.models.onnx_graph import Graph
from fusion_ray.models.onnx_info import is_stand_in_metadata
from fusion_ray.models.registry_rows import facefusion_row
from fusion_ray.models.spec import ModelSpec
from fusion_ray.ops.align import align_matrix
from fusion_ray.types import Frame, Landmarks5

if TYPE_CHECKING:
    import onnxruntime as ort

    from fusion_ray.config import EngineConfig
    from fusion_ray.core.facebatch import FrameBatch
    from fusion_ray.core.steps import Rows, Tools

log = logging.getLogger(__name__)
KIND = "classifier"
"""The model kind of this capability (``ModelSet["classifier"]``)."""

GENDERS: tuple[Gender, ...] = get_args(Gender)
RACES: tuple[Race, ...] = get_args(Race)
AgeRange = tuple[int, int]
"""An age range as FaceFusion's ``range``: the first age in it and the first after it."""

AGE_RANGES: tuple[AgeRange, ...] = ((0, 2), (3, 9), (10, 19), (20, 29), (30, 39), (40, 49), (50, 59), (60, 69),
                                    (70, 100))
"""The age range of each age id (an id past the last is the last)."""
_RACE_OF_ID: tuple[Race, ...] = ("white", "black", "latino", "asian", "asian", "indian", "arabic")
IMAGENET_MEAN = (0.485 * 255, 0.456 * 255, 0.406 * 255)
IMAGENET_STD = (0.229 * 255, 0.224 * 255, 0.225 * 255)
CROP_SIZE = 224

FAIRFACE = facefusion_row(
    "fairface", "models-3.0.0", KIND, CROP_SIZE, IMAGENET_MEAN, IMAGENET_STD,
    ("CC-BY-4.0 (FairFace, dchen236)", "https://github.com/dchen236/FairFace"), 0.0,
    "FairFace gender, age and race classifier: the face aligned to arcface_112_v2 at 224x224, RGB / 255, "
    "ImageNet mean/std, NCHW into 'input'; three outputs by position: race id, gender id, age id.",
    template="arcface_112_v2")
"""The registry row of the real model (optional: found by name, downloaded when asked for)."""
CLASSIFIER_SPECS: tuple[ModelSpec, ...] = (FAIRFACE,)


@dataclass(frozen=True)
class FaceAttributes:
    """What the classifier says of one face."""

    gender: Gender
    age: AgeRange
    race: Race


def gender_of(gender_id: int) -> Gender:
    return "female" if int(gender_id) == 1 else "male"


def age_of(age_id: int) -> AgeRange:
    return AGE_RANGES[int(age_id)] if 0 <= int(age_id) < len(AGE_RANGES) else AGE_RANGES[-1]


def race_of(race_id: int) -> Race:
    return _RACE_OF_ID[int(race_id)] if 0 <= int(race_id) < len(_RACE_OF_ID) else "white"


def classifier_crop(frame: Frame, landmarks_5: Landmarks5, spec: ModelSpec = FAIRFACE) -> np.ndarray:
    """The face cut as the classifier takes it: aligned to the row's template, ``INTER_AREA``."""
    matrix = align_matrix(landmarks_5, spec.template or "arcface_112_v2", spec.crop_size)
    crop = cv2.warpAffine(frame, matrix, (spec.crop_size, spec.crop_size), flags=cv2.INTER_AREA,
                          borderMode=cv2.BORDER_REPLICATE)
    return np.asarray(crop, np.uint8)


class FairFaceClassifier:
    """The fairface model: (N, 224, 224, 3) BGR crops in, one :class:`FaceAttributes` per crop out,
    all crops in one call where the model's batch is dynamic."""

    def __init__(self, session: ort.InferenceSession, spec: ModelSpec = FAIRFACE) -> None:
        from fusion_ray.models.common import fixed_batch  # (the registry imports this file's row)
        from fusion_ray.models.session import read_metadata

        self.session = session
        self.spec = spec
        self.input = session.get_inputs()[0]
        self.batch = fixed_batch(self.input)
        self.output_names = [o.name for o in session.get_outputs()][:3]
        self.stand_in = is_stand_in_metadata(read_metadata(session))

    def classify(self, crops: np.ndarray) -> list[FaceAttributes]:
        from fusion_ray.models.common import crops_to_blob, run_in_batches

        if len(crops) == 0:
            return []
        blob = crops_to_blob(np.asarray(crops, np.uint8), self.spec)

        def run(part: slice) -> np.ndarray:
            outputs = self.session.run(self.output_names, {self.input.name: blob[part]})
            return np.stack([np.asarray(o).reshape(-1).astype(np.int64) for o in outputs], axis=1)

        ids = run_in_batches(len(crops), self.batch, run)  # (N, 3): race, gender, age
        return [FaceAttributes(gender_of(g), age_of(a), race_of(r)) for r, g, a in ids.tolist()]

    def classify_faces(self, frame: Frame, landmarks_5: Sequence[Landmarks5]) -> list[FaceAttributes]:
        """The attributes of each face of ``frame`` by its 5 landmarks."""
        crops = np.asarray([classifier_crop(frame, points, self.spec) for points in landmarks_5], np.uint8)
        return self.classify(crops.reshape(-1, self.spec.crop_size, self.spec.crop_size, 3))


def kept_by_attributes(attributes: Sequence[FaceAttributes], *, gender: str | None = None, race: str | None = None,
                       age_start: int | None = None, age_end: int | None = None) -> list[int]:
    """Positions of the faces FaceFusion's selector keeps: of ``gender`` and of ``race`` where given,
    and whose age range meets ``[age_start, age_end)`` where either is given (0 and 100 otherwise)."""
    if gender is not None and gender not in GENDERS:
        raise ValueError(f"face selector gender {gender!r}; expected one of {', '.join(GENDERS)}")
    if race is not None and race not in RACES:
        raise ValueError(f"face selector race {race!r}; expected one of {', '.join(RACES)}")
    ages = None
    if age_start is not None or age_end is not None:
        ages = (0 if age_start is None else age_start, 100 if age_end is None else age_end)
    return [i for i, face in enumerate(attributes)
            if (gender is None or face.gender == gender) and (race is None or face.race == race)
            and (ages is None or max(face.age[0], ages[0]) < min(face.age[1], ages[1]))]


def make_fairface_standin(seed: int = 0) -> onnx.ModelProto:
    """A STAND-IN for ``fairface.onnx``: ``input`` float32 [N, 3, 224, 224] -> ``race_id``,
    ``gender_id``, ``age_id`` int64 [N] in the real ranges (0-6, 0-1, 0-8): the argmax of a fixed
    seeded linear map of the crop's mean colour. Classifies nothing."""
    from fusion_ray.models.onnx_graph import finish_standin

    rng = np.random.default_rng([int(seed), 27])
    g = Graph("fairface")
    colour = g.op("ReduceMean", ["input"], "colour", axes=[2, 3], keepdims=0)  # (N, 3)
    outputs = []
    for name, classes in (("race_id", 7), ("gender_id", 2), ("age_id", 9)):
        weight = g.const(f"{name}_weight", rng.standard_normal((3, classes)).astype(np.float32))
        bias = g.const(f"{name}_bias", rng.standard_normal(classes).astype(np.float32))
        logits = g.op("Add", [g.op("MatMul", [colour, weight], f"{name}_mm"), bias], f"{name}_logits")
        g.op("ArgMax", [logits], out=name, axis=1, keepdims=0)
        outputs.append(helper.make_tensor_value_info(name, TensorProto.INT64, ["N"]))
    inputs = [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 3, CROP_SIZE, CROP_SIZE])]
    return finish_standin("fairface", "light", seed, g, inputs, outputs)


# ------------------------------------------------------------------ the step
def classify_step(tools: Tools, rows: Rows, batch: FrameBatch) -> FrameBatch:
    """Each detected frame's faces less those the classifier's answers drop, by the selection's
    gender, race and age (the config's: FaceFusion filters before it chooses). A frame whose faces
    were given (a tracking read, faces followed on crops) keeps them; a frame whose classification
    fails is marked (stage ``detect``) and has no faces."""
    classifier = tools.models.get(KIND)
    selection = tools.cfg.selection
    detected = batch.counter("faces_detected").copy()
    keep = np.ones(len(batch.faces), bool)
    for row in range(len(batch.frames)):
        idx = np.flatnonzero(batch.faces.frame_index == row)
        if rows.is_given(row) or batch.errors[row] or not len(idx) or not selection.classifies:
            continue
        try:
            if not isinstance(classifier, FairFaceClassifier):
                raise ValueError("selection by gender, race or age needs the face classifier")
            attributes = classifier.classify_faces(batch.frames[row], list(batch.faces.landmarks_5[idx]))
            kept = kept_by_attributes(attributes, gender=selection.gender, race=selection.race,
                                      age_start=selection.age_start, age_end=selection.age_end)
        except Exception as exc:
            if is_fatal(exc):
                raise
            batch.errors[row] = f"detect: {type(exc).__name__}: {exc}"
            log.warning("frame %d failed: %s", row, batch.errors[row])
            kept = []
        keep[idx] = False
        keep[idx[kept]] = True
        detected[row] = len(kept)
    return replace(batch, faces=batch.faces.take(np.flatnonzero(keep))).counted(faces_detected=detected)


def _classifies(cfg: EngineConfig) -> bool:
    return cfg.selection.classifies


def _rows(cfg: EngineConfig) -> tuple[str, ...]:
    return (FAIRFACE.name,)


def _wrap(session: ort.InferenceSession, spec: ModelSpec, cfg: EngineConfig) -> FairFaceClassifier:
    return FairFaceClassifier(session, spec)


CAPABILITY = Capability(
    "face classifier", KIND, CLASSIFIER_SPECS, _rows, _wrap,
    steps=(Step("classify", "detect", classify_step, ("frame", "faces"), ("faces", "faces_detected"), model=KIND,
                enabled=_classifies),),
    standins={FAIRFACE.name: make_fairface_standin})
"""The face classifier: the fairface row, loaded when the selection filters by gender, race or
age, its ``classify`` step placed right after detection."""
