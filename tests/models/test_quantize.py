"""The INT8 cache: built once, named by both hashes, checked on load, never half-written."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from fusion_ray.models import quantize
from fusion_ray.models.quantize import Int8Key, build_cached, check_cached, find_cached, record_of

KEY = Int8Key("a" * 64, "b" * 64)


def tiny_conv_model(path: Path, *, custom_op: bool = False) -> Path:
    """A two-conv opset-11 model with a dynamic canvas (and, with ``custom_op``, an op in a domain
    ONNX Runtime does not know, so it cannot be calibrated)."""
    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array(rng.normal(0, 0.3, (4, 3, 3, 3)).astype(np.float32), "w1")
    w2 = numpy_helper.from_array(rng.normal(0, 0.3, (2, 4, 1, 1)).astype(np.float32), "w2")
    nodes = [helper.make_node("Conv", ["input", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "w2"], ["out"], name="head")]
    opsets = [helper.make_opsetid("", 11)]
    if custom_op:
        nodes.append(helper.make_node("Mystery", ["out"], ["extra"], name="mystery", domain="no.such.domain"))
        opsets.append(helper.make_opsetid("no.such.domain", 1))
    outputs = [helper.make_tensor_value_info("extra" if custom_op else "out", TensorProto.FLOAT, None)]
    graph = helper.make_graph(nodes, "tiny", [helper.make_tensor_value_info("input", TensorProto.FLOAT,
                                                                           [1, 3, "h", "w"])],
                              outputs, initializer=[w1, w2])
    onnx.save(helper.make_model(graph, opset_imports=opsets, ir_version=7), str(path))
    return path


ITEMS = [1, 2, 3, 4]


def files(folder: Path) -> list[Path]:
    """Files under ``folder`` but the (empty) build locks."""
    return [p for p in folder.rglob("*") if p.is_file() and not p.name.endswith(".lock")]


def blob(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).normal(0, 1, (1, 3, 32, 48)).astype(np.float32)


def test_build_then_find_then_rebuild_a_corrupt_file(tmp_path: Path) -> None:
    source = tiny_conv_model(tmp_path / "tiny.onnx")
    models = tmp_path / "models"
    built = build_cached(source, models, KEY, ITEMS, blob)
    assert built == models / KEY.file_name(source)
    record = json.loads(record_of(built).read_text())
    assert record["source_sha256"] == KEY.source_sha256 and record["calibration_key"] == KEY.calibration_key
    graph = onnx.load(str(built)).graph
    assert {"QuantizeLinear", "DequantizeLinear"} <= {n.op_type for n in graph.node}
    assert find_cached(source, models, KEY) == built
    # Another calibration set: another name, so the first copy is not taken for it.
    assert find_cached(source, models, Int8Key(KEY.source_sha256, "c" * 64)) is None
    built.write_bytes(built.read_bytes()[:-100])  # truncated
    assert not check_cached(built, KEY)
    assert find_cached(source, models, KEY) is None
    rebuilt = build_cached(source, models, KEY, ITEMS, blob)
    assert rebuilt == built and check_cached(built, KEY)
    ort.InferenceSession(str(built), providers=["CPUExecutionProvider"])


def test_a_model_it_cannot_quantise_falls_back_with_a_warning(tmp_path: Path,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    source = tiny_conv_model(tmp_path / "odd.onnx", custom_op=True)
    models = tmp_path / "models"
    with caplog.at_level(logging.WARNING, logger="fusion_ray"):
        assert build_cached(source, models, KEY, ITEMS, blob) is None
    assert "running it at FP32" in caplog.text
    assert not models.exists() or files(models) == []


FULL_DISK = """
import resource, signal, sys
from pathlib import Path
sys.path.insert(0, {tests!r})
from tests.models.test_quantize import ITEMS, KEY, blob
from fusion_ray.models.quantize import build_cached
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG, as on a full disk
resource.setrlimit(resource.RLIMIT_FSIZE, (1500, 1500))
print(build_cached(Path({source!r}), Path({models!r}), KEY, ITEMS, blob))
"""


def test_a_full_disk_falls_back_and_leaves_no_file(tmp_path: Path) -> None:
    source = tiny_conv_model(tmp_path / "tiny.onnx")
    models = tmp_path / "models"
    models.mkdir()
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache"), "PATH": "/usr/bin:/bin"}
    script = FULL_DISK.format(tests=str(Path(__file__).resolve().parents[2]), source=str(source), models=str(models))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "None"
    assert "running it at FP32" in done.stderr
    assert files(models) == []
    assert files(tmp_path / "cache" / "fusion_ray") == []


def test_output_heads_are_the_convs_that_make_the_outputs(scrfd_path: Path) -> None:
    heads = quantize.output_heads(onnx.load(str(scrfd_path)).graph)
    convs = [n for n in onnx.load(str(scrfd_path)).graph.node if n.name in heads and n.op_type == "Conv"]
    assert len(convs) == 9  # scores, boxes and landmarks for 3 strides


def test_workers_starting_together_build_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from concurrent.futures import ThreadPoolExecutor

    source = tiny_conv_model(tmp_path / "tiny.onnx")
    models = tmp_path / "models"
    with caplog.at_level(logging.INFO, logger="fusion_ray"), ThreadPoolExecutor(3) as pool:
        built = list(pool.map(lambda _: build_cached(source, models, KEY, ITEMS, blob), range(3)))
    assert built == [models / KEY.file_name(source)] * 3 and check_cached(built[0], KEY)
    assert caplog.text.count("INT8 model written") == 1
    assert caplog.text.count("built by another worker") == 2


@pytest.mark.parametrize("body", ["[]", "null", "3", '"text"'])
def test_a_record_that_is_valid_json_but_not_an_object_is_rebuilt(tmp_path: Path, body: str,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    """Before, ``[]`` or ``null`` in the record stopped every later run (``'list' object has no
    attribute 'get'``) until someone deleted it; garbage text was rebuilt. Now both are."""
    source = tiny_conv_model(tmp_path / "tiny.onnx")
    models = tmp_path / "models"
    built = build_cached(source, models, KEY, ITEMS, blob)
    assert built is not None
    record_of(built).write_text(body)
    with caplog.at_level(logging.WARNING):
        assert not check_cached(built, KEY)
    assert "not an object" in caplog.text
    assert build_cached(source, models, KEY, ITEMS, blob) == built and check_cached(built, KEY)


def test_the_weight_width_is_in_the_key_the_name_and_the_model(tmp_path: Path) -> None:
    """7-bit weights (reduce_range: what CPUs without VNNI build) and 8-bit ones are two cache
    entries; the 7-bit model's weights stay within -64..64."""
    source = tiny_conv_model(tmp_path / "tiny.onnx")
    models = tmp_path / "models"
    seven, eight = Int8Key("a" * 64, "b" * 64, 7), Int8Key("a" * 64, "b" * 64, 8)
    assert seven.file_name(source) != eight.file_name(source)
    built = {bits: build_cached(source, models, key, ITEMS, blob) for bits, key in ((7, seven), (8, eight))}
    assert built[7] is not None and built[8] is not None and built[7] != built[8]
    assert find_cached(source, models, seven) == built[7] and find_cached(source, models, eight) == built[8]
    assert json.loads(record_of(built[7]).read_text())["weight_bits"] == 7

    def weight_range(path: Path) -> tuple[int, int]:
        arrays = [numpy_helper.to_array(t) for t in onnx.load(str(path)).graph.initializer if t.data_type == TensorProto.INT8]
        return min(int(a.min()) for a in arrays), max(int(a.max()) for a in arrays)

    assert weight_range(built[7])[0] >= -64 and weight_range(built[7])[1] <= 64
    assert weight_range(built[8])[1] > 64 or weight_range(built[8])[0] < -64


def test_a_rebuild_under_the_same_key_gives_the_same_file(tmp_path: Path) -> None:
    """The same model, calibration frames and weight width give the same bytes (the real detector's
    build matched byte for byte between this CPU and an emulated AVX2-only one: BENCHMARKS.md)."""
    source = tiny_conv_model(tmp_path / "tiny.onnx")
    first = build_cached(source, tmp_path / "a", KEY, ITEMS, blob)
    second = build_cached(source, tmp_path / "b", KEY, ITEMS, blob)
    assert first is not None and second is not None
    assert first.read_bytes() == second.read_bytes()
