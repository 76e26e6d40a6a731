import pytest

from fusion_ray.config import RuntimeConfig
from fusion_ray.errors import ModelError
from fusion_ray.models import session as session_module
from fusion_ray.models.session import create_session, resolve_providers, threads_for_budget


@pytest.mark.parametrize("budget,configured,expected", [
    (None, None, 1), (0.25, None, 1), (1.0, None, 1), (1.5, None, 2), (4, None, 4), (4, 2, 2),
])
def test_threads_follow_the_cpu_budget(budget, configured, expected):
    assert threads_for_budget(budget, RuntimeConfig(intra_op_threads=configured)) == expected


def test_auto_providers_without_gpu(monkeypatch):
    monkeypatch.setattr(session_module, "cuda_device_count", lambda: 0)
    assert resolve_providers(RuntimeConfig()) == ["cpu"]


def test_auto_providers_with_gpu(monkeypatch):
    monkeypatch.setattr(session_module, "cuda_device_count", lambda: 1)
    monkeypatch.setattr(session_module, "tensorrt_available", lambda: False)
    assert resolve_providers(RuntimeConfig()) == ["cuda", "cpu"]
    monkeypatch.setattr(session_module, "tensorrt_available", lambda: True)
    assert resolve_providers(RuntimeConfig()) == ["tensorrt", "cuda", "cpu"]


def test_forced_gpu_without_gpu_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(session_module, "cuda_device_count", lambda: 0)
    with pytest.raises(ModelError, match="no CUDA device"):
        resolve_providers(RuntimeConfig(providers=["cuda"]))


def test_session_uses_the_thread_budget(scrfd_path):
    session, info = create_session(scrfd_path, RuntimeConfig(providers=["cpu"]), cpu_budget=0.5)
    assert info.intra_op_threads == 1
    assert info.providers == ("CPUExecutionProvider",)
    assert session.get_inputs()[0].name == "input.1"


def test_bad_model_file_is_a_model_error(tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not onnx")
    with pytest.raises(ModelError, match="cannot load model"):
        create_session(bad, RuntimeConfig(providers=["cpu"]), cpu_budget=1)


def test_tensorrt_cache_beside_the_model_or_in_the_user_cache(tmp_path, monkeypatch):
    from fusion_ray.models.session import tensorrt_cache_dir

    models = tmp_path / "models"
    models.mkdir()
    assert tensorrt_cache_dir(models / "m.onnx", RuntimeConfig()) == models / "trt_cache"
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    blocked = tmp_path / "file"
    blocked.write_text("not a folder")  # the model's folder cannot hold a cache folder
    assert tensorrt_cache_dir(blocked / "m.onnx", RuntimeConfig()) == tmp_path / "home/.cache/fusion_ray/trt_cache"
    with pytest.raises(ModelError, match="TensorRT engine cache"):
        tensorrt_cache_dir(models / "m.onnx", RuntimeConfig(tensorrt_cache_dir=blocked / "cache"))
