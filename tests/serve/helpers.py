"""Helpers of the serve tests: a forged image header, an ingress core without Ray."""

from __future__ import annotations

import struct
import zlib

import cv2

from fusion_ray.serve.ingress import IngressCore
from fusion_ray.serve.settings import parse_settings


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def forged_png(width: int, height: int) -> bytes:
    """A PNG signature, an IHDR claiming width x height, an empty IDAT and IEND (a bomb's header:
    a real bomb has its chunk stream too, and Pillow reads on to the first IDAT)."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + _png_chunk(b"IHDR", ihdr) + _png_chunk(b"IDAT", b"")
            + _png_chunk(b"IEND", b""))


def ingress_core_with(args: dict) -> IngressCore:
    """An ingress core over these settings, with no deployment handles (OpenCV's thread count kept:
    the core sizes OpenCV's pool for its replica, not for this process)."""
    threads = cv2.getNumThreads()
    core = IngressCore(parse_settings(args), None, None, None, None)
    cv2.setNumThreads(threads)
    return core


def ingress_core(**limits: object) -> IngressCore:
    """An ingress core with these limits and no token."""
    return ingress_core_with({"limits": limits, "auth": {"token_env": None}})
