"""Storage on a local folder and on a real S3 API (moto's server): read, stat, glob, publish."""

from __future__ import annotations

import os
import pickle
import threading
from pathlib import Path

import pyarrow.fs as pafs
import pytest

from fusion_ray.errors import InputError
from fusion_ray.storage import (
    BucketNotFoundError,
    Location,
    ObjectNotFoundError,
    Storage,
    StorageAccessError,
    StorageConfig,
    StorageError,
)
from tests.s3_server import S3Server

Root = tuple[Storage, Location]


def _listing(storage: Storage, folder: Location) -> list[str]:
    """Every file under ``folder`` (hidden and temporary ones too), relative to it."""
    if folder.is_local:
        found = folder.path.rglob("*") if folder.path.exists() else []
        return sorted(str(p.relative_to(folder.path)) for p in found if p.is_file())
    everything = storage.glob(f"{folder}/**/*") + storage.glob(f"{folder}/**/.*")
    return sorted(loc.key.removeprefix(folder.key + "/") for loc in everything)


def test_write_read_exists_and_stat(store_root: Root) -> None:
    storage, root = store_root
    loc = root / "a" / "b.bin"
    assert not storage.exists(loc)
    storage.write_bytes_atomic(loc, b"x" * 100)
    assert storage.exists(loc) and not storage.exists(root / "a")  # a folder or prefix is no file
    assert storage.read_bytes(loc) == b"x" * 100
    first = storage.stat(loc)
    assert first.size == 100 and first.mtime_ns is not None
    if not root.is_local:
        assert first.etag and first.fingerprint.startswith("100:etag:")
    storage.write_bytes_atomic(loc, b"y" * 100)  # same size, other content
    if root.is_local:
        os.utime(loc.path, ns=(first.mtime_ns + 10**9, first.mtime_ns + 10**9))
    assert storage.stat(loc).fingerprint != first.fingerprint
    with pytest.raises(StorageError, match=r"100 bytes, more than the 10 allowed"):
        storage.read_bytes(loc, max_bytes=10)


def test_a_missing_file_is_an_error_naming_it(store_root: Root) -> None:
    storage, root = store_root
    storage.write_bytes_atomic(root / "present", b"1")
    missing = root / "missing.mp4"
    for call in (storage.read_bytes, storage.stat, storage.open_input):
        with pytest.raises(ObjectNotFoundError) as caught:
            call(missing)
        assert str(caught.value) == f"{missing}: no such file or object"


def test_open_input_is_seekable(store_root: Root) -> None:
    storage, root = store_root
    data = bytes(range(256)) * 64
    storage.write_bytes_atomic(root / "f.bin", data)
    with storage.open_input(root / "f.bin") as file:
        assert file.seekable()
        file.seek(1000)
        assert file.read(10) == data[1000:1010]
        assert file.seek(-6, os.SEEK_END) == len(data) - 6 and file.read() == data[-6:]
        file.seek(5)
        assert file.tell() == 5 and file.read(3) == data[5:8]


def test_glob_follows_glob_rules(store_root: Root) -> None:
    storage, root = store_root
    for name in ("clips/a.mp4", "clips/b.mp4", "clips/sub/c.mp4", "clips/.hidden.mp4", "clips/x.png",
                 "clips2/d.mp4"):
        storage.write_bytes_atomic(root / name, b"v")

    def names(pattern: str) -> list[str]:
        return [loc.name for loc in storage.glob(f"{root}/{pattern}")]

    assert names("clips/*.mp4") == ["a.mp4", "b.mp4"]
    assert names("clips/**/*.mp4") == ["a.mp4", "b.mp4", "c.mp4"]
    assert names("clips*/*.mp4") == ["a.mp4", "b.mp4", "d.mp4"]
    assert names("*/sub/*") == ["c.mp4"]
    assert names("clips/.*") == [".hidden.mp4"]
    assert names("clips/a.mp4") == ["a.mp4"]
    assert names("clips/none.mp4") == [] and names("nothing/*.mp4") == []
    assert all(isinstance(loc, Location) and loc.bucket == root.bucket for loc in storage.glob(f"{root}/*/*"))


def test_publish_copies_or_moves_a_finished_file(store_root: Root, tmp_path: Path) -> None:
    storage, root = store_root
    local = tmp_path / "made.mp4"
    local.write_bytes(b"video" * 1000)
    storage.publish(local, root / "out" / "made.mp4")
    assert local.exists() and storage.read_bytes(root / "out" / "made.mp4") == b"video" * 1000
    storage.publish(local, root / "out" / "moved.mp4", move=True)
    assert not local.exists() and storage.read_bytes(root / "out" / "moved.mp4") == b"video" * 1000
    with pytest.raises(ObjectNotFoundError, match="no such file to publish"):
        storage.publish(local, root / "out" / "again.mp4")
    assert _listing(storage, root / "out") == ["made.mp4", "moved.mp4"]


