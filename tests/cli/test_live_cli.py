"""``fusion-ray live`` without --url: the stream policy in this process, end to end on a generated clip
with the real SCRFD detector and the classic swapper (a real swap)."""

import json
from fractions import Fraction

import cv2
import numpy as np
import pytest

from fusion_ray.cli import main
from fusion_ray.config import EngineConfig, ModelsConfig, RuntimeConfig
from fusion_ray.imageio import read_image
from fusion_ray.runners.inline import Engine
from fusion_ray.video.decode import decode_all
from fusion_ray.video.synthetic import make_test_video

FRAMES = 24


@pytest.fixture(scope="module")
def clip(images_dir, tmp_path_factory):
    face = read_image(images_dir / "biden.jpg").frame
    return make_test_video(tmp_path_factory.mktemp("live_cli") / "clip.mp4", face_image=face, n_frames=FRAMES,
                           fps=Fraction(30), size_wh=(640, 360), audio=False)


def _frames(path) -> list[np.ndarray]:
    capture = cv2.VideoCapture(str(path))
    frames = []
    while True:
        ok, frame = capture.read()
        if not ok:
            return frames
        frames.append(frame)


def test_live_runs_locally_writes_swapped_frames_and_reports(clip, images_dir, scrfd_path, tmp_path, capsys):
    out = tmp_path / "out.mp4"
    # 6 fps and a long deadline: most frames get through even on a loaded 2-core machine.
    code = main(["live", "--input", str(clip), "--source", str(images_dir / "obama.jpg"), "--fps", "6",
                 "--deadline-ms", "3000", "--quality", "95", "--output", str(out), "--swapper", "classic",
                 "--model", f"scrfd_2.5g={scrfd_path}", "--providers", "cpu"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "running locally" in captured.err and "no server" in captured.err
    assert f"sent {FRAMES} frames" in captured.out and "fps" in captured.out
    assert "latency" in captured.out and "p99" in captured.out and "dropped:" in captured.out
    written, sent = _frames(out), [d.frame for d in decode_all(clip)]
    assert 1 <= len(written) <= FRAMES
    detector = Engine.load(EngineConfig(models=ModelsConfig(paths={"scrfd_2.5g": scrfd_path}),
                                        runtime=RuntimeConfig(providers=["cpu"])), components=["detector"])
    # The writer repeats the last result over dropped frames: frame i shows the result of a frame <= i.
    swapped = 0
    for got in written:
        x0, y0, x1, y1 = (int(v) for v in detector.detect(got)[0].bbox_xyxy)
        best = min(sent, key=lambda f: np.abs(f.astype(np.int16) - got.astype(np.int16)).mean())
        inner = np.abs(got[y0:y1, x0:x1].astype(np.int16) - best[y0:y1, x0:x1].astype(np.int16)).mean()
        swapped += inner > 8.0
    assert swapped == len(written)  # every written frame has its face swapped, none passed through


def test_no_window_here_is_a_clear_error_before_any_work(clip, images_dir, scrfd_path, capsys):
    code = main(["live", "--input", str(clip), "--source", str(images_dir / "obama.jpg"), "--swapper", "classic",
                 "--model", f"scrfd_2.5g={scrfd_path}"])
    err = capsys.readouterr().err
    assert code == 2 and "cannot show a window" in err and "--output" in err


def test_a_source_id_needs_a_server(clip, capsys):
    code = main(["live", "--input", str(clip), "--source-id", "abc", "--output", "x.mp4"])
    assert code == 2 and "--url" in capsys.readouterr().err


def test_facefusion_options_travel_in_the_start_message():
    import argparse

    from fusion_ray.cli import live
    from fusion_ray.live.protocol import parse_start

    args = argparse.Namespace(stream_select="all", stream_index=0, quality=85, deadline_ms=300, token=None,
                              enhance=None, face_mask_types=["box", "occlusion"], face_mask_padding=[10, 20],
                              face_swapper_pixel_boost="256x256", mouth_mask=None, face_enhancer_blend=None)
    start = live._start(args, "src")
    assert start["face_mask_types"] == ["box", "occlusion"] and "mouth_mask" not in start
    message = parse_start(json.dumps(start))
    assert message.face_mask_types == ("box", "occlusion") and message.face_swapper_pixel_boost == "256x256"
    assert message.face_mask_padding == (10, 20)


@pytest.mark.parametrize("output", ["same", "missing/out.mp4", "out.txt"])
def test_live_refuses_an_output_it_cannot_write_before_any_work(clip, images_dir, scrfd_path, tmp_path, output,
                                                                capsys):
    """Before, these exited 0 and printed 'wrote ...': the input was overwritten, or nothing was written."""
    path = clip
    before = path.read_bytes()
    target = path if output == "same" else tmp_path / output
    code = main(["live", "--source", str(images_dir / "obama.jpg"), "--input", str(path), "--output", str(target),
                 "--swapper", "classic", "--model", f"scrfd_2.5g={scrfd_path}"])
    assert code == 2 and "wrote" not in capsys.readouterr().out
    assert path.read_bytes() == before and not (tmp_path / "out.txt").exists()
