"""Helpers shared by the model store and download tests."""

from __future__ import annotations

import random
import zlib
from pathlib import Path
from typing import Any

from fusion_ray.models.store import ModelStore

NAME = "inswapper_128"
CHUNK = 16 * 1024
PAYLOAD = random.Random(1234).randbytes(100_000)  # about 7 chunks


def crc_of(data: bytes) -> str:
    return format(zlib.crc32(data) & 0xFFFFFFFF, "08x")


def make_store(root: Path, **kwargs: Any) -> ModelStore:
    return ModelStore(root, chunk_size=CHUNK, timeout_s=5.0, **kwargs)


def place(store: ModelStore, data: bytes = PAYLOAD, name: str = NAME) -> Path:
    path = store.path_for(name)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path
