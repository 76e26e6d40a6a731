"""Access to the ops endpoints: metrics public only on loopback unless configured, the bearer token."""

from __future__ import annotations

import pytest

from fusion_ray.serve.limits import ApiError


def test_metrics_are_public_only_on_loopback_unless_configured():
    from fusion_ray.serve.auth import BearerAuth, metrics_public

    for host in ("127.0.0.1", "::1", "localhost", "127.0.0.2", "[::1]"):
        assert metrics_public(None, host), host
    for host in ("0.0.0.0", "10.1.2.3", "example.com", "", None):
        assert not metrics_public(None, host), host
    assert metrics_public(True, "10.1.2.3") and not metrics_public(False, "127.0.0.1")
    auth = BearerAuth("s3cret")
    assert auth.valid("s3cret") and not auth.valid("s3cre") and not auth.valid(None) and not auth.valid("")
    with pytest.raises(ApiError) as err:
        auth.check("nope")
    assert err.value.status == 401 and err.value.headers == {"WWW-Authenticate": "Bearer"}
    assert BearerAuth(None).valid(None)
