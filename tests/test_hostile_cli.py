"""Hostile inputs on the command line (``swap``, ``detect``), run in this process through
``main(argv)``: each case's exit code and message, and that no input changed and nothing was
written where it should not be. The kit (tests/hostile.py) is made once, small."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fusion_ray.cli import main
from tests.hostile import make_kit, snapshot

S = ["-s", "{k}/face.jpg"]
T = ["-t", "{k}/target.jpg"]
SWAP_CASES = [
    # (id, argv after "swap", exit code, words of the message, output written?)
    ("gif_bomb_4_frames", [*S, "-t", "{k}/bomb.gif", "-o", "{o}/x.gif"], 2, "4 frames of 9000x9000", False),
    ("gif_bomb_20_frames", [*S, "-t", "{k}/bomb20.gif", "-o", "{o}/x.gif"], 2, "20 frames of 9000x9000", False),
    ("gif_bomb_over_pillow_limit", [*S, "-t", "{k}/bomb_huge.gif", "-o", "{o}/x.gif"], 2, "20000x20000", False),
    ("gif_bomb_as_source", ["-s", "{k}/bomb.gif", *T, "-o", "{o}/x.png"], 2, "9000x9000", False),
    ("huge_png_header", [*S, "-t", "{k}/huge.png", "-o", "{o}/x.png"], 2, "over the limit", False),
    ("animated_webp_source", ["-s", "{k}/anim.webp", *T, "-o", "{o}/x.png", "--swapper", "classic"], 2,
     "animated WEBP of 3 frames", False),
    ("animated_gif_reference", [*S, *T, "-o", "{o}/x.png", "--swapper", "classic", "--reference", "{k}/anim.gif"], 2,
     "animated GIF", False),
    ("animated_target_to_jpg", [*S, "-t", "{k}/anim.gif", "-o", "{o}/x.jpg"], 2, "holds one frame", False),
    ("audio_only_target", [*S, "-t", "{k}/audio.m4a", "-o", "{o}/x.mp4"], 2, "nor is it a video", False),
    ("text_target", [*S, "-t", "{k}/text.jpg", "-o", "{o}/x.png"], 2, "not an image", False),
    ("empty_target", [*S, "-t", "{k}/empty.png", "-o", "{o}/x.png"], 2, "empty", False),
    ("truncated_target", [*S, "-t", "{k}/truncated.png", "-o", "{o}/x.png"], 2, "truncated.png", False),
    ("folder_target", [*S, "-t", "{k}/folder.png", "-o", "{o}/x.png"], 2, "folder", False),
    ("pipe_target", [*S, "-t", "{k}/pipe.png", "-o", "{o}/x.png"], 2, "pipe", False),
    ("link_loop_target", [*S, "-t", "{k}/loop.png", "-o", "{o}/x.png"], 2, "loop", False),
    ("missing_target", [*S, "-t", "{k}/gone.png", "-o", "{o}/x.png"], 2, "gone.png", False),
    ("empty_video_target", [*S, "-t", "{k}/empty.mp4", "-o", "{o}/x.mp4"], 2, "empty", False),
    ("garbage_video_target", [*S, "-t", "{k}/garbage.mp4", "-o", "{o}/x.mp4"], 2, "garbage.mp4", False),
    ("text_source", ["-s", "{k}/text.jpg", *T, "-o", "{o}/x.png"], 2, "not an image", False),
    ("empty_source", ["-s", "{k}/empty.png", *T, "-o", "{o}/x.png"], 2, "empty", False),
    ("output_is_target", [*S, "-t", "{o}/target_copy.jpg", "-o", "{o}/target_copy.jpg", "--force"], 2,
     "same file as --target", False),
    ("output_is_source", [*S, *T, "-o", "{k}/face.jpg", "--force"], 2, "same file as --source", False),
    ("output_folder_missing", [*S, *T, "-o", "{o}/nowhere/x.png"], 2, "does not exist", False),
    ("output_folder_is_file", [*S, *T, "-o", "{k}/notes.txt/x.png"], 2, "not a folder", False),
    ("output_exists", [*S, *T, "-o", "{o}/exists.png"], 2, "output exists", False),
    ("output_txt", [*S, *T, "-o", "{o}/x.txt"], 2, "cannot write images with extension '.txt'", False),
    ("image_output_mp4", [*S, *T, "-o", "{o}/x.mp4"], 2, "cannot write images with extension '.mp4'", False),
    ("detector_size_0", [*S, *T, "-o", "{o}/x.png", "--detector-size", "0"], 2, "detector.size", False),
    ("detector_size_320000", [*S, *T, "-o", "{o}/x.png", "--detector-size", "320000"], 2, "detector.size", False),
    ("detector_size_odd", [*S, *T, "-o", "{o}/x.png", "--detector-size", "100"], 2, "multiple of 32", False),
    ("detector_size_negative", [*S, *T, "-o", "{o}/x.png", "--detector-size", "-64"], 2, "detector.size", False),
    ("enhance_nan", [*S, *T, "-o", "{o}/x.png", "--enhance", "nan"], 2, "finite number", False),
    ("enhance_inf", [*S, *T, "-o", "{o}/x.png", "--enhance", "inf"], 2, "finite number", False),
    ("enhance_over_1", [*S, *T, "-o", "{o}/x.png", "--enhance", "1.5"], 2, "less than or equal to 1", False),
    ("classic_with_swapper_weight", [*S, *T, "-o", "{o}/x.png", "--swapper", "classic", "--face-swapper-weight", "0.8"],
     2, "runs the classic swapper", False),
    ("occluder_without_occlusion", [*S, *T, "-o", "{o}/x.png", "--face-occluder-model", "xseg_2"], 2,
     "occlusion mask", False),
    ("parser_without_region", [*S, *T, "-o", "{o}/x.png", "--face-parser-model", "bisenet_resnet_18"], 2,
     "region mask", False),
    ("regions_without_region", [*S, *T, "-o", "{o}/x.png", "--face-mask-regions", "skin"], 2, "region mask", False),
    ("areas_without_area", [*S, *T, "-o", "{o}/x.png", "--face-mask-areas", "mouth"], 2, "area mask", False),
    ("enhancer_weight_no_enhancer", [*S, *T, "-o", "{o}/x.png", "--face-enhancer-weight", "0.9"], 2,
     "not enhanced", False),
    ("enhancer_weight_gfpgan", [*S, *T, "-o", "{o}/x.png", "--enhance", "--face-enhancer-weight", "0.9"], 2,
     "has none", False),
    ("landmarker_score_no_landmarker", [*S, *T, "-o", "{o}/x.png", "--face-landmarker-score", "0.7"], 2,
     "face_landmarker_model 'none'", False),
    ("area_mask_without_landmarker", [*S, *T, "-o", "{o}/x.png", "--face-mask-types", "area"], 2, "68 points", False),
    ("classic_with_pixel_boost", [*S, *T, "-o", "{o}/x.png", "--swapper", "classic",
                                  "--face-swapper-pixel-boost", "256x256"], 2, "pixel boost", False),
    ("strip_wide_target", [*S, "-t", "{k}/strip_wide.png", "-o", "{o}/x.png", "--swapper", "classic"], 0, "0 of 0", True),
    ("strip_tall_target", [*S, "-t", "{k}/strip_tall.png", "-o", "{o}/x.png", "--swapper", "classic"], 0, "0 of 0", True),
    ("one_pixel_target", [*S, "-t", "{k}/dot.png", "-o", "{o}/x.png", "--swapper", "classic"], 0, "0 of 0", True),
]
DETECT_CASES = [
    ("strip_wide", ["{k}/strip_wide.png"], 0, "0 face(s) in 1 frame(s)"),
    ("strip_tall", ["{k}/strip_tall.png"], 0, "0 face(s) in 1 frame(s)"),
    ("animated_gif", ["{k}/anim.gif"], 2, "animated GIF of 3 frames"),
    ("gif_bomb", ["{k}/bomb.gif"], 2, "9000x9000"),
    ("detector_size_0", ["{k}/face.jpg", "--detector-size", "0"], 2, "detector.size"),
    ("detector_size_huge", ["{k}/face.jpg", "--detector-size", "320000"], 2, "detector.size"),
    ("text", ["{k}/text.jpg"], 2, "not an image"),
    ("missing", ["{k}/gone.png"], 2, "not found"),
    ("every_0", ["{k}/face.jpg", "--every", "0"], 2, "--every"),
    ("json_exists", ["{k}/face.jpg", "--json", "{k}/notes.txt"], 2, "exists"),
]


@pytest.fixture(scope="module")
def kit(tmp_path_factory: pytest.TempPathFactory, images_dir: Path) -> Path:
    return make_kit(tmp_path_factory.mktemp("hostile") / "kit", images_dir)


@pytest.fixture
def models(scrfd_path: Path, standin_dir: Path) -> list[str]:
    return ["--models-dir", str(standin_dir), "--model", f"scrfd_2.5g={scrfd_path}", "--providers", "cpu",
            "--precision", "detector=fp32"]


def _run(argv: list[str], kit: Path, out: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main([arg.format(k=kit, o=out) for arg in argv])
    captured = capsys.readouterr()
    return code, captured.err + captured.out


@pytest.mark.parametrize(("argv", "code", "words", "writes"), [c[1:] for c in SWAP_CASES],
                         ids=[c[0] for c in SWAP_CASES])
def test_swap(argv: list[str], code: int, words: str, writes: bool, kit: Path, models: list[str], tmp_path: Path,
              capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "exists.png").write_bytes(b"keep")
    (out / "target_copy.jpg").write_bytes((kit / "target.jpg").read_bytes())
    before, kept = snapshot(kit), snapshot(out)
    got, text = _run(["swap", *argv, *models], kit, out, capsys)
    assert (got, words in text) == (code, True), text
    assert "internal error" not in text and "Traceback" not in text
    assert snapshot(kit) == before  # no input changed, nothing written beside them
    written = {name for name in snapshot(out) if name not in kept}
    assert written == ({Path(argv[argv.index("-o") + 1]).name} if writes else set()), written
    assert {k: v for k, v in snapshot(out).items() if k in kept} == kept
    assert not [p for p in out.iterdir() if p.name.startswith(".")]  # no temporary left behind


@pytest.mark.parametrize(("argv", "code", "words"), [c[1:] for c in DETECT_CASES], ids=[c[0] for c in DETECT_CASES])
def test_detect(argv: list[str], code: int, words: str, kit: Path, models: list[str], tmp_path: Path,
                capsys: pytest.CaptureFixture[str]) -> None:
    before = snapshot(kit)
    got, text = _run(["detect", *argv, *models], kit, tmp_path, capsys)
    assert (got, words in text) == (code, True), text
    assert "internal error" not in text
    assert snapshot(kit) == before and not os.listdir(tmp_path)
