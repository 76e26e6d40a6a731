"""The image command: exit codes, one-line errors, no partial outputs, odd input formats."""

import os
import subprocess
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest

from fusion_ray.cli import main
from fusion_ray.imageio import read_image, read_jpeg_comments, read_png_text
from tests.animated import assert_every_frame_swapped
from tests.test_imageio import huge_png, limit_memory, sideways_jpeg


@pytest.fixture
def model_args(standin_dir, scrfd_path):
    return ["--models-dir", str(standin_dir), "--model", f"scrfd_2.5g={scrfd_path}", "--providers", "cpu",
            "--precision", "detector=fp32"]


def swap(args, capsys):
    code = main(["swap", *args])
    err = capsys.readouterr().err
    return code, err


def test_classic_swap_with_the_real_detector(tmp_path, images_dir, scrfd_path, capsys):
    out = tmp_path / "out.png"
    code, err = swap(["--source", str(images_dir / "obama.jpg"), "--target", str(images_dir / "biden.jpg"),
                      "-o", str(out), "--swapper", "classic", "--model", f"scrfd_2.5g={scrfd_path}"], capsys)
    assert code == 0, err
    assert "1 of 1 face(s) swapped" in err and "detect" in err
    result = read_image(out).frame
    assert not np.array_equal(result, read_image(images_dir / "biden.jpg").frame)
    meta = read_png_text(out.read_bytes())
    assert meta["Software"].startswith("fusion_ray") and "fusion_ray.stand_in_models" not in meta


def test_stand_in_outputs_say_so(tmp_path, images_dir, model_args, capsys):
    out = tmp_path / "out.png"
    code, err = swap(["-s", str(images_dir / "obama.jpg"), "-t", str(images_dir / "biden.jpg"), "-o", str(out),
                      *model_args], capsys)
    assert code == 0, err
    assert "STAND-IN" in err
    meta = read_png_text(out.read_bytes())
    assert meta["fusion_ray.stand_in_models"] == "arcface_w600k_r50,inswapper_128"
    assert "not a real face swap" in meta["Comment"]


@pytest.mark.parametrize("case", ["missing_source", "non_image_source", "no_face_source", "missing_target",
                                  "non_image_target", "existing_output", "bad_extension"])
def test_bad_inputs_fail_cleanly(case, tmp_path, images_dir, model_args, capsys):
    good = str(images_dir / "obama.jpg")
    text = tmp_path / "notes.jpg"
    text.write_text("not an image")
    blank = tmp_path / "blank.png"
    cv2.imwrite(str(blank), np.full((200, 200, 3), 120, np.uint8))
    out = tmp_path / "out.png"
    source, target, expected = good, good, "error:"
    if case == "missing_source":
        source, expected = str(tmp_path / "nope.jpg"), "file not found"
    elif case == "non_image_source":
        source, expected = str(text), "not an image"
    elif case == "no_face_source":
        source, expected = str(blank), "no face found in source image"
    elif case == "missing_target":
        target, expected = str(tmp_path / "nope.jpg"), "file not found"
    elif case == "non_image_target":
        target, expected = str(text), "not an image"
    elif case == "existing_output":
        out.write_bytes(b"keep me")
        expected = "--force"
    elif case == "bad_extension":
        out, expected = tmp_path / "out.xyz", "cannot write images"
    code, err = swap(["-s", source, "-t", target, "-o", str(out), *model_args], capsys)
    assert code != 0
    lines = [line for line in err.strip().splitlines() if not line.startswith("WARNING")]
    assert len(lines) == 1 and expected in lines[0], err
    assert "Traceback" not in err
    if case == "existing_output":
        assert out.read_bytes() == b"keep me"
    else:
        assert not out.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".part")]


def test_no_face_in_target_writes_it_unchanged(tmp_path, images_dir, model_args, capsys):
    blank = tmp_path / "blank.png"
    cv2.imwrite(str(blank), np.full((120, 160, 3), 77, np.uint8))
    out = tmp_path / "out.png"
    code, err = swap(["-s", str(images_dir / "obama.jpg"), "-t", str(blank), "-o", str(out), *model_args], capsys)
    assert code == 0
    assert "no face found in the target" in err
    assert out.read_bytes() == blank.read_bytes()


@pytest.mark.parametrize("kind", ["alpha", "grey", "16bit"])
def test_odd_target_formats(kind, tmp_path, images_dir, model_args, capsys):
    frame = read_image(images_dir / "obama.jpg").frame
    if kind == "alpha":
        image = np.dstack([frame, np.full(frame.shape[:2], 128, np.uint8)])
    elif kind == "grey":
        image = cv2.cvtColor(frame, cv2.COLOR_BGR2GRAY)
    else:
        image = frame.astype(np.uint16) * 257
    target = tmp_path / f"target_{kind}.png"
    cv2.imwrite(str(target), image)
    out = tmp_path / "out.png"
    code, err = swap(["-s", str(images_dir / "biden.jpg"), "-t", str(target), "-o", str(out), *model_args], capsys)
    assert code == 0, err
    assert "1 of 1 face(s) swapped" in err
    written = read_image(out)
    assert written.frame.shape == frame.shape
    if kind == "alpha":
        assert written.alpha is not None and (written.alpha == 128).all()


