"""Typed configuration. Loaded once at the edge (CLI, job, service) and passed down explicitly."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from fusion_ray.errors import ConfigError
from fusion_ray.types import DetectorAngle, FaceSelectorOrder, SelectMode

# Settings of the face tracker (wired into the engine config as ``tracking``). Units: frames for
# counts, eye distances (the distance between the two eye landmarks of a face) for landmark
# distances, Hz (at the clip's frame rate) for the One Euro filter.


class TrackingConfig(BaseModel):
    """How faces are linked, re-detected, gap-filled and smoothed through a video."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = Field(default=True, description="Track faces through videos (off: detect every frame).")
    full_every: int = Field(
        default=10, ge=1, description="N: a full-frame detection at least every N frames (catches new faces); "
        "in between each tracked face is re-detected on a crop around its predicted position.")
    roi_canvas: int = Field(default=192, ge=64, le=640, description="Detector canvas of a re-detection crop "
                            "(square, a multiple of 32).")
    roi_growth: float = Field(default=1.6, ge=1.2, le=4.0,
                              description="Side of a re-detection crop over the longest side of the predicted box.")
    roi_hold: float = Field(default=0.05, ge=0.0, le=0.5, description="A track's crop stays where it is while "
                            "the new one would move by at most this fraction of its side (a still face then "
                            "gives the detector the same pixels: no jitter from the crop moving).")
    roi_min_score: float = Field(default=0.6, gt=0.0, lt=1.0, description="A re-detected face scoring below this "
                                 "asks for a full-frame detection on the next frame.")
    roi_skip_motion: float = Field(
        default=0.1, ge=0.0, le=1.0, description="Offline: a track seen on the previous frame, scoring at least "
        "roi_skip_score, away from other faces and predicted to move at most this many eye distances skips its "
        "crop on every other frame (interpolated there from its detections on both sides); 0 turns this off.")
    roi_skip_score: float = Field(default=0.75, gt=0.0, lt=1.0,
                                  description="Smallest last score of a track that may skip a crop.")
    max_gap: int = Field(default=3, ge=0, description="G: a face missed for at most G frames between two "
                         "detections of its track is interpolated (offline) or held (online).")
    lookback: bool = Field(default=True, description="Offline: a face found by a full detection is followed back "
                           "on crops through the frames since the previous one (it entered in between).")
    keep_lost: int = Field(default=30, ge=0, description="Frames an unmatched track is kept (and predicted) so "
                           "that a face hidden or crossed by another one gets its id back.")
    max_landmark_distance: float = Field(
        default=1.0, gt=0.0, description="Largest mean landmark distance from a track's prediction to a "
        "detection that may match it, in eye distances (it grows with the frames the track was lost).")
    min_iou: float = Field(default=0.05, ge=0.0, lt=1.0,
                           description="Smallest box IoU between a track's prediction and a detection it matches.")
    smoothing: Literal["auto", "one_euro", "window", "off"] = Field(
        default="auto", description="Landmark smoothing along each track: 'auto' uses the centred window "
        "offline (video jobs, later frames known) and the One Euro filter online (live streams).")
    one_euro_min_cutoff: float = Field(default=1.0, gt=0.0, description="One Euro minimum cutoff (Hz): lower "
                                       "removes more jitter at rest.")
    one_euro_beta: float = Field(default=10.0, ge=0.0, description="One Euro speed coefficient (per eye distance "
                                 "per second): higher follows fast motion with less lag.")
    one_euro_d_cutoff: float = Field(default=1.0, gt=0.0, description="One Euro cutoff of the speed estimate (Hz).")
    window_radius: int = Field(default=2, ge=1, le=15, description="Centred window: frames on each side.")
    window_order: int = Field(default=1, ge=0, le=2, description="Centred window: degree of the local "
                              "polynomial fit (1: a moving average inside, unbiased for steady motion at the ends).")

    @model_validator(mode="after")
    def _canvas_multiple_of_32(self) -> TrackingConfig:
        if self.roi_canvas % 32:
            raise ValueError(f"roi_canvas must be a multiple of 32, got {self.roi_canvas}")
        return self


class _Config(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)  # nan is no setting


Precision = Literal["auto", "fp32", "fp16", "int8"]
PrecisionComponent = Literal["detector", "embedder", "swapper", "enhancer"]


