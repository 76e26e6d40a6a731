"""Engine configuration as seen from Ray actors."""

from fusion_ray.config import EngineConfig, RuntimeConfig


def test_an_actor_without_a_gpu_runs_on_cpu_and_one_with_a_gpu_sees_it_as_device_0():
    cfg = EngineConfig(runtime=RuntimeConfig(providers=["cuda"], device_id=1))
    assert cfg.in_ray_actor(gets_gpu=False).runtime.providers == ["cpu"]
    on_gpu = cfg.in_ray_actor(gets_gpu=True).runtime
    assert (on_gpu.providers, on_gpu.device_id) == (["cuda"], 0)
    assert cfg.runtime.device_id == 1  # the original is unchanged
    cpu = EngineConfig(runtime=RuntimeConfig(providers=["cpu"]))
    assert cpu.in_ray_actor(gets_gpu=False) is cpu
