"""The ONNX graph builder: unique names, shared generated weights, graphs ONNX Runtime runs."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from fusion_ray.models.onnx_graph import Graph, float_value_info


def unknown_shape(name: str) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, None)


def run(graph: Graph, inputs: dict[str, np.ndarray], outputs: list[str]) -> list[np.ndarray]:
    value_infos = [float_value_info(name, list(array.shape)) for name, array in inputs.items()]
    model = helper.make_model(
        helper.make_graph(graph.nodes, "test", value_infos, [unknown_shape(o) for o in outputs],
                          initializer=graph.initializers),
        opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), sess_options=options,
                                   providers=["CPUExecutionProvider"])
    return session.run(outputs, inputs)


def test_names_are_unique_and_prefixed() -> None:
    g = Graph("block")
    a, b = g.f32("gain", 1.0), g.f32("gain", 2.0)
    assert a != b and a.startswith("block/gain_") and b.startswith("block/gain_")
    assert g.op("Relu", [a], out="y") == "y"
    assert [node.name for node in g.nodes] == ["y:node"]
    assert len(g.initializers) == 2


def test_generated_weights_are_shared_per_shape_and_noise_like() -> None:
    g = Graph("w")
    first = g.generated_weight((16, 8, 3, 3))
    assert g.generated_weight((16, 8, 3, 3)) == first
    other = g.generated_weight((8, 8, 1, 1))
    assert other != first
    with pytest.raises(ValueError, match="too large"):
        g.generated_weight((4096, 4096, 1, 1))
    weight, small = run(g, {}, [first, other])
    assert weight.shape == (16, 8, 3, 3) and small.shape == (8, 8, 1, 1)
    # Roughly uniform noise of variance 1.5 / fan_in, different for each shape.
    assert weight.var() == pytest.approx(1.5 / 72, rel=0.2)
    assert abs(float(weight.mean())) < 0.05
    assert not np.allclose(small.ravel(), weight.ravel()[: small.size])


def test_gconv_keeps_the_size_and_bounds_the_output() -> None:
    g = Graph("net")
    y = g.gconv("x", 3, 8, 3, hint="c1")
    z = g.gconv(y, 8, 8, 3, stride=2, act=False, hint="c2")
    up = g.resize(z, 2.0)
    x = np.random.default_rng(0).standard_normal((1, 3, 16, 16)).astype(np.float32)
    y_out, z_out, up_out = run(g, {"x": x}, [y, z, up])
    assert y_out.shape == (1, 8, 16, 16) and np.abs(y_out).max() <= 1.0
    assert z_out.shape == (1, 8, 8, 8) and up_out.shape == (1, 8, 16, 16)
    assert np.abs(z_out).max() > 0
