"""Per-face masks held to FaceFusion's processing on hand cases (box, area, feather, minimum)
and Deep-Live-Cam's mouth mask."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fusion_ray.models.standins_quality import synthetic_face_68
from fusion_ray.ops.align import transform_points
from fusion_ray.ops.face_masks import (
    AREA_POINTS,
    area_mask,
    area_masks,
    box_mask_percent,
    combine_face_masks,
    combine_masks,
    feather,
    mouth_keep_mask,
    mouth_paste_masks,
    points_in_crops,
    without,
)

CROP = 256
FACE = synthetic_face_68() * CROP  # a face filling the crop


def _phi(x: float) -> float:
    return 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))


def test_box_mask_without_blur_still_zeroes_a_one_pixel_border() -> None:
    mask = box_mask_percent(100, blur=0.0)
    assert mask[1:-1, 1:-1].min() == 1.0
    assert mask[0].max() == mask[-1].max() == mask[:, 0].max() == mask[:, -1].max() == 0.0


def test_box_mask_padding_is_percent_top_right_bottom_left_truncated() -> None:
    mask = box_mask_percent(100, blur=0.0, padding=(10, 25, 20.9, 5))
    rows = np.flatnonzero(mask[:, 50])
    cols = np.flatnonzero(mask[50, :])
    assert (rows[0], rows[-1]) == (10, 79)  # bottom: int(100 * 20.9 / 100) = 20 rows
    assert (cols[0], cols[-1]) == (5, 74)


def test_box_mask_blur_is_facefusions() -> None:
    mask = box_mask_percent(128, blur=0.3)  # blur_amount 19, border 9 px, sigma 4.75
    assert mask[64, 64] == pytest.approx(1.0, abs=1e-4)
    # the hard edge lies between pixels 8 and 9; pixel 9 is half a pixel inside
    assert mask[64, 9] == pytest.approx(_phi(0.5 / 4.75), abs=0.02)
    assert mask[64, 0] < 0.1  # 8.5 px outside the edge (OpenCV reflects at the border)
    np.testing.assert_allclose(mask, mask[::-1, ::-1], atol=1e-6)


@pytest.mark.parametrize(("kwargs", "match"), [({"blur": 1.5}, "blur"), ({"padding": (0, 0, 101, 0)}, "padding"),
                                                ({"padding": (0, 0, 0)}, "padding")])
def test_box_mask_rejects_bad_values(kwargs: dict, match: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(ValueError, match=match):
        box_mask_percent(64, **kwargs)


def test_feather_of_a_square_follows_the_sigma_5_formula() -> None:
    hard = np.zeros((200, 200), np.float32)
    hard[50:151, 50:151] = 1.0
    soft = feather(hard)
    assert soft[100, 100] == pytest.approx(1.0)
    assert soft[100, 52] == pytest.approx((_phi(2.5 / 5.0) - 0.5) * 2, abs=0.02)
    assert soft[100, 49] == 0.0  # the outside stays 0: the feather only shrinks


def test_area_points_are_facefusions() -> None:
    assert AREA_POINTS["upper-face"] == (0, 1, 2, 31, 32, 33, 34, 35, 14, 15, 16, 26, 25, 24, 23, 22, 21, 20, 19,
                                         18, 17)
    assert AREA_POINTS["lower-face"] == (3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 35, 34, 33, 32, 31)
    assert AREA_POINTS["mouth"] == tuple(range(48, 68))


def _at(mask: np.ndarray, point: np.ndarray) -> float:
    return float(mask[int(round(point[1])), int(round(point[0]))])


def test_area_masks_cover_their_part_of_the_face() -> None:
    eye, mouth, chin = FACE[36:42].mean(axis=0), FACE[48:60].mean(axis=0), FACE[8] - [0, 12]
    upper = area_mask(CROP, FACE, ["upper-face"])
    lower = area_mask(CROP, FACE, ["lower-face"])
    mouth_only = area_mask(CROP, FACE, ["mouth"])
    assert _at(upper, eye) == 1.0 and _at(upper, mouth) == 0.0
    assert _at(lower, mouth) == 1.0 and _at(lower, eye) == 0.0 and _at(lower, chin) > 0.5
    assert _at(mouth_only, mouth) > 0.99 and _at(mouth_only, eye) == 0.0 and _at(mouth_only, chin) == 0.0
    both = area_mask(CROP, FACE, ["upper-face", "lower-face"])  # one hull over both
    assert _at(both, eye) == 1.0 and _at(both, mouth) == 1.0


def test_area_mask_is_the_feathered_convex_hull() -> None:
    square = np.zeros((68, 2))
    square[list(AREA_POINTS["mouth"])] = [50, 50]
    square[[48, 50, 52, 54]] = [[50, 50], [150, 50], [150, 150], [50, 150]]
    hard = np.zeros((200, 200), np.float32)
    hard[50:151, 50:151] = 1.0
    np.testing.assert_allclose(area_mask(200, square, ["mouth"]), feather(hard), atol=1e-6)


def test_area_mask_rejects_unknown_areas() -> None:
    with pytest.raises(ValueError, match="upper-face"):
        area_mask(CROP, FACE, ["forehead"])
    with pytest.raises(ValueError, match="68 points"):
        area_mask(CROP, FACE[:5], ["mouth"])


def test_mouth_keep_mask_covers_the_grown_lips_softly() -> None:
    keep = mouth_keep_mask(CROP, FACE)
    centre = FACE[48:60].mean(axis=0)
    assert _at(keep, centre) == pytest.approx(1.0, abs=1e-3)
    assert _at(keep, FACE[36:42].mean(axis=0)) == 0.0
    corner_grown = centre + (FACE[54] - centre) * 1.3
    assert 0.3 < _at(keep, corner_grown) < 1.0  # inside the polygon grown by 0.5, near its soft edge
    assert len(np.unique(keep)) > 10  # feathered, not a hard 0/1 polygon
    tight = mouth_keep_mask(CROP, FACE, grow=0.0)
    assert tight.sum() < keep.sum()


def test_mouth_mask_keeps_the_target_mouth_through_the_minimum() -> None:
    box = box_mask_percent(CROP)
    paste = combine_masks([box, without(mouth_keep_mask(CROP, FACE))])
    centre = FACE[48:60].mean(axis=0)
    assert _at(paste, centre) == pytest.approx(0.0, abs=1e-3)  # the original mouth stays
    assert _at(paste, FACE[30]) == pytest.approx(1.0, abs=1e-3)  # the swap covers the nose


def test_combine_is_the_element_wise_minimum() -> None:
    a = np.array([[0.2, 0.9], [1.0, 0.0]], np.float32)
    b = np.array([[0.5, 0.3], [1.2, 0.4]], np.float32)
    np.testing.assert_allclose(combine_masks([a, b]), [[0.2, 0.3], [1.0, 0.0]])
    np.testing.assert_array_equal(combine_masks([a]), a)
    with pytest.raises(ValueError, match="one shape"):
        combine_masks([a, np.ones((3, 3))])
    with pytest.raises(ValueError, match="at least one"):
        combine_masks([])


def test_batched_helpers_match_the_per_face_functions() -> None:
    matrices = np.array([[[1.0, 0.0, -10.0], [0.0, 1.0, 5.0]], [[0.5, -0.1, 3.0], [0.1, 0.5, -2.0]]])
    frame_points = np.stack([FACE + 10.0, FACE * 1.5])
    in_crops = points_in_crops(frame_points, matrices)
    for i in range(2):
        np.testing.assert_allclose(in_crops[i], transform_points(frame_points[i], matrices[i]))
    areas = area_masks(CROP, in_crops, ["mouth"])
    mouths = mouth_paste_masks(CROP, in_crops)
    assert areas.shape == mouths.shape == (2, CROP, CROP)
    np.testing.assert_array_equal(areas[1], area_mask(CROP, in_crops[1], ["mouth"]))
    np.testing.assert_array_equal(mouths[0], without(mouth_keep_mask(CROP, in_crops[0])))
    np.testing.assert_array_equal(combine_face_masks([areas, mouths]), np.minimum(areas, mouths))
    assert area_masks(CROP, np.zeros((0, 68, 2)), ["mouth"]).shape == (0, CROP, CROP)
    with pytest.raises(ValueError, match="matrices"):
        points_in_crops(frame_points, matrices[:1])
