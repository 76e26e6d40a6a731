import cv2
import numpy as np
import pytest

from fusion_ray.ops.classic import classic_face_mask
from fusion_ray.ops.color import StatsWeight, color_transfer, lab_source, ordered_sums, transfer_lab


def test_color_transfer_matches_the_target_statistics():
    rng = np.random.default_rng(1)
    source = rng.integers(0, 120, (64, 64, 3), dtype=np.uint8)
    target = rng.integers(100, 255, (64, 64, 3), dtype=np.uint8)
    out = color_transfer(source, target)
    lab_out = cv2.cvtColor(out, cv2.COLOR_BGR2LAB).reshape(-1, 3).astype(float)
    lab_tgt = cv2.cvtColor(target, cv2.COLOR_BGR2LAB).reshape(-1, 3).astype(float)
    np.testing.assert_allclose(lab_out.mean(0), lab_tgt.mean(0), atol=3.0)


def test_color_transfer_keeps_structure():
    source = np.zeros((32, 32, 3), np.uint8)
    source[:, 16:] = 100
    target = np.full((32, 32, 3), 180, np.uint8)
    target[::2] = 160
    out = color_transfer(source, target)
    assert out[:, 20].mean() > out[:, 4].mean()  # the bright half stays brighter


def test_color_transfer_rejects_shape_mismatch():
    with pytest.raises(ValueError, match="same shape"):
        color_transfer(np.zeros((8, 8, 3), np.uint8), np.zeros((4, 4, 3), np.uint8))


def _reference_transfer(source: np.ndarray, target: np.ndarray, mask: np.ndarray | None) -> np.ndarray:
    """The whole-crop formula as written before the source was prepared once (float32, weighted
    sums with ``sum(axis=0)``): the pixels the classic swapper has always given."""
    weight = np.ones(source.shape[:2], np.float32) if mask is None else mask.astype(np.float32)

    def stats(lab: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        total = float(weight.sum())
        flat = lab.reshape(-1, 3)
        if total < 1.0:
            return flat.mean(axis=0), flat.std(axis=0)
        w = weight.reshape(-1, 1)
        mean = (flat * w).sum(axis=0) / total
        return mean, np.sqrt((((flat - mean) ** 2) * w).sum(axis=0) / total)

    src_lab = cv2.cvtColor(source, cv2.COLOR_BGR2LAB).astype(np.float32)
    src_mean, src_std = stats(src_lab)
    dst_mean, dst_std = stats(cv2.cvtColor(target, cv2.COLOR_BGR2LAB).astype(np.float32))
    out = (src_lab - src_mean) * np.clip(dst_std / np.maximum(src_std, 1e-3), 0.25, 4.0) + dst_mean
    return cv2.cvtColor(np.clip(np.rint(out), 0, 255).astype(np.uint8), cv2.COLOR_LAB2BGR)


@pytest.mark.parametrize("size", [64, 100, 256])
@pytest.mark.parametrize("mask_kind", ["classic", "none", "random", "tiny"])
def test_color_transfer_gives_the_whole_crop_formula_pixels(images_dir, size, mask_kind) -> None:  # type: ignore[no-untyped-def]
    photo = cv2.imread(str(images_dir / "obama_and_biden.jpg"))
    rng = np.random.default_rng(size)
    masks = {"classic": classic_face_mask(size), "none": None, "random": rng.random((size, size)).astype(np.float32),
             "tiny": np.full((size, size), 1e-6, np.float32)}
    for k in range(3):
        y, x = rng.integers(0, 200, 2)
        source = cv2.resize(photo[y:y + 250, x:x + 250], (size, size))
        target = cv2.resize(photo[x:x + 200, y:y + 200], (size, size)) if k < 2 else \
            rng.integers(0, 256, (size, size, 3), dtype=np.uint8)
        expected = _reference_transfer(source, target, masks[mask_kind])
        np.testing.assert_array_equal(color_transfer(source, target, masks[mask_kind]), expected)


def test_a_prepared_source_recolours_each_target_as_color_transfer_does(images_dir) -> None:  # type: ignore[no-untyped-def]
    photo = cv2.imread(str(images_dir / "obama_and_biden.jpg"))
    mask = classic_face_mask(128)
    weight = StatsWeight.of(mask, (128, 128))
    source_crop = cv2.resize(photo[:250, :250], (128, 128))
    source = lab_source(source_crop, weight)
    for y in (0, 60, 120):
        target = cv2.resize(photo[y:y + 200, 200:400], (128, 128))
        np.testing.assert_array_equal(transfer_lab(source, target, weight), color_transfer(source_crop, target, mask))


def test_a_prepared_weight_refuses_other_crop_sizes() -> None:
    weight = StatsWeight.of(None, (16, 16))
    with pytest.raises(ValueError, match="same shape"):
        lab_source(np.zeros((8, 8, 3), np.uint8), weight)
    with pytest.raises(ValueError, match="expected a mask of shape"):
        StatsWeight.of(np.ones((8, 8), np.float32), (16, 16))


@pytest.mark.parametrize("rows", [1, 7, 4096, 65536])
def test_ordered_sums_add_in_the_order_of_sum_over_rows(rows) -> None:  # type: ignore[no-untyped-def]
    """Another order (pairwise, SIMD lanes) rounds differently on these values: a library change
    that reorders the sums fails here before it moves a classic swap's pixels."""
    values = (np.random.default_rng(rows).random((rows, 3)) * 255).astype(np.float32)
    sums = ordered_sums(values)
    assert sums.dtype == np.float32
    np.testing.assert_array_equal(sums, values.sum(axis=0))
    if rows > 1000:
        assert not np.array_equal(sums, np.ascontiguousarray(values.T).sum(axis=1))  # pairwise: other values
