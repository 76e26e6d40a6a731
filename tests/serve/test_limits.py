"""The ingress' limits without Ray: the Content-Length check, the in-flight and upload limiters."""

from __future__ import annotations

import pytest

from fusion_ray.serve.limits import (
    ApiError,
    InflightLimiter,
    Overloaded,
    Refused,
    UploadLimiter,
    check_content_length,
)


def test_content_length_checks():
    assert check_content_length(None, 10) is None
    assert check_content_length("10", 10) == 10
    with pytest.raises(ApiError) as err:
        check_content_length("11", 10)
    assert err.value.status == 413
    with pytest.raises(ApiError) as err:
        check_content_length("-1", 10)
    assert err.value.status == 400


def test_inflight_limiter_refuses_and_releases():
    limiter = InflightLimiter(2, retry_after_s=3)
    with limiter.slot(), limiter.slot():
        assert limiter.inflight == 2
        with pytest.raises(Overloaded) as err, limiter.slot():
            pass
        assert err.value.status == 503 and err.value.headers == {"Retry-After": "3"}
    assert limiter.inflight == 0
    with pytest.raises(RuntimeError), limiter.slot():
        raise RuntimeError("boom")
    assert limiter.inflight == 0 and limiter.peak == 2


def test_upload_limiter_bounds_all_uploads_and_each_client():
    uploads = UploadLimiter(3, per_client=2, retry_after_s=4)
    with uploads.slot("10.0.0.1"), uploads.slot("10.0.0.1"):
        with pytest.raises(Refused) as err, uploads.slot("10.0.0.1"):
            pass
        assert err.value.status == 503 and err.value.headers == {"Retry-After": "4"}
        assert err.value.reason == "client_upload_limit" and "address" in err.value.detail
        with uploads.slot("10.0.0.2"):
            with pytest.raises(Refused) as err, uploads.slot("10.0.0.3"):
                pass
            assert err.value.reason == "upload_limit" and "limit of 3 uploads" in err.value.detail
    assert uploads.active == 0 and uploads.by_client == {}
    with pytest.raises(RuntimeError), uploads.slot("10.0.0.1"):
        raise RuntimeError("boom")
    assert uploads.active == 0
    assert isinstance(Overloaded(1, 1), Refused) and Overloaded(1, 1).reason == "inflight_limit"