class RuntimeConfig(_Config):
    """How ONNX Runtime sessions are created."""

    providers: list[Literal["tensorrt", "cuda", "cpu"]] | None = Field(
        default=None,
        description="Execution providers in order of preference; None chooses by availability "
        "(TensorRT, then CUDA, then CPU).")
    intra_op_threads: int | None = Field(
        default=None, ge=1, description="Threads per session; None derives it from the caller's CPU budget.")
    tensorrt_fp16: bool = Field(
        default=True, description="Let precision 'auto' build fp16 TensorRT engines (precision fp16/fp32 "
        "in models.precision decide for themselves).")
    tensorrt_cache_dir: Path | None = Field(
        default=None, description="TensorRT engine and timing cache; None puts it beside the models.")
    tensorrt_timing_cache: bool = Field(
        default=True, description="Keep TensorRT's layer timing cache beside the engines (faster rebuilds).")
    cudnn_conv_algo_search: Literal["EXHAUSTIVE", "HEURISTIC", "DEFAULT"] = Field(
        default="HEURISTIC", description="CUDA provider: how cuDNN picks convolution algorithms. EXHAUSTIVE "
        "benchmarks them for every new input shape (the detector's canvas changes with the frame's shape, "
        "so first calls stall); HEURISTIC asks cuDNN's heuristics.")
    device_id: int = Field(default=0, ge=0, description="GPU index for CUDA / TensorRT.")


class ModelsConfig(_Config):
    """Where the model files are and which ones to use."""

    models_dir: Path | None = Field(
        default=None, description="Model directory; None uses FUSION_RAY_MODELS, then the per-user cache.")
    paths: dict[str, Path] = Field(
        default_factory=dict, description="Explicit file per model name, e.g. {'scrfd_2.5g': '/x/scrfd.onnx'}.")
    detector: str = "scrfd_2.5g"
    embedder: str = "arcface_w600k_r50"
    swapper: str = "inswapper_128"
    enhancer: str = "gfpgan_1.4"
    precision: dict[PrecisionComponent, Precision] = Field(
        default_factory=dict, description="Precision per component (auto|fp32|fp16|int8; missing: auto). "
        "auto: int8 for the detector on CPU when an INT8 copy is built (`fusion-ray models quantize`; "
        "else fp32), fp16 on CUDA/TensorRT where the model has an fp16 form, else fp32. int8 is for the "
        "detector only, and builds its copy when none is.")
    calibration: list[Path] = Field(
        default_factory=list, description="Photos (files or folders) INT8 models are calibrated from; "
        "empty: the 'calibration' folder of the models directory.")
    int8_weight_bits: Literal["auto", 7, 8] = Field(
        default="auto", description="Weight width of the INT8 detector: auto builds 8-bit weights on CPUs "
        "with VNNI and 7-bit ones elsewhere (8-bit products saturate in ONNX Runtime's AVX2 and AVX-512 "
        "kernels without VNNI, and the detector then misses faces).")
    calibration_seed: list[Path] = Field(
        default_factory=list, description="Images or videos an INT8 build asked for by name calibrates on "
        "when no calibration photos are set (the command's own input, set by the CLI); read in memory, "
        "never saved.")

    @model_validator(mode="after")
    def _int8_is_for_the_detector(self) -> ModelsConfig:
        wrong = sorted(c for c, p in self.precision.items() if p == "int8" and c != "detector")
        if wrong:
            raise ValueError(f"precision int8 is for the detector only, got it for {', '.join(wrong)}")
        return self


MAX_DETECTOR_SIZE = 4096
"""Largest detector input side: a 4096 x 4096 canvas is 200 MB of float32 (320000 asked for 1.2 TB)."""


class DetectorConfig(_Config):
    """SCRFD detection settings."""

    size: int = Field(default=640, ge=64, le=MAX_DETECTOR_SIZE,
                      description="Longest side of the detector input, a multiple of 32 (64 to 4096).")
    canvas: Literal["fit", "square"] = Field(
        default="fit", description="'fit' pads the frame only to the next multiple of 32 keeping its aspect "
        "(dynamic-size exports); 'square' uses a size x size canvas. Fixed-size exports always use their size.")
    score_threshold: float = Field(default=0.5, gt=0.0, lt=1.0)
    nms_iou: float = Field(default=0.4, gt=0.0, lt=1.0)
    max_faces: int = Field(default=32, ge=1, description="Keep at most this many faces per frame (highest scores).")
    angles: tuple[DetectorAngle, ...] = Field(
        default=(0,), min_length=1, description="FaceFusion's --face-detector-angles: the frame is searched "
        "turned by each of these angles (degrees counter-clockwise) and the faces found are mapped back and "
        "merged; (0,): the frame as it is.")

    @model_validator(mode="after")
    def _size_multiple_of_32(self) -> DetectorConfig:
        if self.size % 32:
            raise ValueError(f"detector size must be a multiple of 32, got {self.size}")
        return self


Gender = Literal["female", "male"]
"""FaceFusion's genders (``--face-selector-gender``), as its face classifier tells them."""
Race = Literal["white", "black", "latino", "asian", "indian", "arabic"]
"""FaceFusion's races (``--face-selector-race``), as its face classifier tells them."""


