"""The same storage tests on a local folder and on a bucket of the session's moto S3 server."""

from __future__ import annotations

from pathlib import Path

import pytest

from fusion_ray.storage import Location, Storage


@pytest.fixture(params=["local", "s3"])
def store_root(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[Storage, Location]:
    """(a Storage, an empty folder or bucket it can write)."""
    if request.param == "local":
        return Storage(), Location.parse(tmp_path / "root")
    bucket = request.getfixturevalue("s3_bucket")
    return request.getfixturevalue("s3_server").storage(), Location.parse(f"s3://{bucket}")
