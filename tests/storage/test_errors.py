"""Per-item storage errors against a real S3 API: a missing object, a wrong bucket, wrong
credentials, an unreachable endpoint; each one line naming the URI and the cause."""

from __future__ import annotations

import time
from pathlib import Path

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
    StorageUnavailableError,
)
from fusion_ray.storage.errors import translate
from tests.procs import free_port
from tests.s3_server import S3Server


def _one_line(exc: BaseException, uri: str) -> str:
    text = str(exc)
    assert isinstance(exc, InputError)
    assert "\n" not in text and text.startswith(f"{uri}: "), text
    return text


def test_a_missing_object(s3_server: S3Server, s3_bucket: str) -> None:
    storage = s3_server.storage()
    uri = f"s3://{s3_bucket}/clips/none.mp4"
    for call in (storage.read_bytes, storage.stat, storage.open_input):
        with pytest.raises(ObjectNotFoundError) as caught:
            call(uri)
        assert type(caught.value) is ObjectNotFoundError
        assert _one_line(caught.value, uri) == f"{uri}: no such file or object"
    assert not storage.exists(uri)


def test_a_wrong_bucket(s3_server: S3Server) -> None:
    storage = s3_server.storage()
    uri = "s3://no-such-bucket-here/clips/a.mp4"
    for call in (storage.read_bytes, storage.stat, storage.open_input):
        with pytest.raises(BucketNotFoundError) as caught:
            call(uri)
        assert _one_line(caught.value, uri) == f"{uri}: no such bucket 'no-such-bucket-here'"
    with pytest.raises(BucketNotFoundError, match="no such bucket"):
        storage.glob("s3://no-such-bucket-here/clips/*.mp4")
    with pytest.raises(BucketNotFoundError, match="no such bucket"):
        storage.write_bytes_atomic(uri, b"x")


def test_wrong_credentials(s3_server: S3Server, s3_bucket: str, tmp_path: Path) -> None:
    """The server checks signatures (tests/s3_server.py): a wrong secret is refused."""
    s3_server.storage().write_bytes_atomic(f"s3://{s3_bucket}/a.mp4", b"x")
    env = {**s3_server.env(), "AWS_SECRET_ACCESS_KEY": "not-the-secret"}
    storage = Storage(StorageConfig.from_env(env))
    uri = f"s3://{s3_bucket}/a.mp4"
    local = tmp_path / "out.mp4"
    local.write_bytes(b"y")
    calls = [lambda: storage.read_bytes(uri), lambda: storage.stat(uri), lambda: storage.exists(uri),
             lambda: storage.open_input(uri), lambda: storage.publish(local, uri),
             lambda: storage.write_bytes_atomic(uri, b"z")]
    for call in calls:
        with pytest.raises(StorageAccessError) as caught:
            call()
        text = _one_line(caught.value, uri)
        assert "access denied" in text and "AWS_ACCESS_KEY_ID" in text
    with pytest.raises(StorageAccessError) as listing:
        storage.glob(f"s3://{s3_bucket}/*.mp4")
    assert "access denied to list (SIGNATURE_DOES_NOT_MATCH during ListObjectsV2)" in \
        _one_line(listing.value, f"s3://{s3_bucket}")
    unknown = Storage(StorageConfig.from_env({**s3_server.env(), "AWS_ACCESS_KEY_ID": "AKIANOSUCHKEY0000000"}))
    with pytest.raises(StorageAccessError, match="INVALID_ACCESS_KEY_ID during ListObjectsV2"):
        unknown.glob(f"s3://{s3_bucket}/*.mp4")
    with pytest.raises(StorageAccessError, match="access denied to read"):
        unknown.read_bytes(uri)
    assert s3_server.storage().read_bytes(uri) == b"x"  # the right key still reads it


def test_an_unreachable_endpoint() -> None:
    port = free_port()  # closed again: nothing listens there
    config = StorageConfig.from_env({"AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "AWS_ACCESS_KEY_ID": "a",
                                     "AWS_SECRET_ACCESS_KEY": "b"})
    config = config.model_copy(update={"s3": config.s3.model_copy(update={"max_attempts": 1})})
    uri = "s3://some-bucket/a.mp4"
    start = time.monotonic()
    with pytest.raises(StorageUnavailableError) as caught:
        Storage(config).read_bytes(uri)
    assert time.monotonic() - start < 30
    assert "cannot reach the store" in _one_line(caught.value, uri)


@pytest.mark.parametrize(("exc", "kind", "says"), [
    (FileNotFoundError(2, "Path does not exist 'b/k'"), ObjectNotFoundError, "no such file or object"),
    (OSError("When getting information for key 'k' in bucket 'b': AWS Error ACCESS_DENIED during HeadObject "
             "operation: No response body."), StorageAccessError, "access denied to read (ACCESS_DENIED during HeadObject)"),
    (OSError("Bucket 'b' not found. To create buckets, enable the allow_bucket_creation option."),
     BucketNotFoundError, "no such bucket"),
    (OSError("AWS Error NETWORK_CONNECTION during HeadObject operation: curlCode: 7, Couldn't connect"),
     StorageUnavailableError, "cannot reach the store to read (NETWORK_CONNECTION during HeadObject)"),
    (PermissionError(13, "Permission denied"), StorageAccessError, "access denied"),
    (OSError("AWS Error SLOW_DOWN during PutObject operation: try later\nmore"), StorageError,
     "cannot read: SLOW_DOWN during PutObject"),
])
def test_translate(exc: OSError, kind: type[StorageError], says: str) -> None:
    error = translate(exc, "s3://b/k", "read")
    assert type(error) is kind
    assert str(error).startswith("s3://b/k: ") and says in str(error) and "\n" not in str(error)


def test_local_errors(tmp_path: Path) -> None:
    storage = Storage()
    with pytest.raises(ObjectNotFoundError, match="no such file"):
        storage.read_bytes(tmp_path / "none.jpg")
    with pytest.raises(StorageError, match="is a folder"):
        storage.read_bytes(tmp_path)
    with pytest.raises(StorageError, match="is a folder"):
        storage.stat(tmp_path)
    with pytest.raises(StorageError):
        storage.open_input(tmp_path)
    assert Location.parse(tmp_path / "none.jpg").is_local and not storage.exists(tmp_path / "none.jpg")
