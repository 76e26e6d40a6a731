"""The model store: directory resolution, overrides, integrity levels, status rows."""

from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path

import pytest

from fusion_ray.errors import ModelError, ModelIntegrityError, ModelMissingError
from fusion_ray.models.hashes import (
    hash_file_path,
    read_hash_record,
    record_path,
    sha256_file,
    write_hash_record,
)
from fusion_ray.models.registry import get_spec
from fusion_ray.models.store import LocatedModel, ModelStore, resolve_models_dir
from tests.models.store_helpers import NAME, PAYLOAD, crc_of, make_store, place

STORE_LOGGER = "fusion_ray.models.store"

# --------------------------------------------------------------------------- resolution


def test_resolve_order_explicit_then_env_then_cache(tmp_path: Path) -> None:
    env = {"FUSION_RAY_MODELS": str(tmp_path / "env"), "XDG_CACHE_HOME": str(tmp_path / "xdg")}
    assert resolve_models_dir(tmp_path / "cli", env) == tmp_path / "cli"
    assert resolve_models_dir(None, env) == tmp_path / "env"
    del env["FUSION_RAY_MODELS"]
    assert resolve_models_dir(None, env) == tmp_path / "xdg" / "fusion_ray" / "models"
    assert resolve_models_dir(None, {}) == Path.home() / ".cache" / "fusion_ray" / "models"
    # Empty values count as unset; a relative XDG_CACHE_HOME is invalid per the XDG spec.
    assert resolve_models_dir(None, {"FUSION_RAY_MODELS": "", "XDG_CACHE_HOME": "rel"}) == (
        Path.home() / ".cache" / "fusion_ray" / "models"
    )


def test_path_for_and_overrides(tmp_path: Path) -> None:
    override = tmp_path / "elsewhere" / "det.onnx"
    store = ModelStore(tmp_path / "models", {"scrfd_2.5g": override})
    assert store.path_for("inswapper_128") == tmp_path / "models" / "inswapper_128.onnx"
    assert store.path_for("scrfd_2.5g") == override
    assert hash_file_path(store.path_for("gfpgan_1.4")).name == "gfpgan_1.4.hash"
    with pytest.raises(ModelError, match="known models"):
        ModelStore(tmp_path, {"scrfd_10g": override})
    with pytest.raises(ModelError, match="known models"):
        store.path_for("nope")


# --------------------------------------------------------------------------- locate / verify


