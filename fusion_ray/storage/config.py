"""Storage settings, read once at the edge (``StorageConfig.from_env(os.environ)``) and passed
down; ``make_filesystem`` turns them into the pyarrow filesystem of one scheme.

S3 follows the standard AWS variables: ``AWS_ENDPOINT_URL_S3`` or ``AWS_ENDPOINT_URL``,
``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``, ``AWS_REGION`` or
``AWS_DEFAULT_REGION``. ``pyarrow.fs.S3FileSystem`` reads the keys itself but ignores the
endpoint variables (apache/arrow issue 49643), so the endpoint is passed explicitly. Without
keys in the config each node uses the AWS SDK's default chain (its environment, its config
files, an instance or pod role), so a cluster can run without shipping secrets. GCS uses
Google's default credentials; ``STORAGE_EMULATOR_HOST`` points it at an emulator.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from urllib.parse import urlsplit

import pyarrow.fs as pafs
from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator

from fusion_ray.errors import ConfigError

DEFAULT_REGION = "us-east-1"


class _Config(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class S3Settings(_Config):
    """How to reach S3 or an S3-compatible store (MinIO, Ceph, moto)."""

    endpoint_url: str | None = Field(
        default=None, description="e.g. http://127.0.0.1:9000; None: AWS's own endpoints.")
    region: str | None = Field(default=None, description="None: us-east-1 with an endpoint, else the SDK's choice.")
    access_key_id: str | None = None
    secret_access_key: SecretStr | None = None
    session_token: SecretStr | None = None
    anonymous: bool = Field(default=False, description="Unsigned requests (public buckets).")
    connect_timeout_s: float | None = Field(default=None, gt=0)
    request_timeout_s: float | None = Field(default=None, gt=0)
    max_attempts: int = Field(default=3, ge=1, description="Attempts per request (the SDK's standard retries).")

    @model_validator(mode="after")
    def _keys_in_pairs(self) -> S3Settings:
        if (self.access_key_id is None) != (self.secret_access_key is None):
            raise ValueError("set both access_key_id and secret_access_key, or neither")
        if self.endpoint_url is not None:
            split_endpoint(self.endpoint_url)
        return self


class GcsSettings(_Config):
    """How to reach Google Cloud Storage (or its emulator)."""

    endpoint_url: str | None = Field(default=None, description="e.g. http://127.0.0.1:4443 (an emulator).")
    anonymous: bool = False
    project_id: str | None = None


class StorageConfig(_Config):
    """Settings of every filesystem a job may touch; local paths need none."""

    s3: S3Settings = S3Settings()
    gcs: GcsSettings = GcsSettings()
    read_ahead_bytes: int = Field(
        default=1 << 20, ge=4096,
        description="Buffer of a file opened for reading in a bucket: each refill is one ranged GET.")

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> StorageConfig:
        """Settings from the standard AWS (and GCS emulator) variables in ``env``.

        ConfigError when they contradict each other (a key id without its secret, an
        endpoint that is not a URL).
        """
        def get(*names: str) -> str | None:
            for name in names:
                value = env.get(name, "").strip()
                if value:
                    return value
            return None

        secret, token = get("AWS_SECRET_ACCESS_KEY"), get("AWS_SESSION_TOKEN")
        try:
            s3 = S3Settings(
                endpoint_url=get("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"),
                region=get("AWS_REGION", "AWS_DEFAULT_REGION"),
                access_key_id=get("AWS_ACCESS_KEY_ID"),
                secret_access_key=SecretStr(secret) if secret else None,
                session_token=SecretStr(token) if token else None,
            )
        except ValueError as exc:
            raise ConfigError(f"AWS environment: {_first_error(exc)}") from exc
        emulator = get("STORAGE_EMULATOR_HOST")
        gcs = GcsSettings(endpoint_url=emulator if emulator is None or "://" in emulator else f"http://{emulator}")
        return cls(s3=s3, gcs=gcs)


def _first_error(exc: ValueError) -> str:
    errors = getattr(exc, "errors", None)
    if callable(errors):
        found = errors()
        if found:
            return str(found[0].get("msg", exc)).removeprefix("Value error, ")
    return str(exc)


def split_endpoint(url: str) -> tuple[str, str]:
    """(scheme, host[:port]) of an endpoint URL; ValueError unless http(s)://host[:port][/]."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc or parts.path not in ("", "/") \
            or parts.query or parts.fragment:
        raise ValueError(f"endpoint {url!r} is not an http(s)://host[:port] URL")
    return parts.scheme, parts.netloc


def make_s3(settings: S3Settings) -> pafs.S3FileSystem:
    """The S3 filesystem for ``settings`` (the endpoint passed explicitly, see the module doc)."""
    kwargs: dict[str, object] = {
        "anonymous": settings.anonymous,
        "retry_strategy": pafs.AwsStandardS3RetryStrategy(max_attempts=settings.max_attempts),
    }
    region = settings.region
    if settings.endpoint_url is not None:
        kwargs["scheme"], kwargs["endpoint_override"] = split_endpoint(settings.endpoint_url)
        region = region or DEFAULT_REGION
    if region is not None:
        kwargs["region"] = region
    if settings.access_key_id is not None and settings.secret_access_key is not None:
        kwargs["access_key"] = settings.access_key_id
        kwargs["secret_key"] = settings.secret_access_key.get_secret_value()
        if settings.session_token is not None:
            kwargs["session_token"] = settings.session_token.get_secret_value()
    if settings.connect_timeout_s is not None:
        kwargs["connect_timeout"] = settings.connect_timeout_s
    if settings.request_timeout_s is not None:
        kwargs["request_timeout"] = settings.request_timeout_s
    return pafs.S3FileSystem(**kwargs)


def make_gcs(settings: GcsSettings) -> pafs.FileSystem:
    """The GCS filesystem for ``settings``."""
    kwargs: dict[str, object] = {"anonymous": settings.anonymous}
    if settings.endpoint_url is not None:
        kwargs["scheme"], kwargs["endpoint_override"] = split_endpoint(settings.endpoint_url)
    if settings.project_id is not None:
        kwargs["project_id"] = settings.project_id
    return pafs.GcsFileSystem(**kwargs)


@functools.lru_cache(maxsize=32)
def make_filesystem(scheme: str, config: StorageConfig) -> pafs.FileSystem:
    """The filesystem of ``scheme`` ('file', 's3' or 'gs'): one per scheme and settings in a
    process (a ``Storage`` is rebuilt from its config in every task; an S3 client is costly)."""
    if scheme == "file":
        return pafs.LocalFileSystem()
    if scheme == "s3":
        return make_s3(config.s3)
    if scheme == "gs":
        return make_gcs(config.gcs)
    raise ConfigError(f"no filesystem for scheme {scheme!r}")
