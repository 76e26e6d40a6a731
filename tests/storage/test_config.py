"""StorageConfig from the standard AWS environment, and the filesystems it builds."""

from __future__ import annotations

import pickle

import pyarrow.fs as pafs
import pytest

from fusion_ray.errors import ConfigError
from fusion_ray.storage import Location, Storage, StorageConfig, make_filesystem
from fusion_ray.storage.config import make_s3, split_endpoint


def test_from_env_reads_the_standard_aws_variables() -> None:
    cfg = StorageConfig.from_env({
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9000", "AWS_ACCESS_KEY_ID": "AK",
        "AWS_SECRET_ACCESS_KEY": "SECRET", "AWS_REGION": "eu-west-1", "AWS_SESSION_TOKEN": "TOK",
    })
    s3 = cfg.s3
    assert (s3.endpoint_url, s3.access_key_id, s3.region) == ("http://127.0.0.1:9000", "AK", "eu-west-1")
    assert s3.secret_access_key is not None and s3.secret_access_key.get_secret_value() == "SECRET"
    assert s3.session_token is not None and s3.session_token.get_secret_value() == "TOK"
    assert "SECRET" not in repr(cfg) and "TOK" not in repr(cfg)


def test_from_env_precedence_and_empty_values() -> None:
    cfg = StorageConfig.from_env({"AWS_ENDPOINT_URL_S3": "https://s3.example:443", "AWS_ENDPOINT_URL": "http://x:1",
                                  "AWS_DEFAULT_REGION": "ap-south-1", "AWS_ACCESS_KEY_ID": " "})
    assert cfg.s3.endpoint_url == "https://s3.example:443"
    assert cfg.s3.region == "ap-south-1"
    assert cfg.s3.access_key_id is None and cfg.s3.secret_access_key is None
    assert StorageConfig.from_env({}) == StorageConfig()
    assert StorageConfig.from_env({"STORAGE_EMULATOR_HOST": "127.0.0.1:4443"}).gcs.endpoint_url == "http://127.0.0.1:4443"


@pytest.mark.parametrize(("env", "says"), [
    ({"AWS_ACCESS_KEY_ID": "AK"}, "set both access_key_id and secret_access_key"),
    ({"AWS_SECRET_ACCESS_KEY": "S"}, "set both"),
    ({"AWS_ENDPOINT_URL": "127.0.0.1:9000"}, "is not an http(s)://host[:port] URL"),
    ({"AWS_ENDPOINT_URL": "http://host:1/path"}, "is not an http(s)://host[:port] URL"),
])
def test_from_env_refuses_contradictions(env: dict[str, str], says: str) -> None:
    with pytest.raises(ConfigError, match="AWS environment") as caught:
        StorageConfig.from_env(env)
    assert says in str(caught.value) and "\n" not in str(caught.value)


def test_split_endpoint() -> None:
    assert split_endpoint("http://127.0.0.1:5000") == ("http", "127.0.0.1:5000")
    assert split_endpoint("https://minio.local/") == ("https", "minio.local")


def test_s3_filesystem_gets_the_endpoint_explicitly() -> None:
    """pyarrow ignores AWS_ENDPOINT_URL (apache/arrow issue 49643): the config passes it."""
    cfg = StorageConfig.from_env({"AWS_ENDPOINT_URL": "http://127.0.0.1:1", "AWS_ACCESS_KEY_ID": "a",
                                  "AWS_SECRET_ACCESS_KEY": "b"})
    fs = make_s3(cfg.s3)
    assert isinstance(fs, pafs.S3FileSystem)
    assert fs.region == "us-east-1"
    # The endpoint survives a round trip through pickle, as a Ray task receives it.
    assert pickle.loads(pickle.dumps(fs)).equals(fs)
    assert not fs.equals(make_s3(StorageConfig().s3))


def test_every_scheme_builds_its_filesystem() -> None:
    cfg = StorageConfig()
    assert isinstance(make_filesystem("file", cfg), pafs.LocalFileSystem)
    assert isinstance(make_filesystem("s3", cfg), pafs.S3FileSystem)
    gcs = make_filesystem("gs", StorageConfig.from_env({"STORAGE_EMULATOR_HOST": "127.0.0.1:4443"}))
    assert isinstance(gcs, pafs.GcsFileSystem)
    with pytest.raises(ConfigError, match="hdfs"):
        make_filesystem("hdfs", cfg)


def test_storage_caches_filesystems_and_pickles_as_its_config() -> None:
    cfg = StorageConfig.from_env({"AWS_ENDPOINT_URL": "http://127.0.0.1:1"})
    storage = Storage(cfg)
    s3 = storage.filesystem(Location.parse("s3://bkt/a"))
    assert storage.filesystem(Location.parse("s3://other/b")) is s3
    assert storage.filesystem(Location.parse("/tmp/x")) is not s3
    copy = pickle.loads(pickle.dumps(storage))
    assert copy.config == cfg and copy._filesystems == {}