def test_open_output_appears_only_on_success(store_root: Root, tmp_path: Path) -> None:
    storage, root = store_root
    spool = tmp_path / "spool"
    spool.mkdir()
    target = root / "o" / "x.png"
    with storage.open_output(target, spool_dir=spool) as file:
        file.write(b"half")
        assert not storage.exists(target)
        file.write(b"-and-rest")
    assert storage.read_bytes(target) == b"half-and-rest"
    failed = root / "o" / "failed.png"
    with pytest.raises(RuntimeError, match="encoder broke"), \
            storage.open_output(failed, spool_dir=spool) as file:
        file.write(b"partial")
        raise RuntimeError("encoder broke")
    assert not storage.exists(failed)
    assert _listing(storage, root / "o") == ["x.png"]  # no temporary file left either
    assert list(spool.iterdir()) == []  # the spool file is gone either way


def test_remove_and_remove_tree(store_root: Root) -> None:
    storage, root = store_root
    for name in ("parts/1.mp4", "parts/2.mp4", "keep.mp4"):
        storage.write_bytes_atomic(root / name, b"p")
    storage.remove(root / "keep.mp4")
    storage.remove(root / "keep.mp4")  # nothing there: nothing to do
    assert not storage.exists(root / "keep.mp4")
    storage.remove_tree(root / "parts")
    storage.remove_tree(root / "parts")
    assert not storage.exists(root / "parts" / "1.mp4") and not storage.exists(root / "parts" / "2.mp4")
    if not root.is_local:
        with pytest.raises(StorageError, match="refusing to delete a whole bucket"):
            storage.remove_tree(root)


def test_storage_works_after_pickling(store_root: Root) -> None:
    """As a Ray task receives it: the config travels, the filesystems are rebuilt."""
    storage, root = store_root
    storage.write_bytes_atomic(root / "p.bin", b"pickled")
    copy = pickle.loads(pickle.dumps(storage))
    assert copy.read_bytes(root / "p.bin") == b"pickled"


def test_no_partial_object_is_visible_during_a_publish(s3_server: S3Server, s3_bucket: str,
                                                       tmp_path: Path) -> None:
    """A multipart upload straight to the final key: polled while it runs, the key is absent,
    then complete; never a part of it."""
    storage = s3_server.storage()
    loc = Location.parse(f"s3://{s3_bucket}/out/big.mp4")
    size = 16 << 20  # more than one part
    big = tmp_path / "big.mp4"
    big.write_bytes(os.urandom(size))
    seen: list[int | None] = []
    failures: list[BaseException] = []

    def upload() -> None:
        try:
            storage.publish(big, loc)
        except BaseException as exc:
            failures.append(exc)

    thread = threading.Thread(target=upload)
    thread.start()
    while thread.is_alive():
        info = storage.filesystem(loc).get_file_info(loc.fs_path)
        seen.append(info.size if info.type == pafs.FileType.File else None)
    thread.join()
    assert not failures
    assert None in seen, "the key was never polled while the upload ran"
    assert set(seen) <= {None, size}
    stat = storage.stat(loc)
    assert stat.size == size and stat.etag is not None and "-" in stat.etag  # a multipart ETag
    assert storage.read_bytes(loc) == big.read_bytes()


def test_an_open_upload_stream_is_invisible_until_closed(s3_server: S3Server, s3_bucket: str) -> None:
    storage = s3_server.storage()
    loc = Location.parse(f"s3://{s3_bucket}/out/stream.bin")
    stream = storage.filesystem(loc).open_output_stream(loc.fs_path)
    stream.write(b"a" * (12 << 20))  # parts are uploaded before the close
    stream.flush()
    assert not storage.exists(loc)
    assert storage.glob(f"s3://{s3_bucket}/out/*") == []
    stream.close()
    assert storage.stat(loc).size == 12 << 20


def test_pyarrow_completes_an_upload_interrupted_by_an_exception(s3_server: S3Server, s3_bucket: str) -> None:
    """Why nothing is streamed to a bucket from Python: pyarrow's streams have no abort, and
    leaving ``with`` on an exception completes the upload with what was written."""
    storage = s3_server.storage()
    loc = Location.parse(f"s3://{s3_bucket}/raw.bin")
    with pytest.raises(RuntimeError), storage.filesystem(loc).open_output_stream(loc.fs_path) as stream:
        stream.write(b"partial")
        raise RuntimeError("interrupted")
    assert storage.read_bytes(loc) == b"partial"


def test_open_media_gives_pyav_a_path_or_a_ranged_file(store_root: Root, tmp_path: Path) -> None:
    storage, root = store_root
    storage.write_bytes_atomic(root / "v.bin", b"media")
    with storage.open_media(root / "v.bin") as source:
        if root.is_local:
            assert source == str(root.path / "v.bin")
        else:
            assert not isinstance(source, str) and source.read() == b"media"
            file = source
    if not root.is_local:
        assert file.closed
    with pytest.raises(ObjectNotFoundError, match="no such file or object"), storage.open_media(root / "none.mp4"):
        pass


def test_check_writable(store_root: Root, s3_server: S3Server) -> None:
    storage, root = store_root
    if root.is_local:
        root.path.mkdir()
    storage.check_writable(root)
    assert _listing(storage, root) == []  # the probe is gone
    if root.is_local:
        with pytest.raises(InputError, match="output root does not exist"):
            storage.check_writable(root / "none")
    else:
        with pytest.raises(BucketNotFoundError):
            storage.check_writable("s3://no-such-bucket-here/out")
        bad = Storage(StorageConfig.from_env({**s3_server.env(), "AWS_SECRET_ACCESS_KEY": "wrong"}))
        with pytest.raises(StorageAccessError):
            bad.check_writable(root / "out")
