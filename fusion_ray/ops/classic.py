"""The model-free ``classic`` swap: the source face, recoloured to the target, in the target's pose.

Both faces are aligned through the same template, so the source crop already sits in the
target's pose once it is pasted back through the target's affine matrix. Licence-free: no
learned weights are involved.
"""

from __future__ import annotations

import numpy as np

from fusion_ray.ops.color import LabSource, StatsWeight, transfer_lab
from fusion_ray.ops.mask import box_mask, ellipse_mask
from fusion_ray.types import Crop, Mask

# The inner face of an arcface_128-aligned crop: eyes at y~0.40, mouth at y~0.72.
_FACE_ELLIPSE_CENTER = (0.5, 0.56)
_FACE_ELLIPSE_AXES = (0.36, 0.42)


def classic_face_mask(crop_size: int, blur: float = 0.3) -> Mask:
    """Feathered ellipse over the inner face (brows to chin) of an arcface_128-aligned crop."""
    inner = ellipse_mask(crop_size, scale_wh=_FACE_ELLIPSE_AXES, center_xy=_FACE_ELLIPSE_CENTER,
                         blur=blur * 0.5)
    return (inner * box_mask(crop_size, blur=blur)).astype(np.float32)


def classic_swap_crop(source: LabSource, target_crop: Crop, weight: StatsWeight) -> Crop:
    """The source crop (prepared once by :func:`fusion_ray.ops.color.lab_source`) with the target
    crop's colour statistics inside the mask of ``weight``."""
    return transfer_lab(source, target_crop, weight)