def test_console_script_exit_code_and_message(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "fusion_ray.cli", "swap", "-s", str(tmp_path / "x.jpg"),
                           "-t", str(tmp_path / "y.jpg"), "-o", str(tmp_path / "o.png")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"error: file not found: {tmp_path / 'y.jpg'}"


@pytest.mark.parametrize("case", ["target", "source", "symlink_to_target", "hard_link_to_source"])
def test_force_never_overwrites_an_input(case, tmp_path, images_dir, model_args, capsys):
    target = tmp_path / "target.png"
    source = tmp_path / "source.png"
    cv2.imwrite(str(target), read_image(images_dir / "obama.jpg").frame)
    cv2.imwrite(str(source), read_image(images_dir / "biden.jpg").frame)
    before = {p: p.read_bytes() for p in (target, source)}
    named, out = {"target": ("--target", target), "source": ("--source", source),
                  "symlink_to_target": ("--target", tmp_path / "link.png"),
                  "hard_link_to_source": ("--source", tmp_path / "hard.png")}[case]
    if case == "symlink_to_target":
        out.symlink_to(target)
    elif case == "hard_link_to_source":
        out.hardlink_to(source)
    code, err = swap(["-s", str(source), "-t", str(target), "-o", str(out), "--force", *model_args], capsys)
    assert code == 2, err
    assert err.strip().splitlines() == [
        f"error: --output {out} is the same file as {named} {target if named == '--target' else source}: "
        "refusing to overwrite an input"]
    assert {p: p.read_bytes() for p in (target, source)} == before


@pytest.fixture
def immutable_dir(tmp_path):
    """A folder nobody can write to, root included (``chattr +i``; chmod does not stop root)."""
    folder = tmp_path / "locked"
    folder.mkdir()
    if subprocess.run(["chattr", "+i", str(folder)], capture_output=True).returncode != 0:
        pytest.skip("chattr +i is not available here")
    yield folder
    subprocess.run(["chattr", "-i", str(folder)], check=True)


@pytest.mark.parametrize("where", ["immutable", "sys"])
def test_an_unwritable_output_folder_is_refused_before_any_work(where, request, images_dir, model_args, capsys):
    folder = request.getfixturevalue("immutable_dir") if where == "immutable" else Path("/sys")
    out = folder / "out.png"
    code, err = swap(["-s", str(images_dir / "obama.jpg"), "-t", str(images_dir / "biden.jpg"), "-o", str(out),
                      *model_args], capsys)
    assert code == 2, err
    reason = "Operation not permitted" if where == "immutable" else "Permission denied"
    assert err.strip().splitlines() == [f"error: output folder is not writable: {folder} ({reason})"], err
    assert not out.exists()


@pytest.mark.parametrize("role", ["target", "source"])
def test_a_huge_image_is_refused_in_one_line_under_a_memory_limit(role, tmp_path, images_dir, scrfd_path):
    huge = tmp_path / "huge.png"
    huge.write_bytes(huge_png(32768, 32767))
    good = str(images_dir / "obama.jpg")
    source, target = (good, str(huge)) if role == "target" else (str(huge), good)
    proc = subprocess.run([sys.executable, "-m", "fusion_ray.cli", "swap", "-s", source, "-t", target,
                           "-o", str(tmp_path / "out.png"), "--swapper", "classic", "--model", f"scrfd_2.5g={scrfd_path}"],
                          capture_output=True, text=True, timeout=120, preexec_fn=limit_memory)
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.strip().splitlines() if not line.startswith("WARNING")]
    assert lines == [f"error: {huge} is 32768x32767 = 1073709056 pixels, over the limit of 100000000 pixels"]
    assert not (tmp_path / "out.png").exists()


