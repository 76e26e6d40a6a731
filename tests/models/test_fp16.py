"""FP16 copies for CUDA: converted once, inputs and outputs kept float32, checked on load."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto

from fusion_ray.models.fp16 import fp16_copy
from fusion_ray.models.store import LocatedModel
from tests.models.test_quantize import tiny_conv_model


def test_an_fp16_copy_is_made_once_and_remade_when_corrupt(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    source = tiny_conv_model(tmp_path / "tiny.onnx")
    located = LocatedModel("tiny", source, "unverified")
    models = tmp_path / "models"
    copy = fp16_copy(located, models)
    assert copy is not None and copy.parent == models and ".fp16." in copy.name
    graph = onnx.load(str(copy)).graph
    assert {init.data_type for init in graph.initializer} == {TensorProto.FLOAT16}
    assert graph.input[0].type.tensor_type.elem_type == TensorProto.FLOAT  # the wrappers feed float32
    assert graph.output[0].type.tensor_type.elem_type == TensorProto.FLOAT
    mtime = copy.stat().st_mtime_ns
    assert fp16_copy(located, models) == copy and copy.stat().st_mtime_ns == mtime  # cached
    copy.write_bytes(copy.read_bytes()[:-10])
    with caplog.at_level(logging.WARNING, logger="fusion_ray"):
        assert fp16_copy(located, models) == copy
    assert "making it again" in caplog.text
    x = np.random.default_rng(0).random((1, 3, 16, 16), np.float32)
    run = [ort.InferenceSession(str(p), providers=["CPUExecutionProvider"]).run(None, {"input": x})[0]
           for p in (source, copy)]
    assert run[1].dtype == np.float32 and np.abs(run[0] - run[1]).max() < 1e-2


def test_a_model_the_converter_cannot_read_runs_fp32(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a model")
    with caplog.at_level(logging.WARNING, logger="fusion_ray"):
        assert fp16_copy(LocatedModel("bad", bad, "unverified"), tmp_path / "models") is None
    assert "running it at FP32" in caplog.text
    assert not any((tmp_path / "models").glob("*")) if (tmp_path / "models").exists() else True
