"""Shared kit of the hostile-input tables (tests/test_hostile_*.py): every hostile file made once,
small, in one folder, and a check that a refused case lost or wrote nothing."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import cv2
import numpy as np

from tests.bombs import gif_bomb, small_gif
from tests.test_imageio import huge_png


def _png(hw: tuple[int, int]) -> bytes:
    ok, data = cv2.imencode(".png", np.full((*hw, 3), 120, np.uint8))
    assert ok
    return data.tobytes()


def _animated_webp() -> bytes:
    import io

    from PIL import Image

    frames = [Image.fromarray(np.full((32, 32, 3), 50 * i, np.uint8)) for i in range(1, 4)]
    buffer = io.BytesIO()
    frames[0].save(buffer, "WEBP", save_all=True, append_images=frames[1:], duration=[50, 50, 50], loop=0)
    return buffer.getvalue()


def _audio_only() -> bytes:
    import av

    path = Path(os.environ.get("TMPDIR", "/tmp")) / f"fusion_ray_audio_{os.getpid()}.m4a"
    with av.open(str(path), "w") as container:
        stream = container.add_stream("aac", rate=44100)
        frame = av.AudioFrame.from_ndarray(np.zeros((1, 1024), np.float32), format="fltp", layout="mono")
        frame.sample_rate = 44100
        for _ in range(5):
            for packet in stream.encode(frame):  # type: ignore[attr-defined]
                container.mux(packet)
        for packet in stream.encode(None):  # type: ignore[attr-defined]
            container.mux(packet)
    data = path.read_bytes()
    path.unlink()
    return data


def make_kit(kit: Path, images_dir: Path) -> Path:
    """Every hostile input, by name, in ``kit``."""
    kit.mkdir(parents=True, exist_ok=True)
    shutil.copy(images_dir / "obama.jpg", kit / "face.jpg")
    shutil.copy(images_dir / "biden.jpg", kit / "target.jpg")
    files = {
        "bomb.gif": gif_bomb(4), "bomb20.gif": gif_bomb(20), "bomb_huge.gif": gif_bomb(2, (20000, 20000)),
        "anim.gif": small_gif(3), "zero.gif": small_gif(3, durations=(0, 0, 0)), "anim.webp": _animated_webp(),
        "strip_wide.png": _png((3, 20000)), "strip_tall.png": _png((20000, 3)), "dot.png": _png((1, 1)),
        "huge.png": huge_png(12000, 9000), "text.jpg": b"not an image", "empty.png": b"",
        "truncated.png": _png((64, 64))[:60], "audio.m4a": _audio_only(), "empty.mp4": b"",
        "garbage.mp4": os.urandom(4096), "notes.txt": b"hello",
    }
    for name, data in files.items():
        (kit / name).write_bytes(data)
    (kit / "folder.png").mkdir(exist_ok=True)
    if not (kit / "pipe.png").exists():
        os.mkfifo(kit / "pipe.png")
    if not (kit / "loop.png").is_symlink():
        os.symlink(kit / "loop.png", kit / "loop.png")
    return kit


def snapshot(folder: Path) -> dict[str, str]:
    """Each regular file under ``folder`` by relative name, with its SHA-256 (what must not change)."""
    found = {}
    for path in sorted(folder.rglob("*")):
        if path.is_file() and not path.is_symlink() and not path.is_fifo():
            found[str(path.relative_to(folder))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found
