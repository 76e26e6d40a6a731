"""ONNX facts: FLOP counts of a known graph, metadata read without loading the graph."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from fusion_ray.errors import ModelError
from fusion_ray.models.onnx_info import graph_gflops, read_model_metadata


def relu_model() -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    return helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y]))


def test_graph_gflops_counts_a_known_graph() -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 16, 16])
    v = helper.make_tensor_value_info("v", TensorProto.FLOAT, ["N", 10])
    out1 = helper.make_tensor_value_info("c", TensorProto.FLOAT, None)
    out2 = helper.make_tensor_value_info("m", TensorProto.FLOAT, None)
    out3 = helper.make_tensor_value_info("g", TensorProto.FLOAT, None)
    inits = [numpy_helper.from_array(np.zeros(shape, np.float32), name)
             for name, shape in [("w", (8, 3, 3, 3)), ("b", (10, 4)), ("a", (2, 5)), ("k", (5, 3)),
                                 ("big", (64, 64))]]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),     # 16*16*8*27 MACs
             helper.make_node("MatMul", ["v", "b"], ["m"]),                     # 10*4 per row
             helper.make_node("Gemm", ["a", "k"], ["g0"]),                      # constant: folded
             helper.make_node("MatMul", ["big", "big"], ["g1"]),                # constant: folded
             helper.make_node("Gemm", ["g0", "k"], ["g"], transB=1)]            # constant too
    model = helper.make_model(helper.make_graph(nodes, "g", [x, v], [out1, out2, out3], inits))
    assert graph_gflops(model) == pytest.approx(2 * (16 * 16 * 8 * 27 + 40) / 1e9)


def test_metadata_is_read_from_the_file(tmp_path: Path) -> None:
    model = relu_model()
    path = tmp_path / "plain.onnx"
    onnx.save(model, str(path))
    assert read_model_metadata(path) == {}
    helper.set_model_props(model, {"author": "someone", "fusion_ray.x": "1"})
    onnx.save(model, str(path))
    assert read_model_metadata(path) == {"author": "someone", "fusion_ray.x": "1"}


def test_unreadable_files_raise_model_error(tmp_path: Path) -> None:
    model = relu_model()
    helper.set_model_props(model, {"author": "someone"})
    data = model.SerializeToString()
    truncated = tmp_path / "truncated.onnx"
    truncated.write_bytes(data[: len(data) // 2])
    with pytest.raises(ModelError, match="not a readable ONNX model"):
        read_model_metadata(truncated)
    no_graph = tmp_path / "no_graph.onnx"
    no_graph.write_bytes(onnx.ModelProto(ir_version=8, metadata_props=model.metadata_props).SerializeToString())
    with pytest.raises(ModelError, match="no graph"):
        read_model_metadata(no_graph)
    with pytest.raises(ModelError, match="cannot read"):
        read_model_metadata(tmp_path / "missing.onnx")
