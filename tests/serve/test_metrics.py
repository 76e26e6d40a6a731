"""Metrics without Ray: recorders merged into the store and rendered as Prometheus text."""

from __future__ import annotations

import pytest

from fusion_ray.serve.metrics import (
    MetricsRecorder,
    MetricsStore,
    histogram_max_bucket,
    parse_exposition,
)


def test_metrics_merge_and_exposition():
    store = MetricsStore()
    for sizes in ([1, 3], [8]):
        rec = MetricsRecorder()
        for n in sizes:
            rec.batch("swapper", n, n * 2, 0.004)
        rec.stage("detect", 0.03)
        rec.inc("fusion_ray_requests_total", endpoint="/v1/swap", status="200")
        store.merge(rec.take())
        assert rec.take().empty()
    text = store.render([("fusion_ray_inflight_requests", "help", {"replica": "r1"}, 2.0)])
    samples = parse_exposition(text)
    assert histogram_max_bucket(samples, "fusion_ray_batch_size", deployment="swapper") == 8
    assert histogram_max_bucket(samples, "fusion_ray_batch_faces", deployment="swapper") == 16
    count = [v for lab, v in samples["fusion_ray_stage_seconds_count"] if lab["stage"] == "detect"]
    assert count == [2.0]
    assert samples["fusion_ray_requests_total"] == [({"endpoint": "/v1/swap", "status": "200"}, 2.0)]
    assert samples["fusion_ray_inflight_requests"] == [({"replica": "r1"}, 2.0)]
    assert "# TYPE fusion_ray_batch_size histogram" in text
    assert 'fusion_ray_batch_size_bucket{deployment="swapper",le="+Inf"} 3' in text


def test_a_fused_batch_records_each_steps_busy_time():
    from fusion_ray.serve.downstream import Downstream

    rec = MetricsRecorder()
    downstream = Downstream((None, None, None, None), timeout_s=1.0, retry_headers={}, metrics=rec)
    for _ in range(2):
        downstream.record_batch("fused", {"batch": {"requests": 2, "faces": 3, "compute_s": 0.05},
                                          "steps": {"detect": 0.02, "swap": 0.01, "paste": 0.004}})
    store = MetricsStore()
    store.merge(rec.take())
    text = store.render()
    samples = parse_exposition(text)
    busy = {lab["step"]: v for lab, v in samples["fusion_ray_step_seconds_sum"]}
    assert busy == pytest.approx({"detect": 0.04, "swap": 0.02, "paste": 0.008})
    assert {lab["step"]: v for lab, v in samples["fusion_ray_step_seconds_count"]} == {"detect": 2, "swap": 2,
                                                                                       "paste": 2}
    assert "# TYPE fusion_ray_step_seconds histogram" in text


def test_a_flush_returns_only_once_a_background_flush_has_handed_its_counts_over():
    """/metrics flushes, then renders: when a background flush has already taken the counts and is
    still handing them over, the flush must wait for it (the per-client refusal was once missing
    from /metrics this way)."""
    import asyncio

    from fusion_ray.serve.metrics import MetricsBuffer

    store = MetricsStore()

    async def slow_sink(snap) -> None:  # type: ignore[no-untyped-def]
        await asyncio.sleep(0.2)
        store.merge(snap)

    async def scenario() -> bool:
        buffer = MetricsBuffer(slow_sink, interval_s=0.0)
        buffer.inc("fusion_ray_rejected_total", reason="client_upload_limit")
        buffer.maybe_flush()  # takes the count, hands it over in the background
        await asyncio.sleep(0)
        await buffer.flush()  # what /metrics does before it renders
        return 'reason="client_upload_limit"' in store.render([])

    assert asyncio.run(scenario())
