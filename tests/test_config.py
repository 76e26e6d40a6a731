"""Engine configuration as seen from Ray actors."""

import pytest

from fusion_ray.config import EngineConfig, RuntimeConfig, parse_config
from fusion_ray.errors import ConfigError


def test_an_actor_without_a_gpu_runs_on_cpu_and_one_with_a_gpu_sees_it_as_device_0():
    cfg = EngineConfig(runtime=RuntimeConfig(providers=["cuda"], device_id=1))
    assert cfg.in_ray_actor(gets_gpu=False).runtime.providers == ["cpu"]
    on_gpu = cfg.in_ray_actor(gets_gpu=True).runtime
    assert (on_gpu.providers, on_gpu.device_id) == (["cuda"], 0)
    assert cfg.runtime.device_id == 1  # the original is unchanged
    cpu = EngineConfig(runtime=RuntimeConfig(providers=["cpu"]))
    assert cpu.in_ray_actor(gets_gpu=False) is cpu


@pytest.mark.parametrize("size", [0, 32, 4128, 320000])
def test_detector_size_out_of_range_is_refused(size):
    """0 is refused (never the default), 320000 too (its canvas alone would be 1.2 TB)."""
    with pytest.raises(ConfigError, match="detector.size"):
        parse_config({"detector": {"size": size}}, EngineConfig)