class SelectionConfig(_Config):
    """Which target faces are swapped."""

    mode: SelectMode = "all"
    index: int = Field(default=0, ge=0, description="Face index in reading order for mode 'index'.")
    reference_path: Path | None = Field(default=None, description="Image of the face to swap, for mode 'reference'.")
    max_distance: float = Field(default=0.6, gt=0.0, le=2.0, description="Cosine distance limit for 'reference'.")
    order: FaceSelectorOrder | None = Field(
        default=None, description="FaceFusion's --face-selector-order: the order modes 'all', 'index' and "
        "'reference' put the faces in; None: reading order (left to right, then top to bottom).")
    gender: Gender | None = Field(default=None, description="FaceFusion's --face-selector-gender: only faces "
                                  "the fairface classifier calls so (None: any).")
    race: Race | None = Field(default=None, description="FaceFusion's --face-selector-race (None: any).")
    age_start: int | None = Field(default=None, ge=0, le=100, description="FaceFusion's --face-selector-age-start: "
                                  "only faces whose age range meets [age_start, age_end) (None: 0).")
    age_end: int | None = Field(default=None, ge=0, le=100, description="FaceFusion's --face-selector-age-end "
                                "(None: 100).")

    @property
    def classifies(self) -> bool:
        """Whether the selection filters by the face classifier's answers (gender, race or age)."""
        return any(v is not None for v in (self.gender, self.race, self.age_start, self.age_end))

    @model_validator(mode="after")
    def _reference_needs_path(self) -> SelectionConfig:
        if self.mode == "reference" and self.reference_path is None:
            raise ValueError("selection mode 'reference' needs reference_path")
        return self


class SwapConfig(_Config):
    """The swapper and how its output is blended back (the box mask's padding and blur: FaceFusion's
    ``--face-mask-padding`` / ``--face-mask-blur``)."""

    swapper: Literal["inswapper", "classic"] = "inswapper"
    weight: float = Field(default=0.5, ge=0.0, le=1.0, description="FaceFusion's --face-swapper-weight: "
                          "the balance of the source embedding against the target's (0.5 by default).")
    pixel_boost: int | None = Field(
        default=None, ge=128, le=1024, description="FaceFusion's --face-swapper-pixel-boost in pixels (128 to 1024, a multiple "
        "of the model's size); None: the model's own size.")
    mask_padding: tuple[float, float, float, float] = Field(
        default=(0.0, 0.0, 0.0, 0.0), description="Box mask padding (top, right, bottom, left), fractions.")
    mask_blur: float = Field(default=0.3, ge=0.0, le=1.0, description="Box mask feather, fraction of half the crop.")
    classic_crop_size: int = Field(default=256, ge=64, description="Crop size the classic swapper works at.")
    poisson: bool = Field(default=False, description="Classic swapper: Poisson-blend instead of a feathered paste.")


class EnhanceConfig(_Config):
    """Optional face enhancement after the swap."""

    enabled: bool = False
    blend: float = Field(default=0.8, ge=0.0, le=1.0, description="Share of the enhanced face in the result.")
    weight: float = Field(default=0.5, ge=0.0, le=1.0, description="FaceFusion's --face-enhancer-weight: "
                          "the value of the enhancer's optional 'weight' input.")


MaskType = Literal["box", "occlusion", "area", "region"]
MaskArea = Literal["upper-face", "lower-face", "mouth"]
MaskRegion = Literal["skin", "left-eyebrow", "right-eyebrow", "left-eye", "right-eye", "glasses", "nose", "mouth",
                     "upper-lip", "lower-lip"]
MASK_AREAS: tuple[MaskArea, ...] = ("upper-face", "lower-face", "mouth")
MASK_REGIONS: tuple[MaskRegion, ...] = ("skin", "left-eyebrow", "right-eyebrow", "left-eye", "right-eye", "glasses",
                                        "nose", "mouth", "upper-lip", "lower-lip")


def _box_only() -> list[MaskType]:
    return ["box"]


class MaskConfig(_Config):
    """FaceFusion's face masks (``--face-mask-*``) and Deep-Live-Cam's mouth mask; a face is pasted
    through the element-wise minimum of every mask it gets."""

    types: list[MaskType] = Field(default_factory=_box_only, min_length=1,
                                  description="--face-mask-types: box, occlusion, area, region.")
    areas: list[MaskArea] = Field(default_factory=lambda: list(MASK_AREAS), min_length=1,
                                  description="--face-mask-areas (mask type 'area', needs 68 points).")
    regions: list[MaskRegion] = Field(default_factory=lambda: list(MASK_REGIONS), min_length=1,
                                      description="--face-mask-regions (mask type 'region').")
    occluder_model: Literal["xseg_1", "xseg_2", "xseg_3"] = "xseg_1"
    parser_model: Literal["bisenet_resnet_18", "bisenet_resnet_34"] = "bisenet_resnet_34"
    mouth_mask: bool = Field(default=False, description="Keep the target's own mouth over the swap "
                             "(Deep-Live-Cam's mouth mask; needs 68 points).")