def test_missing_model_message_names_path_and_fix(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    with pytest.raises(ModelMissingError) as info:
        store.locate(NAME)
    message = str(info.value)
    assert str(tmp_path / "inswapper_128.onnx") in message
    assert f"fusion-ray models download {NAME}" in message
    assert "recorded on download" in message
    # With the published .hash already there, the message quotes the expected CRC32.
    hash_file_path(store.path_for(NAME)).write_text("0badc0de")
    with pytest.raises(ModelMissingError, match="0badc0de"):
        store.locate(NAME)


def test_hand_placed_file_is_unverified_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = make_store(tmp_path)
    path = place(store)
    with caplog.at_level(logging.WARNING, logger=STORE_LOGGER):
        located = store.locate(NAME)
    assert located == LocatedModel(NAME, path, "unverified")
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    text = warnings[0].getMessage()
    assert "could not be checked offline" in text
    assert get_spec(NAME).hash_url in text
    assert not record_path(path).exists()  # nothing vouches for it, so nothing is recorded


def test_hash_file_beside_gives_crc32_verified_and_writes_record(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    path = place(store)
    hash_file_path(path).write_text(crc_of(PAYLOAD) + "\n")
    located = store.locate(NAME)
    assert located.status == "crc32-verified"
    assert located.sha256 == hashlib.sha256(PAYLOAD).hexdigest()
    record = read_hash_record(path)
    assert record is not None and record.source == "crc32-verified"
    assert record.sha256 == located.sha256
    assert store.locate(NAME).status == "verified"  # the record now takes the fast path


def test_hash_file_mismatch_raises(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    path = place(store)
    hash_file_path(path).write_text("00000000")
    with pytest.raises(ModelIntegrityError) as info:
        store.locate(NAME)
    assert "00000000" in str(info.value) and crc_of(PAYLOAD) in str(info.value)
    assert not record_path(path).exists()


def test_tampered_file_after_record_raises(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    path = place(store)
    expected = write_hash_record(path, "download")
    assert store.locate(NAME).status == "verified"
    path.write_bytes(PAYLOAD[:-10] + b"tampered!!" + b"more")  # content, size and mtime change
    with pytest.raises(ModelIntegrityError) as info:
        store.locate(NAME)
    message = str(info.value)
    assert expected in message
    assert sha256_file(path) in message
    assert f"fusion-ray models download {NAME}" in message


def test_fast_path_trusts_size_and_mtime_but_verify_rehashes(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    path = place(store)
    write_hash_record(path, "download")
    stat = path.stat()
    path.write_bytes(bytes(len(PAYLOAD)))  # same size, different content
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # and the old mtime
    assert store.locate(NAME).status == "verified"  # documented limit of the fast path
    with pytest.raises(ModelIntegrityError):
        store.verify(NAME)


def test_touched_file_with_same_content_stays_verified(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    path = place(store)
    write_hash_record(path, "download")
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 5_000_000_000))
    assert store.locate(NAME).status == "verified"
    record = read_hash_record(path)
    assert record is not None
    assert record.mtime_ns == path.stat().st_mtime_ns and record.source == "download"


def test_verify_checks_crc_too_and_reports_sha(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    path = place(store)
    write_hash_record(path, "download")
    hash_file_path(path).write_text(crc_of(PAYLOAD))
    assert store.verify(NAME) == LocatedModel(
        NAME, path, "verified", hashlib.sha256(PAYLOAD).hexdigest()
    )
    hash_file_path(path).write_text("12345678")
    with pytest.raises(ModelIntegrityError, match="12345678"):
        store.verify(NAME)


def test_status_rows(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    place(store, name="inswapper_128")
    place(store, name="gfpgan_1.4")
    write_hash_record(store.path_for("gfpgan_1.4"), "download")
    place(store, name="arcface_w600k_r50")
    write_hash_record(store.path_for("arcface_w600k_r50"), "download")
    store.path_for("arcface_w600k_r50").write_bytes(b"corrupt")
    rows = {row["name"]: row for row in store.status_rows()}
    standard = {"scrfd_2.5g", "arcface_w600k_r50", "inswapper_128", "inswapper_128_fp16", "gfpgan_1.4"}
    assert {name for name, row in rows.items() if row["standard"]} == standard
    assert {"hyperswap_1a_256", "codeformer", "xseg_1", "dlib_68"} <= set(rows)
    assert rows["hyperswap_1a_256"]["standard"] is False and rows["hyperswap_1a_256"]["status"] == "missing"
    assert rows["inswapper_128"]["stand_in"] is False  # a placed file that is not a labelled stand-in
    assert rows["scrfd_2.5g"]["present"] is False and rows["scrfd_2.5g"]["status"] == "missing"
    assert rows["scrfd_2.5g"]["size"] is None
    assert rows["inswapper_128"]["status"] == "unverified"
    assert rows["inswapper_128"]["size"] == len(PAYLOAD)
    assert rows["gfpgan_1.4"]["status"] == "verified" and rows["gfpgan_1.4"]["kind"] == "enhancer"
    assert rows["arcface_w600k_r50"]["status"] == "corrupt"
    assert "non-commercial" in rows["inswapper_128"]["licence"]
    for row in rows.values():
        assert {"name", "kind", "file", "present", "status", "size", "licence"} <= set(row)


def test_real_detector_override_when_available(scrfd_path: Path, tmp_path: Path) -> None:
    store = ModelStore(tmp_path, {"scrfd_2.5g": scrfd_path})
    located = store.verify("scrfd_2.5g")
    assert located.path == scrfd_path
    assert located.sha256 == "041f73f47371333d1d17a6fee6c8ab4e6aecabefe398ff32cca4e2d5eaee0af9"