@pytest.mark.parametrize("kind,suffix,change", [
    ("16bit", ".png", "16-bit image written as 8-bit"),
    ("alpha", ".jpg", "alpha channel dropped: .jpg has none"),
])
def test_format_changes_are_warned_and_recorded(kind, suffix, change, tmp_path, images_dir, model_args, capsys):
    frame = read_image(images_dir / "obama.jpg").frame
    image = frame.astype(np.uint16) * 257 if kind == "16bit" else np.dstack([frame, np.full(frame.shape[:2], 9, np.uint8)])
    target = tmp_path / "target.png"
    cv2.imwrite(str(target), image)
    out = tmp_path / f"out{suffix}"
    code, err = swap(["-s", str(images_dir / "biden.jpg"), "-t", str(target), "-o", str(out), *model_args], capsys)
    assert code == 0, err
    assert f"WARNING: {target}: {change}" in err.splitlines()
    data = out.read_bytes()
    recorded = read_png_text(data) if suffix == ".png" else dict(
        c.split("=", 1) for c in read_jpeg_comments(data)[0].split("; "))
    assert recorded["fusion_ray.format_changes"] == change


def test_an_8_bit_target_has_no_format_change(tmp_path, images_dir, model_args, capsys):
    out = tmp_path / "out.png"
    code, err = swap(["-s", str(images_dir / "biden.jpg"), "-t", str(images_dir / "obama.jpg"), "-o", str(out),
                      *model_args], capsys)
    assert code == 0, err
    assert "written as" not in err and "fusion_ray.format_changes" not in read_png_text(out.read_bytes())


@pytest.mark.parametrize(("kind", "output", "expected"), [
    ("folder", "out.png", "--target {} is a folder, not a file"),
    ("empty_video", "out.mp4", "--target {} is empty (0 bytes)"),
    ("fifo", "out.png", "--target {} is not a regular file but a named pipe (FIFO)"),
    ("loop", "out.png", "--target {} is a symbolic link loop"),
])
def test_a_target_that_is_no_readable_file_is_named_before_any_work(kind, output, expected, tmp_path, images_dir,
                                                                   model_args, capsys):
    target = tmp_path / {"folder": "dir.jpg", "empty_video": "empty.mp4", "fifo": "fifo.jpg", "loop": "loop.jpg"}[kind]
    if kind == "folder":
        target.mkdir()
    elif kind == "empty_video":
        target.write_bytes(b"")
    elif kind == "fifo":
        os.mkfifo(target)  # never opened: reading it would block
    else:
        target.symlink_to(tmp_path / "loop")
        (tmp_path / "loop").symlink_to(target)
    code, err = swap(["-s", str(images_dir / "obama.jpg"), "-t", str(target), "-o", str(tmp_path / output),
                      *model_args], capsys)
    assert code == 2, err
    assert err.strip().splitlines() == [f"error: {expected.format(target)}"]


def test_sideways_photos_are_swapped_upright_and_the_turn_is_recorded(tmp_path, images_dir, scrfd_path, capsys):
    """JPEGs stored sideways with EXIF orientation 6 (a phone held sideways): faces are found
    upright in the target and the source, and the output is written upright."""
    target, source = tmp_path / "target.jpg", tmp_path / "source.jpg"
    upright = read_image(images_dir / "biden.jpg").frame
    target.write_bytes(sideways_jpeg(upright))
    source.write_bytes(sideways_jpeg(read_image(images_dir / "obama.jpg").frame, orientation=8))
    out = tmp_path / "out.png"
    code, err = swap(["-s", str(source), "-t", str(target), "-o", str(out), "--swapper", "classic",
                      "--model", f"scrfd_2.5g={scrfd_path}"], capsys)
    assert code == 0, err
    assert "1 of 1 face(s) swapped" in err
    change = "EXIF orientation 6 applied: written upright, with no orientation tag"
    assert f"WARNING: {target}: {change}" in err.splitlines()
    assert read_png_text(out.read_bytes())["fusion_ray.format_changes"] == change
    assert read_image(out).frame.shape == upright.shape


