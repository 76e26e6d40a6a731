"""The ingress core without Ray: the errors of the deployments it calls mapped to 503, 504 and
500, its body reads bounded in time, the models' precision in its metrics."""

from __future__ import annotations

import asyncio

import cv2
import pytest

from fusion_ray.serve.limits import ApiError
from fusion_ray.serve.metrics import (
    MetricsStore,
    parse_exposition,
)
from fusion_ray.serve.settings import parse_settings
from tests.serve.helpers import ingress_core


def test_backpressure_and_timeouts_map_to_503_and_504():
    from ray.serve.exceptions import BackPressureError

    from fusion_ray.serve.app import IngressCore

    threads = cv2.getNumThreads()
    core = IngressCore(parse_settings({"limits": {"retry_after_s": 7, "stage_timeout_s": 0.05},
                                       "auth": {"token_env": None}}), None, None, None, None)
    cv2.setNumThreads(threads)  # the ingress sizes OpenCV's pool for its replica; not for this process

    async def full():
        raise BackPressureError(num_queued_requests=4, max_queued_requests=4)

    async def slow():
        await asyncio.sleep(5)

    with pytest.raises(ApiError) as err:
        asyncio.run(core.call("swap", full))
    assert err.value.status == 503 and err.value.headers == {"Retry-After": "7"}
    with pytest.raises(ApiError) as err:
        asyncio.run(core.call("swap", slow))
    assert err.value.status == 504 and "swap" in err.value.detail
    samples = parse_exposition(_render(core))
    assert ({"reason": "swap_queue_full"}, 1.0) in samples["fusion_ray_rejected_total"]


def _raising(exc: BaseException):
    async def fail():
        raise exc
    return fail


def test_lost_replicas_are_503_and_failed_stages_500_without_the_remote_traceback():
    from ray.exceptions import ActorDiedError, ActorUnavailableError, RayActorError, RayTaskError

    core = ingress_core(retry_after_s=7)
    for lost in (RayActorError(), ActorUnavailableError("the actor is restarting", None), ActorDiedError()):
        with pytest.raises(ApiError) as err:
            asyncio.run(core.call("detect", _raising(lost)))
        assert err.value.status == 503 and err.value.headers == {"Retry-After": "7"}, lost
    failed = RayTaskError("detect", "Traceback: /srv/secret.py line 3", ValueError("boom")).as_instanceof_cause()
    with pytest.raises(ApiError) as err:
        asyncio.run(core.call("detect", _raising(failed)))
    assert err.value.status == 500 and err.value.body() == {"error": "stage_failed",
                                                            "detail": "the detect stage failed"}


def test_the_ingress_reads_bodies_within_receive_timeout():
    class StalledRequest:
        headers = {"content-type": "multipart/form-data; boundary=b"}
        client = None

        async def stream(self):
            yield b"--b\r\n"
            await asyncio.Event().wait()
            yield b""

    core = ingress_core(receive_timeout_s=0.05)
    with pytest.raises(ApiError) as err:
        asyncio.run(core.read_form(StalledRequest()))
    assert err.value.status == 408


def test_metrics_say_which_precision_each_model_runs_at():
    from fusion_ray.runners.inline import ModelInfo

    core = ingress_core()
    info = {"scrfd_2.5g": ModelInfo("scrfd_2.5g", "/m/scrfd.onnx", "verified", ("CPUExecutionProvider",), False, "int8"),
            "inswapper_128": ModelInfo("inswapper_128", "/m/i.onnx", "verified", (), False, "fp32")}

    async def model_info(t):
        return info

    async def render_metrics(t, gauges):
        return MetricsStore().render(gauges)

    core.downstream.model_info = model_info
    core.downstream.render_metrics = render_metrics
    text = asyncio.run(core.metrics_text())
    assert 'fusion_ray_model_precision{model="scrfd_2.5g",precision="int8"} 1' in text
    assert 'fusion_ray_model_precision{model="inswapper_128",precision="fp32"} 1' in text


def _render(core) -> str:
    store = MetricsStore()
    store.merge(core.metrics.take())
    return store.render()
