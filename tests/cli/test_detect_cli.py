"""``fusion-ray detect``: faces in the order --face-index counts, JSON, a drawn picture, videos."""

from __future__ import annotations

import json
from pathlib import Path

import cv2

from fusion_ray.cli import main
from fusion_ray.config import DetectorConfig
from fusion_ray.ops.select import select_faces
from fusion_ray.types import Face
from fusion_ray.video import make_test_video


def _args(standin_dir: Path, scrfd_path: Path) -> list[str]:
    return ["--models-dir", str(standin_dir), "--model", f"scrfd_2.5g={scrfd_path}", "--providers", "cpu",
            "--precision", "detector=fp32"]


def test_detect_lists_faces_with_the_face_index_and_draws_them(standin_dir: Path, scrfd_path: Path,
                                                                 images_dir: Path, tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    image = images_dir / "obama_and_biden.jpg"
    out_json, drawn = tmp_path / "faces.json", tmp_path / "drawn.png"
    assert main(["detect", str(image), "--json", str(out_json), "--draw", str(drawn), *_args(standin_dir, scrfd_path)]) == 0
    body = json.loads(out_json.read_text())
    assert body["precision"] == "fp32" and body["detector"] == "scrfd_2.5g"
    faces = body["frames"][0]["faces"]
    assert [f["index"] for f in faces] == [0, 1, 2]
    as_faces = [Face(f["bbox_xyxy"], f["landmarks_5"], f["score"]) for f in faces]
    for index, item in enumerate(as_faces):  # the index printed is the one --face-index picks
        (picked,) = select_faces(list(reversed(as_faces)), "index", index=index)
        assert picked == item
    assert "--face-index 2:" in capsys.readouterr().out
    picture, original = cv2.imread(str(drawn)), cv2.imread(str(image))
    assert picture.shape == original.shape and (picture != original).any()
    assert main(["detect", str(image), "--json", str(out_json), *_args(standin_dir, scrfd_path)]) == 2  # exists


def test_detect_on_a_video_every_nth_frame(standin_dir: Path, scrfd_path: Path, images_dir: Path,
                                           tmp_path: Path) -> None:
    clip = make_test_video(tmp_path / "clip.mp4", face_image=cv2.imread(str(images_dir / "obama.jpg")),
                           n_frames=12, audio=False)
    out_json, drawn = tmp_path / "faces.json", tmp_path / "frames"
    assert main(["detect", str(clip), "--every", "5", "--json", str(out_json), "--draw", str(drawn),
                 *_args(standin_dir, scrfd_path)]) == 0
    frames = json.loads(out_json.read_text())["frames"]
    assert [f["frame"] for f in frames] == [0, 5, 10] and all(len(f["faces"]) == 1 for f in frames)
    assert sorted(p.name for p in drawn.iterdir()) == ["frame_000000.png", "frame_000005.png", "frame_000010.png"]
    assert DetectorConfig().score_threshold <= min(f["faces"][0]["score"] for f in frames)
    assert main(["detect", str(clip), "--draw", str(tmp_path / "one.png"), *_args(standin_dir, scrfd_path)]) == 2
