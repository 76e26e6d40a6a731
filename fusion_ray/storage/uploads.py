"""Unfinished multipart uploads: found and aborted (botocore; pyarrow has no call for them).

pyarrow uploads a large object in parts. When the store stalls in the middle, the upload
fails but its parts stay in the bucket, invisible and billed, until they are aborted (the
abort pyarrow tries goes to the same stalled store). :func:`abort_uploads` aborts those of
one key, or of every key under a prefix (``fusion-ray job --clean-parts``).
"""

from __future__ import annotations

from typing import Any

from fusion_ray.storage.config import DEFAULT_REGION, S3Settings

ABORT_TIMEOUT_S = 5.0
"""Connect and read timeout of each listing and abort request (one attempt each)."""


def _client(settings: S3Settings) -> Any:
    import boto3
    from botocore import UNSIGNED
    from botocore.config import Config

    options: dict[str, Any] = {"connect_timeout": ABORT_TIMEOUT_S, "read_timeout": ABORT_TIMEOUT_S,
                               "retries": {"max_attempts": 1, "mode": "standard"}}
    if settings.anonymous:
        options["signature_version"] = UNSIGNED
    secret, token = settings.secret_access_key, settings.session_token
    return boto3.session.Session().client(
        "s3", endpoint_url=settings.endpoint_url,
        region_name=settings.region or (DEFAULT_REGION if settings.endpoint_url else None),
        aws_access_key_id=settings.access_key_id,
        aws_secret_access_key=secret.get_secret_value() if secret is not None else None,
        aws_session_token=token.get_secret_value() if token is not None else None, config=Config(**options))


def abort_uploads(settings: S3Settings, bucket: str, key: str, *, prefix: bool = False) -> int:
    """Abort the unfinished uploads of ``key`` (or, with ``prefix``, of every key under it);
    how many. botocore's errors (a store still unreachable) are raised."""
    client = _client(settings)
    aborted = 0
    pages = client.get_paginator("list_multipart_uploads").paginate(Bucket=bucket, Prefix=key)
    for page in pages:
        for upload in page.get("Uploads", []):
            if prefix or upload["Key"] == key:
                client.abort_multipart_upload(Bucket=bucket, Key=upload["Key"], UploadId=upload["UploadId"])
                aborted += 1
    return aborted
