"""Hostile images made from bytes, small on disk: a GIF whose later frames grow its canvas."""

from __future__ import annotations

import io

import numpy as np
from PIL import Image

_MIN_CODE_SIZE = 2
_CLEAR, _END, _FIRST_FREE = 4, 5, 6


def constant_lzw(pixels: int) -> bytes:
    """GIF LZW data (minimum code size 2) of ``pixels`` pixels of colour 0: each code is a run one
    longer than the last (a clear code when the table is full), so 81 MP take about 60 KB."""
    codes: list[tuple[int, int]] = []  # (code, width)
    width, free = _MIN_CODE_SIZE + 1, _FIRST_FREE
    emitted = 0

    def emit(code: int) -> None:
        nonlocal width, free, emitted
        codes.append((code, width))
        if code == _CLEAR:
            width, free, emitted = _MIN_CODE_SIZE + 1, _FIRST_FREE, 0
            return
        if emitted > 0 and free < 4096:
            free += 1
            if free == 1 << width and width < 12:
                width += 1
        emitted += 1

    emit(_CLEAR)
    left = pixels
    while left:
        run = 1 if emitted == 0 else emitted + 1  # what the table holds now: runs 1 .. emitted + 1
        if free >= 4095:
            emit(_CLEAR)
            continue
        run = min(run, left)
        emit(0 if run == 1 else run + _FIRST_FREE - 2)
        left -= run
    emit(_END)
    bits, count, out = 0, 0, bytearray()
    for code, size in codes:
        bits |= code << count
        count += size
        while count >= 8:
            out.append(bits & 0xFF)
            bits >>= 8
            count -= 8
    if count:
        out.append(bits & 0xFF)
    return bytes(out)


def _frame(width: int, height: int, pixels: bytes) -> bytes:
    """A frame: its graphic control extension (100 ms), image descriptor at (0, 0) and data."""
    control = b"\x21\xf9\x04\x00\x0a\x00\x00\x00"
    descriptor = b"\x2c" + (0).to_bytes(2, "little") * 2 + width.to_bytes(2, "little") + height.to_bytes(2, "little")
    blocks = b"".join(bytes([len(pixels[i:i + 255])]) + pixels[i:i + 255] for i in range(0, len(pixels), 255))
    return control + descriptor + b"\x00" + bytes([_MIN_CODE_SIZE]) + blocks + b"\x00"


def gif_bomb(frames: int = 4, big: tuple[int, int] = (9000, 9000), screen: int = 16) -> bytes:
    """A GIF of ``frames`` frames whose screen is ``screen`` square and whose frames after the
    first are ``big`` (width, height): its header says ``screen``, Pillow decodes ``big``."""
    head = b"GIF89a" + screen.to_bytes(2, "little") * 2 + b"\x81\x00\x00" + bytes([0, 0, 0, 255, 255, 255, 0, 0, 0, 0, 0, 0])
    loop = b"\x21\xff\x0bNETSCAPE2.0\x03\x01\x00\x00\x00"
    body = _frame(screen, screen, constant_lzw(screen * screen))
    big_frame = _frame(big[0], big[1], constant_lzw(big[0] * big[1]))
    return head + loop + body + big_frame * (frames - 1) + b"\x3b"


def small_gif(frames: int = 3, size: tuple[int, int] = (24, 16), durations: tuple[int, ...] | None = None) -> bytes:
    """An ordinary animated GIF (each frame a different grey), with ``durations`` in ms."""
    images = [Image.fromarray(np.full((size[1], size[0], 3), 40 + 60 * i, np.uint8)) for i in range(frames)]
    buffer = io.BytesIO()
    images[0].save(buffer, "GIF", save_all=True, append_images=images[1:],
                   duration=list(durations or (100,) * frames), loop=0, disposal=2)
    return buffer.getvalue()
