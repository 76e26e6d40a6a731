"""Readiness: without the token it names no model path and no error."""

from __future__ import annotations

import asyncio


def test_readiness_without_the_token_names_no_paths_or_errors():
    from fusion_ray.runners.inline import ModelInfo
    from fusion_ray.serve.ops import readiness

    info = {"scrfd_2.5g": ModelInfo(name="scrfd_2.5g", path="/srv/models/scrfd.onnx", status="loaded",
                                    providers=("CPUExecutionProvider",), stand_in=False)}

    async def loaded():
        return info

    async def broken():
        raise RuntimeError("/srv/models/secret.onnx: bad")

    probes = {"Detector": loaded, "Swapper": broken}
    public = asyncio.run(readiness(probes, detailed=False))
    assert public.status == "not_ready" and public.deployments == {"Detector": "ready", "Swapper": "failed"}
    assert public.models == {"scrfd_2.5g": "loaded"} and "/srv" not in public.model_dump_json()
    detailed = asyncio.run(readiness(probes, detailed=True))
    assert detailed.models == {"scrfd_2.5g": "/srv/models/scrfd.onnx"}
    assert detailed.deployments["Swapper"] == "failed (RuntimeError)"