def face_animation(images_dir, fmt: str, frames: int = 3) -> bytes:
    """A short animation of a face moving right (4 px a frame), 40/80/120 ms frames, looping forever."""
    import io

    from PIL import Image

    face = read_image(images_dir / "obama.jpg").frame
    face = cv2.resize(face, (face.shape[1] // 3, face.shape[0] // 3))
    shifted = [cv2.warpAffine(face, np.float32([[1, 0, 4 * i], [0, 1, 0]]), face.shape[1::-1]) for i in range(frames)]
    images = [Image.fromarray(np.ascontiguousarray(f[..., ::-1])) for f in shifted]
    buffer = io.BytesIO()
    images[0].save(buffer, fmt, save_all=True, append_images=images[1:], duration=[40, 80, 120][:frames], loop=0)
    return buffer.getvalue()


@pytest.mark.parametrize(("fmt", "suffix"), [("GIF", ".gif"), ("WEBP", ".webp"), ("PNG", ".png")])
def test_every_frame_of_an_animated_image_is_swapped_and_kept(fmt, suffix, tmp_path, images_dir, scrfd_path, capsys):

    target = tmp_path / f"anim{suffix}"
    target.write_bytes(face_animation(images_dir, fmt))
    out = tmp_path / f"out{suffix}"
    code, err = swap(["-s", str(images_dir / "biden.jpg"), "-t", str(target), "-o", str(out), "--swapper", "classic",
                      "--model", f"scrfd_2.5g={scrfd_path}"], capsys)
    assert code == 0, err
    assert "3 of 3 face(s) swapped in 3 frames" in err
    assert_every_frame_swapped(target, out, [40, 80, 120])


def test_an_animated_image_to_a_one_frame_format_is_refused_before_any_work(tmp_path, images_dir, scrfd_path, capsys):
    target = tmp_path / "anim.gif"
    target.write_bytes(face_animation(images_dir, "GIF"))
    code, err = swap(["-s", str(images_dir / "biden.jpg"), "-t", str(target), "-o", str(tmp_path / "out.jpg"),
                      "--swapper", "classic", "--model", f"scrfd_2.5g={scrfd_path}"], capsys)
    assert code == 2
    assert err.strip().splitlines()[-1] == (f"error: {target} is an animated GIF of 3 frames, and '.jpg' holds one "
                                            "frame: write it as .gif, .webp or .png (APNG)")
    assert not (tmp_path / "out.jpg").exists()


def test_a_hyperswap_row_and_an_enhancer_row_end_to_end(tmp_path, images_dir, rows_models_config, capsys):
    """`fusion-ray swap --face-swapper-model hyperswap_1c_256 --face-enhancer-model gpen_bfr_512` on a
    shared photo, with STAND-INs of both rows: it runs, and the output says it is not a real swap."""
    out = tmp_path / "out.png"
    paths = rows_models_config.paths
    code, err = swap(["-s", str(images_dir / "obama.jpg"), "-t", str(images_dir / "obama_and_biden.jpg"),
                      "-o", str(out), "--models-dir", str(rows_models_config.models_dir),
                      "--model", f"scrfd_2.5g={paths['scrfd_2.5g']}",
                      "--model", f"arcface_w600k_r50={paths['arcface_w600k_r50']}", "--providers", "cpu",
                      "--precision", "detector=fp32", "--face-swapper-model", "hyperswap_1c_256",
                      "--face-enhancer-model", "gpen_bfr_512", "--face-enhancer-blend", "60"], capsys)
    assert code == 0, err
    assert "3 of 3 face(s) swapped" in err and "enhance" in err and "STAND-IN" in err
    target = read_image(images_dir / "obama_and_biden.jpg").frame
    assert not np.array_equal(read_image(out).frame, target)
    meta = read_png_text(out.read_bytes())
    assert meta["fusion_ray.stand_in_models"] == "arcface_w600k_r50,gpen_bfr_512,hyperswap_1c_256"
    assert "not a real face swap" in meta["Comment"]


def test_a_missing_row_file_is_one_line_with_the_download_command(tmp_path, images_dir, model_args, capsys):
    out = tmp_path / "out.png"
    code, err = swap(["-s", str(images_dir / "obama.jpg"), "-t", str(images_dir / "biden.jpg"), "-o", str(out),
                      *model_args, "--face-swapper-model", "simswap_256"], capsys)
    lines = [line for line in err.strip().splitlines() if not line.startswith("WARNING")]
    assert code != 0 and len(lines) == 1 and not out.exists(), err
    assert "crossface_simswap.onnx" in lines[0] and "`fusion-ray models download crossface_simswap`" in lines[0]


def test_each_input_is_read_once_and_the_output_checked_once(tmp_path, images_dir, model_args, capsys, monkeypatch):
    """One image swap reads the target's and the source's bytes once each (header checks and the
    decode share them), and checks the output path once."""
    import fusion_ray.cli.swap as swap_cli
    import fusion_ray.imageio as imageio

    reads: list[str] = []
    real_read_bytes = Path.read_bytes

    def counted(path: Path) -> bytes:
        reads.append(path.name)
        return real_read_bytes(path)

    checks: list[Path] = []
    real_check = imageio.check_writable_image_path

    def counted_check(path: Path, force: bool) -> None:
        checks.append(path)
        real_check(path, force)

    monkeypatch.setattr(Path, "read_bytes", counted)
    monkeypatch.setattr(imageio, "check_writable_image_path", counted_check)
    target, source = tmp_path / "target.jpg", tmp_path / "source.jpg"
    target.write_bytes(real_read_bytes(images_dir / "biden.jpg"))
    source.write_bytes(real_read_bytes(images_dir / "obama.jpg"))
    code, err = swap(["--source", str(source), "--target", str(target), "-o", str(tmp_path / "out.png"),
                      *model_args], capsys)
    assert code == 0, err
    assert (reads.count("target.jpg"), reads.count("source.jpg")) == (1, 1), reads
    assert len(checks) == 1 and swap_cli is not None
