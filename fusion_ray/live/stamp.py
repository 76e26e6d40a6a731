"""A sequence number drawn into a frame's pixels, and read back after a video codec.

Measuring a WebRTC path end to end needs to know which sent frame a received one is: RTP
timestamps are rewritten by every hop that re-encodes, pixels are not. :func:`stamp` draws a
16-bit number in the top-left corner of a BGR frame as two rows of 16 blocks of 16x16 pixels:
the bits (white 1, black 0) over their complement. Blocks on the codecs' 16-pixel macroblock grid,
full contrast and a complement row to check against make the code survive H.264 and VP8 at the
bitrates WebRTC uses at 640x360; :func:`read_stamp` says None where the rows do not agree.
"""

from __future__ import annotations

import numpy as np

from fusion_ray.errors import InputError

BITS = 16
BLOCK = 16
MIN_CONTRAST = 64.0
"""A block and its complement must differ by this much (0-255 luma) to be read."""

STAMP_SIZE = (BITS * BLOCK, 2 * BLOCK)
"""Width and height of the stamped corner, pixels."""


def stamp(frame: np.ndarray, seq: int) -> np.ndarray:
    """``frame`` (BGR, at least 256x32) with ``seq`` modulo 65536 drawn in its top-left corner, in place."""
    height, width = frame.shape[:2]
    if width < STAMP_SIZE[0] or height < STAMP_SIZE[1]:
        raise InputError(f"a stamped frame needs at least {STAMP_SIZE[0]}x{STAMP_SIZE[1]} pixels, got {width}x{height}")
    code = seq % (1 << BITS)
    for bit in range(BITS):
        on = (code >> (BITS - 1 - bit)) & 1
        x = bit * BLOCK
        frame[:BLOCK, x:x + BLOCK] = 255 if on else 0
        frame[BLOCK:2 * BLOCK, x:x + BLOCK] = 0 if on else 255
    return frame


def _block_means(frame: np.ndarray, row: int) -> np.ndarray:
    """The mean level of the inner 8x8 pixels of each block of ``row`` (0 or 1)."""
    margin = BLOCK // 4
    y = row * BLOCK
    band = frame[y + margin:y + BLOCK - margin, :BITS * BLOCK].astype(np.float32)
    if band.ndim == 3:
        band = band.mean(axis=2)
    cells = band.reshape(BLOCK - 2 * margin, BITS, BLOCK)[:, :, margin:BLOCK - margin]
    return cells.mean(axis=(0, 2))  # type: ignore[no-any-return]


def read_stamp(frame: np.ndarray) -> int | None:
    """The number :func:`stamp` drew into ``frame``, or None when there is none (or it is unreadable)."""
    height, width = frame.shape[:2]
    if width < STAMP_SIZE[0] or height < STAMP_SIZE[1]:
        return None
    bits, complement = _block_means(frame, 0), _block_means(frame, 1)
    if np.any(np.abs(bits - complement) < MIN_CONTRAST):
        return None
    code = 0
    for value, other in zip(bits, complement, strict=True):
        code = (code << 1) | int(value > other)
    return code
