"""Hashes of model files and their records: streamed digests, atomic complete records."""

from __future__ import annotations

import hashlib
import json
import random
import re
import zlib
from pathlib import Path

import pytest

from fusion_ray.models.hashes import crc32_file, record_path, sha256_file, write_hash_record

PAYLOAD = random.Random(1234).randbytes(100_000)


def crc_of(data: bytes) -> str:
    return format(zlib.crc32(data) & 0xFFFFFFFF, "08x")


def test_streamed_hashes_match_whole_file_hashes(tmp_path: Path) -> None:
    path = tmp_path / "blob"
    path.write_bytes(PAYLOAD)
    assert sha256_file(path, chunk_size=1000) == hashlib.sha256(PAYLOAD).hexdigest()
    assert crc32_file(path, chunk_size=1000) == crc_of(PAYLOAD)
    assert re.fullmatch(r"[0-9a-f]{8}", crc32_file(path))


def test_write_hash_record_is_complete_and_leaves_no_temp_files(tmp_path: Path) -> None:
    path = tmp_path / "model.onnx"
    path.write_bytes(PAYLOAD)
    digest = write_hash_record(path, "generated")
    raw = json.loads(record_path(path).read_text())
    stat = path.stat()
    assert raw == {
        "sha256": hashlib.sha256(PAYLOAD).hexdigest(),
        "size": stat.st_size,
        "mtime_ns": stat.st_mtime_ns,
        "source": "generated",
    }
    assert digest == raw["sha256"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.onnx", "model.onnx.sha256"]
    with pytest.raises(ValueError):
        write_hash_record(path, "guessed")  # type: ignore[arg-type]
