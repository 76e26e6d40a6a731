"""The footage-like workloads of the offline benchmark, with the real SCRFD detector."""

from __future__ import annotations

from pathlib import Path

import av
import cv2
import pytest

from fusion_ray.bench.footage import make_mixed_photo_set, unswapped_faces, write_group_video
from fusion_ray.bench.tracking import load_detector
from fusion_ray.errors import InputError


@pytest.fixture(scope="module")
def detector(scrfd_path: Path):  # type: ignore[no-untyped-def]
    return load_detector(scrfd_path)


@pytest.fixture(scope="module")
def photos(images_dir: Path) -> list[Path]:
    return [images_dir / f"{name}.jpg" for name in ("obama", "biden", "obama_and_biden")]


def test_the_mixed_photo_set_has_pngs_and_jpegs_of_half_to_two_megapixels_with_up_to_three_faces(
        tmp_path, photos, detector):
    files = make_mixed_photo_set(tmp_path, 9, photos, seed=3)
    assert {f.suffix for f in files} == {".png", ".jpg"}
    faces = []
    for path in files:
        image = cv2.imread(str(path))
        assert 0.5e6 * 0.98 <= image.shape[0] * image.shape[1] <= 2.0e6 * 1.02
        faces.append(len(detector.detect(image)))
    assert {1, 2, 3} <= set(faces) <= {0, 1, 2, 3}
    assert [f.read_bytes() for f in make_mixed_photo_set(tmp_path / "again", 9, photos, seed=3)] == \
        [f.read_bytes() for f in files]


def test_the_group_video_starts_its_audio_before_its_first_frame(tmp_path, photos, detector):
    path = write_group_video(tmp_path / "clip.mp4", photos, detector, n_frames=12, audio_lead_s=0.4)
    with av.open(str(path)) as container:
        video, audio = container.streams.video[0], container.streams.audio[0]
        assert float(video.start_time * video.time_base) == pytest.approx(0.4, abs=0.05)
        assert float(audio.start_time * audio.time_base) == pytest.approx(0.0, abs=0.03)
        assert sum(1 for _ in container.decode(video=0)) == 12


def test_unswapped_faces_counts_the_faces_an_output_left_as_they_were(tmp_path, photos, detector):
    files = make_mixed_photo_set(tmp_path / "in", 3, photos, seed=1)
    out = tmp_path / "out"
    out.mkdir()
    found = unswapped_faces([(f, f) for f in files], detector)
    assert found["faces"] >= 3 and found["unswapped"] == found["faces"]
    for path in files:  # every face's box changed: a stand-in for a swap
        image = cv2.imread(str(path))
        for face in detector.detect(image):
            x0, y0, x1, y1 = (int(v) for v in face.bbox_xyxy)
            image[max(y0, 0):y1, max(x0, 0):x1] = 255 - image[max(y0, 0):y1, max(x0, 0):x1]
        cv2.imwrite(str(out / path.name), image, [cv2.IMWRITE_JPEG_QUALITY, 95])
    assert unswapped_faces([(f, out / f.name) for f in files], detector)["unswapped"] == 0
    with pytest.raises(InputError, match="does not match"):
        unswapped_faces([(files[0], out / files[1].name)], detector)
