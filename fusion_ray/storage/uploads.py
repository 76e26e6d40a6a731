"""Unfinished multipart uploads: found and aborted (botocore; pyarrow has no call for them).

pyarrow uploads a large object in parts. When the store stalls in the middle, the upload
fails but its parts stay in the bucket, invisible and billed, until they are aborted (the
abort pyarrow tries goes to the same stalled store). :func:`abort_uploads` aborts those of
one key, or of every key under a prefix (``fusion-ray job --clean-parts``).

boto3 comes with the ``[s3]`` extra (pyarrow alone reads and writes objects): without it the
abort is skipped with a one-line warning that names the extra.
"""

from __future__ import annotations

import logging
from typing import Any

from fusion_ray.storage.config import DEFAULT_REGION, S3Settings

log = logging.getLogger(__name__)

ABORT_TIMEOUT_S = 5.0
"""Connect and read timeout of each listing and abort request (one attempt each)."""
MISSING_BOTO3 = ("unfinished multipart uploads under s3://{bucket}/{key} not aborted: boto3 is not installed "
                 "(pip install 'fusion-ray[s3]'); they may remain in the bucket")


def _client(settings: S3Settings) -> Any:
    """A botocore S3 client of ``settings``; None when boto3 is not installed."""
    try:
        import boto3
        from botocore import UNSIGNED
        from botocore.config import Config
    except ImportError:
        return None

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
    how many. botocore's errors (a store still unreachable) are raised. Without boto3 (the
    ``[s3]`` extra) none is aborted: a warning says so and names the extra."""
    client = _client(settings)
    if client is None:
        log.warning(MISSING_BOTO3.format(bucket=bucket, key=key))
        return 0
    aborted = 0
    pages = client.get_paginator("list_multipart_uploads").paginate(Bucket=bucket, Prefix=key)
    for page in pages:
        for upload in page.get("Uploads", []):
            if prefix or upload["Key"] == key:
                client.abort_multipart_upload(Bucket=bucket, Key=upload["Key"], UploadId=upload["UploadId"])
                aborted += 1
    return aborted
