"""A store that stalls in the middle of an upload: its unfinished multipart upload is aborted,
or, when the store cannot be reached to abort it, the error says so and ``abort_uploads``
(``fusion-ray job --clean-parts``) aborts it later. A stalled part costs pyarrow's timeouts
(about 25 s here), so one test stalls. Against the real S3 server behind a proxy
that stops answering (tests/stall_proxy.py)."""

import os

import pytest

from fusion_ray.storage import Storage, StorageConfig, StorageError
from tests.stall_proxy import stall_proxy, upload_parts


def _through(proxy, s3_server) -> Storage:
    """A client of the S3 server through ``proxy``, giving up on a request after 2 s."""
    config = StorageConfig.from_env({**s3_server.env(), "AWS_ENDPOINT_URL": proxy.endpoint_url})
    s3 = config.s3.model_copy(update={"request_timeout_s": 1.0, "max_attempts": 1})
    return Storage(config.model_copy(update={"s3": s3}))


def _client(s3_server):
    import boto3

    return boto3.client("s3", endpoint_url=s3_server.endpoint_url, region_name=s3_server.region,
                        aws_access_key_id=s3_server.access_key_id, aws_secret_access_key=s3_server.secret_access_key)


def _unfinished(s3_server, bucket: str) -> list[str]:
    return [u["Key"] for u in _client(s3_server).list_multipart_uploads(Bucket=bucket).get("Uploads", [])]


@pytest.fixture
def big_file(tmp_path):
    path = tmp_path / "big.mp4"
    path.write_bytes(os.urandom(12 << 20))  # over pyarrow's part size: a multipart upload
    return path


def test_an_upload_the_store_stalls_in_is_aborted(s3_server, s3_bucket, big_file):
    with stall_proxy(s3_server.endpoint_url, upload_parts) as proxy:
        with pytest.raises(StorageError, match="the upload did not complete|cannot reach the store"):
            _through(proxy, s3_server).publish(big_file, f"s3://{s3_bucket}/out/v.mp4")
        assert proxy.stalled  # it did stall in the middle
    assert _unfinished(s3_server, s3_bucket) == []  # once its parts stayed, invisible


def test_unfinished_uploads_left_by_a_store_that_was_down_are_aborted_under_a_prefix(s3_server, s3_bucket):
    """What a store that stayed down leaves (the error then says so): aborted by prefix later."""
    client = _client(s3_server)
    for key in ("out/a.mp4", "out/sub/b.mp4", "other/c.mp4"):
        upload = client.create_multipart_upload(Bucket=s3_bucket, Key=key)
        client.upload_part(Bucket=s3_bucket, Key=key, UploadId=upload["UploadId"], PartNumber=1, Body=b"x" * 1024)
    storage = s3_server.storage()
    assert storage.abort_uploads(f"s3://{s3_bucket}/ou") == 0  # a prefix is whole segments
    assert storage.abort_uploads(f"s3://{s3_bucket}/out") == 2
    assert _unfinished(s3_server, s3_bucket) == ["other/c.mp4"]


def test_without_boto3_the_abort_is_skipped_with_a_warning_naming_the_extra(monkeypatch, caplog):
    """boto3 comes with the [s3] extra: an install without it publishes objects (pyarrow) and
    skips the abort, saying what to install (its absence simulated: an install state)."""
    import builtins

    real_import = builtins.__import__

    def no_boto(name, *args, **kwargs):
        if name.split(".")[0] in ("boto3", "botocore"):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_boto)
    with caplog.at_level("WARNING", logger="fusion_ray.storage.uploads"):
        assert Storage(StorageConfig()).abort_uploads("s3://bucket/out") == 0
    (record,) = [r for r in caplog.records if r.name == "fusion_ray.storage.uploads"]
    message = record.getMessage()
    assert "\n" not in message and "not aborted" in message and "pip install 'fusion-ray[s3]'" in message