class LandmarkerConfig(_Config):
    """The 68-point landmarker (FaceFusion's ``--face-landmarker-*``)."""

    model: Literal["none", "2dfan4", "dlib_68"] = Field(
        default="none", description="none: the detector's 5 points only; 2dfan4 (ONNX) or dlib_68 (dlib's "
        "shape predictor, the 'landmarks' extra). Area masks and the mouth mask need one.")
    score: float = Field(default=0.5, ge=0.0, le=1.0, description="--face-landmarker-score: over it, the 5 "
                         "alignment points come from the 68.")


class EngineConfig(_Config):
    """Everything the frame-level engine needs."""

    models: ModelsConfig = ModelsConfig()
    runtime: RuntimeConfig = RuntimeConfig()
    detector: DetectorConfig = DetectorConfig()
    selection: SelectionConfig = SelectionConfig()
    swap: SwapConfig = SwapConfig()
    enhance: EnhanceConfig = EnhanceConfig()
    masks: MaskConfig = MaskConfig()
    landmarker: LandmarkerConfig = LandmarkerConfig()
    tracking: TrackingConfig = Field(
        default=TrackingConfig(), description="Face tracking through videos (Ray Data jobs); images never "
        "track. 'on' / 'off' (or true / false) stand for the defaults with tracking enabled or not.")

    @property
    def tracks_faces(self) -> bool:
        """Whether videos are tracked: tracking is on and the selection does not filter by the face
        classifier (the tracked read does not classify: such videos detect every frame)."""
        return self.tracking.enabled and not self.selection.classifies

    @field_validator("tracking", mode="before")
    @classmethod
    def _tracking_on_off(cls, value: Any) -> Any:
        """``tracking: on|off`` (YAML reads them as booleans) for ``{enabled: ...}``."""
        if isinstance(value, str) and value.strip().lower() in ("on", "off"):
            value = value.strip().lower() == "on"
        return {"enabled": value} if isinstance(value, bool) else value

    @model_validator(mode="after")
    def _boost_is_for_models(self) -> EngineConfig:
        if self.swap.pixel_boost is not None and self.swap.swapper == "classic":
            raise ValueError("pixel boost is for model swappers; the classic swapper works at classic_crop_size")
        return self

    @model_validator(mode="after")
    def _points_for_masks(self) -> EngineConfig:
        needs = [n for n, on in (("area masks", "area" in self.masks.types), ("the mouth mask", self.masks.mouth_mask))
                 if on]
        if needs and self.landmarker.model == "none":
            raise ValueError(f"{' and '.join(needs)} need 68 points: choose a face landmarker model "
                             "(--face-landmarker-model dlib_68 or 2dfan4)")
        return self

    def in_ray_actor(self, gets_gpu: bool) -> EngineConfig:
        """This config as seen from a Ray actor (a pipeline stage or a Serve replica).

        An actor Ray gives no GPU runs on CPU: Ray hides the devices from it, so CUDA providers
        would fail, or use GPU memory Ray does not count. An actor given a GPU sees only its
        own GPU(s), numbered from 0.
        """
        update = {"device_id": 0} if gets_gpu else {"providers": ["cpu"]}
        if all(getattr(self.runtime, key) == value for key, value in update.items()):
            return self
        return self.model_copy(update={"runtime": self.runtime.model_copy(update=update)})


ConfigT = TypeVar("ConfigT", bound=BaseModel)


def load_yaml_config(path: Path, model: type[ConfigT], section: str | None = None) -> ConfigT:
    """Read a YAML file (optionally one top-level section of it) into a config model."""
    try:
        data: Any = yaml.safe_load(Path(path).read_text()) or {}
    except OSError as exc:
        raise ConfigError(f"cannot read config {path}: {exc.strerror or exc}") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"config {path} is not valid YAML: {exc}") from exc
    if section is not None:
        data = data.get(section, {}) if isinstance(data, dict) else None
    if not isinstance(data, dict):
        raise ConfigError(f"config {path}: expected a mapping{f' under {section!r}' if section else ''}")
    return parse_config(data, model, source=str(path))


def parse_config(data: dict[str, Any], model: type[ConfigT], source: str = "config") -> ConfigT:
    """Validate a mapping into a config model; errors become ConfigError with field paths."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '<root>'}: {err['msg']}" for err in exc.errors())
        raise ConfigError(f"{source}: {problems}") from exc
