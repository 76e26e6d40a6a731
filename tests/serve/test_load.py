"""The load test's plan without Ray: loopback only; the largest batch between two metric scrapes."""

from __future__ import annotations

import pytest

from fusion_ray.errors import ConfigError


def test_load_plan_is_loopback_only(tmp_path):
    from fusion_ray.serve.load import LoadPlan, _max_batch_between, is_loopback

    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("10.0.0.1") and not is_loopback("example.com")
    image = tmp_path / "x.jpg"
    image.write_bytes(b"x")
    with pytest.raises(ConfigError, match="loopback"):
        LoadPlan(target=image, source=image, host="192.168.1.2").check()
    inf = float("inf")
    assert _max_batch_between({1.0: 2, 2.0: 2, inf: 2}, {1.0: 3, 2.0: 5, 4.0: 5, inf: 5}) == 2.0
    assert _max_batch_between({}, {}) == 0.0
