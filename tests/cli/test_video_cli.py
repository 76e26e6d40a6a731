"""The video side of ``swap``: arguments refused before Ray starts."""

import json
import shutil
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import av
import cv2
import numpy as np
import pytest

from fusion_ray.cli import main
from fusion_ray.imageio import read_image
from fusion_ray.video import make_corrupt_video, make_test_video, probe


@pytest.mark.parametrize("name", ["out.mkv", "out.webm", "out.avi", "out.png"])
def test_a_video_output_that_is_not_mp4_or_mov_is_refused(name, tmp_path, images_dir, capsys):
    clip = make_test_video(tmp_path / "clip.mp4", face_image=None, n_frames=3, fps=Fraction(25), size_wh=(64, 48),
                           audio=False)
    code = main(["swap", "-s", str(images_dir / "obama.jpg"), "-t", str(clip), "-o", str(tmp_path / name),
                 "--providers", "cpu"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "video outputs must end in .mp4, .m4v or .mov" in err
    assert not (tmp_path / name).exists()


def test_force_never_overwrites_the_input_video(tmp_path, images_dir, standin_dir, scrfd_path, capsys):
    clip = make_test_video(tmp_path / "clip.mp4", face_image=None, n_frames=3, fps=Fraction(25), size_wh=(64, 48),
                           audio=False)
    before = clip.read_bytes()
    code = main(["swap", "-s", str(images_dir / "obama.jpg"), "-t", str(clip), "-o", str(clip), "--force",
                 "--models-dir", str(standin_dir), "--model", f"scrfd_2.5g={scrfd_path}", "--providers", "cpu", "--precision", "detector=fp32",
                 "--no-progress-bars"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.strip().splitlines() == [
        f"error: --output {clip} is the same file as --target {clip}: refusing to overwrite an input"]
    assert clip.read_bytes() == before


@pytest.mark.parametrize("where", ["sys", "missing"])
def test_an_unwritable_output_folder_is_refused_before_ray(where, tmp_path, images_dir, capsys):
    clip = make_test_video(tmp_path / "clip.mp4", face_image=None, n_frames=3, fps=Fraction(25), size_wh=(64, 48),
                           audio=False)
    folder = Path("/sys") if where == "sys" else tmp_path / "missing"
    code = main(["swap", "-s", str(images_dir / "obama.jpg"), "-t", str(clip), "-o", str(folder / "out.mp4"),
                 "--providers", "cpu", "--no-progress-bars"])
    err = capsys.readouterr().err
    assert code == 2, err
    expected = ("output folder is not writable: /sys (Permission denied)" if where == "sys"
                else f"output folder does not exist: {folder}")
    assert err.strip().splitlines() == [f"error: {expected}"]


RAY_STARTED = """
import sys
from fusion_ray.cli import build_parser, main
from fusion_ray.cli.swap import check_video_swap
code = main(sys.argv[1:])
ray = sys.modules.get("ray")
print(code, bool(ray is not None and ray.is_initialized()))
"""


@pytest.mark.parametrize("kind", ["empty", "corrupt"])
def test_a_bad_video_is_refused_before_ray_starts(kind, tmp_path, images_dir):
    clip = tmp_path / "clip.mp4"
    if kind == "empty":
        clip.write_bytes(b"")
    else:
        make_corrupt_video(clip)
    proc = subprocess.run([sys.executable, "-c", RAY_STARTED, "swap", "-s", str(images_dir / "obama.jpg"),
                           "-t", str(clip), "-o", str(tmp_path / "out.mp4"), "--providers", "cpu",
                           "--no-progress-bars"], capture_output=True, text=True, timeout=300)
    assert proc.stdout.split() == ["2", "False"], proc.stderr  # exit 2, and Ray never started
    lines = proc.stderr.strip().splitlines()
    expected = f"error: --target {clip} is empty (0 bytes)" if kind == "empty" else f"error: cannot open video {clip}: "
    assert len(lines) == 1 and lines[0].startswith(expected), proc.stderr


def test_a_frame_size_the_encoder_refuses_is_an_error_before_ray(tmp_path, images_dir):
    clip = make_test_video(tmp_path / "odd.mp4", face_image=None, n_frames=3, fps=Fraction(25), size_wh=(641, 361),
                           audio=False)
    config = tmp_path / "pipeline.yaml"
    config.write_text("pipeline:\n  encode_options:\n    pix_fmt: yuv420p\n")
    proc = subprocess.run([sys.executable, "-c", RAY_STARTED, "swap", "-s", str(images_dir / "obama.jpg"),
                           "-t", str(clip), "-o", str(tmp_path / "out.mp4"), "--pipeline-config", str(config),
                           "--providers", "cpu"], capture_output=True, text=True, timeout=300)
    assert proc.stdout.split() == ["2", "False"], proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: cannot encode 641x361 frames as yuv420p with libx264"), lines
    assert lines[0].endswith("4:2:0 needs an even width and height: use pix_fmt auto or yuv444p")


@pytest.mark.ray
@pytest.mark.usefixtures("ray_cluster")
def test_an_odd_sized_video_swaps_end_to_end(tmp_path, images_dir, standin_dir, scrfd_path, capsys):
    obama = read_image(images_dir / "obama.jpg").frame
    clip = make_test_video(tmp_path / "odd.mp4", face_image=obama, n_frames=12, fps=Fraction(25),
                           size_wh=(641, 361), gop=6)
    out = tmp_path / "out.mp4"
    code = main(["swap", "-s", str(images_dir / "biden.jpg"), "-t", str(clip), "-o", str(out),
                 "--models-dir", str(standin_dir), "--model", f"scrfd_2.5g={scrfd_path}", "--providers", "cpu", "--precision", "detector=fp32",
                 "--no-progress-bars"])
    err = capsys.readouterr().err
    assert code == 0, err
    info = probe(out)
    assert (info.width, info.height, info.frame_count, info.pix_fmt) == (641, 361, 12, "yuv444p")
    assert info.has_audio


@pytest.mark.ray
@pytest.mark.usefixtures("ray_cluster")
def test_a_variable_frame_rate_keeps_its_timestamps_with_one_warning(tmp_path, images_dir, standin_dir, scrfd_path,
                                                                     capsys):
    times = [Fraction(i, 30) for i in range(6)] + [Fraction(6, 30) + Fraction(i, 10) for i in range(4)]
    clip = make_test_video(tmp_path / "vfr.mp4", face_image=read_image(images_dir / "obama.jpg").frame, n_frames=10,
                           fps=Fraction(30), size_wh=(128, 96), frame_times=times, gop=4)
    out, report = tmp_path / "out.mp4", tmp_path / "r.json"
    code = main(["swap", "-s", str(images_dir / "biden.jpg"), "-t", str(clip), "-o", str(out), "--report", str(report),
                 "--models-dir", str(standin_dir), "--model", f"scrfd_2.5g={scrfd_path}", "--providers", "cpu", "--precision", "detector=fp32",
                 "--no-progress-bars"])
    err = capsys.readouterr().err
    assert code == 0, err
    assert _video_pts(out) == _video_pts(clip) and len(_video_pts(out)) == 10
    note = f"{clip}: variable frame rate (10 to 30 frames/s): the output keeps the source's frame timestamps"
    assert json.loads(report.read_text())["items"][0]["warnings"] == [note]
    assert err.count("variable frame rate") == 1 and f"warning: {note}" in err
    info = probe(out)
    assert info.frame_count == 10 and info.has_audio


def _video_pts(path):
    """Each frame's presentation time (s) from the first one, in order."""
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        pts = sorted(p.pts for p in container.demux(stream) if p.pts is not None)
        return [(t - pts[0]) * stream.time_base for t in pts]


def test_a_corrupt_model_is_one_line_before_ray_starts(tmp_path, images_dir, standin_dir, scrfd_path):
    """The swapper is corrupt: every model the pipeline needs is located on the driver before
    Ray starts, so the error is one line (no traceback, no Ray or Ray Data logs), printed once."""
    models = tmp_path / "models"
    shutil.copytree(standin_dir, models)
    swapper = models / "inswapper_128.onnx"
    data = bytearray(swapper.read_bytes())
    data[1000:1100] = b"x" * 100  # its hash record no longer matches
    swapper.write_bytes(bytes(data))
    clip = make_test_video(tmp_path / "clip.mp4", face_image=None, n_frames=4, fps=Fraction(25), size_wh=(128, 96),
                           audio=False)
    proc = subprocess.run([sys.executable, "-c", RAY_STARTED, "swap", "-s", str(images_dir / "biden.jpg"),
                           "-t", str(clip), "-o", str(tmp_path / "out.mp4"), "--models-dir", str(models),
                           "--model", f"scrfd_2.5g={scrfd_path}", "--providers", "cpu", "--no-progress-bars"],
                          capture_output=True, text=True, timeout=300)
    assert proc.stdout.split() == ["4", "False"], proc.stderr  # a ModelError, and Ray never started
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith(f"error: model 'inswapper_128' at {swapper} does not match")
    assert proc.stderr.count("does not match") == 1, proc.stderr
    assert "Traceback" not in proc.stderr and "\x1b" not in proc.stderr
    assert not (tmp_path / "out.mp4").exists()


@pytest.mark.ray
@pytest.mark.usefixtures("ray_cluster")
def test_an_error_found_while_running_is_printed_once(tmp_path, images_dir, standin_dir, scrfd_path, capsys):
    """The source has no face: the driver finds out once Ray is up (it embeds the sources)."""
    blank = tmp_path / "blank.png"
    cv2.imwrite(str(blank), np.full((120, 100, 3), 128, np.uint8))
    clip = make_test_video(tmp_path / "clip.mp4", face_image=None, n_frames=4, fps=Fraction(25), size_wh=(64, 48),
                           audio=False)
    code = main(["swap", "-s", str(blank), "-t", str(clip), "-o", str(tmp_path / "out.mp4"),
                 "--models-dir", str(standin_dir), "--model", f"scrfd_2.5g={scrfd_path}", "--providers", "cpu", "--precision", "detector=fp32",
                 "--no-progress-bars"])
    err = capsys.readouterr().err
    assert code == 1, err
    assert err.count(f"no face found in source image {blank}") == 1, err
    assert err.strip().splitlines()[-1] == f"error: {clip}: no face found in source image {blank}"
    assert not (tmp_path / "out.mp4").exists()


def test_the_local_runners_summary_says_which_line_bounds_the_job(tmp_path, images_dir, standin_dir, scrfd_path,
                                                                    capsys):
    obama = read_image(images_dir / "obama.jpg").frame
    clip = make_test_video(tmp_path / "clip.mp4", face_image=obama, n_frames=8, fps=Fraction(25), size_wh=(320, 180),
                           audio=False)
    code = main(["swap", "-s", str(images_dir / "biden.jpg"), "-t", str(clip), "-o", str(tmp_path / "out.mp4"),
                 "--runner", "local", "--models-dir", str(standin_dir), "--model", f"scrfd_2.5g={scrfd_path}",
                 "--providers", "cpu", "--precision", "detector=fp32", "--no-progress-bars"])
    err = capsys.readouterr().err
    assert code == 0, err
    line = next(text for text in err.splitlines() if text.startswith("lines busy: "))
    assert "track " in line and "compute " in line and "encode " in line and line.endswith("bounds the job"), line
