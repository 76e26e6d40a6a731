"""make_batch_dynamic: batched outputs equal looped ones, or the model is rejected."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from fusion_ray.errors import ModelError
from fusion_ray.models.dynamic import METADATA_KEY, make_batch_dynamic
from fusion_ray.models.onnx_info import read_model_metadata
from fusion_ray.models.standins import build_standin, read_stand_in_label


def session(path: Path) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    return ort.InferenceSession(str(path), sess_options=options, providers=["CPUExecutionProvider"])


def looped(path: Path, feeds: dict[str, np.ndarray]) -> np.ndarray:
    """Run a batch-1 model once per row and stack the outputs."""
    sess = session(path)
    n = len(next(iter(feeds.values())))
    return np.concatenate([sess.run(None, {k: v[i:i + 1] for k, v in feeds.items()})[0] for i in range(n)])


def tiny_model(path: Path, nodes: list[onnx.NodeProto], inits: list[onnx.TensorProto],
               in_shape: list[int | str], out_shape: list[int | str] | None) -> Path:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, in_shape)
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)
    model = helper.make_model(helper.make_graph(nodes, "tiny", [x], [y], inits),
                              opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def test_inswapper_becomes_batched(tmp_path: Path) -> None:
    src = build_standin("inswapper_128", tmp_path / "inswapper_128.onnx")
    dst = tmp_path / "out" / "inswapper_128_dynamic.onnx"
    report = make_batch_dynamic(src, dst)
    assert report.dst == dst and dst.is_file() and not report.already_dynamic
    assert report.inputs == {"target": ("batch", 3, 128, 128), "source": ("batch", 512)}
    assert report.outputs == {"output": ("batch", 3, 128, 128)}
    assert report.check_batch == 4 and report.max_abs_diff <= 1e-4
    assert [p.name for p in dst.parent.iterdir()] == [dst.name]  # no temp file left

    rng = np.random.default_rng(11)
    latents = rng.standard_normal((3, 512)).astype(np.float32)
    feeds = {"target": rng.uniform(0, 1, (3, 3, 128, 128)).astype(np.float32),
             "source": latents / np.linalg.norm(latents, axis=1, keepdims=True)}
    batched = session(dst).run(None, feeds)[0]
    assert batched.shape == (3, 3, 128, 128)
    np.testing.assert_allclose(batched, looped(src, feeds), atol=1e-5)
    assert [i.shape[0] for i in session(dst).get_inputs()] == ["batch", "batch"]

    before, after = onnx.load(str(src)).graph.initializer, onnx.load(str(dst)).graph.initializer
    assert [i.name for i in after] == [i.name for i in before]
    assert after[-1].name == "emap" and list(after[-1].dims) == [512, 512]
    np.testing.assert_array_equal(numpy_helper.to_array(after[-1]), numpy_helper.to_array(before[-1]))
    assert read_stand_in_label(dst) is not None  # still labelled a stand-in
    assert read_model_metadata(dst)[METADATA_KEY] == "true"


def test_gfpgan_becomes_batched(tmp_path: Path) -> None:
    src = build_standin("gfpgan_1.4", tmp_path / "gfpgan_1.4.onnx")
    dst = tmp_path / "gfpgan_1.4_dynamic.onnx"
    report = make_batch_dynamic(src, dst, check_batch=2)
    assert report.inputs == {"input": ("batch", 3, 512, 512)} and report.max_abs_diff <= 1e-4
    feeds = {"input": np.random.default_rng(12).uniform(-1, 1, (2, 3, 512, 512)).astype(np.float32)}
    np.testing.assert_allclose(session(dst).run(None, feeds)[0], looped(src, feeds), atol=1e-5)


def test_already_dynamic_model_is_reported_not_copied(tmp_path: Path) -> None:
    src = build_standin("arcface_w600k_r50", tmp_path / "arcface.onnx")
    dst = tmp_path / "arcface_dynamic.onnx"
    report = make_batch_dynamic(src, dst)
    assert report.already_dynamic and report.dst is None and not dst.exists()
    assert report.inputs == {"input.1": ("N", 3, 112, 112)}


def test_reshape_to_batch_one_is_rejected(tmp_path: Path) -> None:
    # Flattens with Reshape [1, -1]: at batch 4 the MatMul sees 4x the features and fails.
    src = tiny_model(tmp_path / "reshape.onnx",
                     [helper.make_node("Reshape", ["x", "shape"], ["flat"]),
                      helper.make_node("MatMul", ["flat", "w"], ["y"])],
                     [numpy_helper.from_array(np.array([1, -1], np.int64), "shape"),
                      numpy_helper.from_array(np.ones((48, 8), np.float32), "w")],
                     [1, 3, 4, 4], [1, 8])
    dst = tmp_path / "out" / "reshape_dynamic.onnx"
    with pytest.raises(ModelError, match="bakes the batch size in"):
        make_batch_dynamic(src, dst)
    assert not dst.exists() and list(dst.parent.iterdir()) == []


def test_batch_mixing_reduction_is_rejected(tmp_path: Path) -> None:
    # y = 2x - mean over the batch axis: equals x at batch 1, silently wrong when batched.
    src = tiny_model(tmp_path / "mix.onnx",
                     [helper.make_node("ReduceMean", ["x"], ["m"], axes=[0], keepdims=1),
                      helper.make_node("Add", ["x", "x"], ["x2"]),
                      helper.make_node("Sub", ["x2", "m"], ["y"])],
                     [], [1, 6], [1, 6])
    dst = tmp_path / "mix_dynamic.onnx"
    with pytest.raises(ModelError, match="differs by up to"):
        make_batch_dynamic(src, dst)
    assert not dst.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mix.onnx"]


def test_symbolic_non_batch_dims_need_input_shapes(tmp_path: Path) -> None:
    src = tiny_model(tmp_path / "conv.onnx",
                     [helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])],
                     [numpy_helper.from_array(np.full((2, 3, 3, 3), 0.1, np.float32), "w")],
                     [1, 3, "H", "W"], [1, 2, "H", "W"])
    with pytest.raises(ModelError, match="input_shapes"):
        make_batch_dynamic(src, tmp_path / "a.onnx")
    report = make_batch_dynamic(src, tmp_path / "b.onnx", input_shapes={"x": (3, 8, 10)})
    assert report.inputs == {"x": ("batch", 3, "H", "W")} and report.max_abs_diff <= 1e-4


def test_bad_arguments(tmp_path: Path) -> None:
    src = build_standin("gfpgan_1.4", tmp_path / "g.onnx")
    with pytest.raises(ModelError, match="in place"):
        make_batch_dynamic(src, src)
    with pytest.raises(ValueError, match="check_batch"):
        make_batch_dynamic(src, tmp_path / "x.onnx", check_batch=1)
    garbage = tmp_path / "garbage.onnx"
    garbage.write_bytes(b"\xff\xff not onnx")
    with pytest.raises(ModelError, match="cannot read"):
        make_batch_dynamic(garbage, tmp_path / "y.onnx")
    assert not (tmp_path / "x.onnx").exists() and not (tmp_path / "y.onnx").exists()
