"""Stand-ins of the quality models: labelled, with the real interfaces (names, shapes, layouts, ranges)."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from fusion_ray.errors import ModelError
from fusion_ray.models.onnx_info import is_stand_in_metadata
from fusion_ray.models.registry import get_spec
from fusion_ray.models.standins import make_standin
from fusion_ray.models.standins_quality import QUALITY_STANDIN_NAMES, make_quality_standin

INTERFACES = {
    "2dfan4": ([("input", ["N", 3, 256, 256])], [("landmarks", ["N", 68, 3]), ("heatmaps", ["N", 68, 64, 64])]),
    "xseg_1": ([("input", ["N", 256, 256, 3])], [("output", ["N", 256, 256, 1])]),
    "bisenet_resnet_34": ([("input", ["N", 3, 512, 512])], [("output", ["N", 19, 512, 512])]),
}


@pytest.mark.parametrize("name", QUALITY_STANDIN_NAMES)
def test_quality_stand_ins_are_labelled_and_run(name: str) -> None:
    model = make_standin(name)
    assert "STAND-IN" in model.doc_string
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    metadata = session.get_modelmeta().custom_metadata_map
    assert is_stand_in_metadata(metadata) and metadata["fusion_ray.stand_in_of"] == name
    feeds = {}
    for item in session.get_inputs():
        shape = [2 if isinstance(d, str) else d for d in item.shape]
        dtype = np.float64 if item.type == "tensor(double)" else np.float32
        feeds[item.name] = np.full(shape, 0.4, dtype)
    outputs = session.run(None, feeds)
    assert all(len(o) == 2 for o in outputs)


@pytest.mark.parametrize("name", sorted(INTERFACES))
def test_interfaces(name: str) -> None:
    session = ort.InferenceSession(make_standin(name).SerializeToString(), providers=["CPUExecutionProvider"])
    inputs, outputs = INTERFACES[name]
    assert [(i.name, i.shape) for i in session.get_inputs()] == inputs
    assert [(o.name, o.shape) for o in session.get_outputs()] == outputs


def test_value_ranges() -> None:
    def run(name: str, value: float) -> list[np.ndarray]:
        session = ort.InferenceSession(make_standin(name).SerializeToString(), providers=["CPUExecutionProvider"])
        item = session.get_inputs()[0]
        return session.run(None, {item.name: np.full([1, *item.shape[1:]], value, np.float32)})

    points, heatmaps = run("2dfan4", 0.3)
    assert points[..., :2].min() >= 0.0 and points[..., :2].max() <= 64.0
    assert heatmaps.min() >= 0.0 and heatmaps.max() == pytest.approx(0.6, abs=1e-3)
    (occlusion,) = run("xseg_3", 0.5)
    assert occlusion.min() >= 0.0 and occlusion.max() <= 1.0
    (logits,) = run("bisenet_resnet_18", 0.0)
    assert set(np.unique(logits.argmax(axis=1))) >= {0, 1, 2, 3, 4, 5, 10, 11, 12, 13}


def test_only_the_light_variant_exists() -> None:
    with pytest.raises(ModelError, match="light"):
        make_quality_standin("xseg_1", variant="cost_faithful")
    with pytest.raises(ModelError, match="xseg_1"):
        make_standin("not_a_model")



@pytest.mark.parametrize("name", [n for n in QUALITY_STANDIN_NAMES if get_spec(n).kind in ("swapper", "enhancer")])
def test_swapper_and_enhancer_stand_ins_follow_their_rows(name: str) -> None:
    spec = get_spec(name)
    session = ort.InferenceSession(make_standin(name).SerializeToString(), providers=["CPUExecutionProvider"])
    size = spec.crop_size
    inputs = {i.name: i for i in session.get_inputs()}
    image = "target" if spec.kind == "swapper" else "input"
    assert inputs[image].shape == ["N", 3, size, size]
    feeds: dict[str, np.ndarray] = {image: np.zeros((2, 3, size, size), np.float32)}
    if spec.kind == "swapper":
        source = inputs["source"].shape
        assert source == (["N", 512] if spec.source_form != "crop" else ["N", 3, spec.source_size, spec.source_size])
        feeds["source"] = np.full([2, *source[1:]], 0.1, np.float32)
    if spec.weight_input:
        assert inputs["weight"].type == "tensor(double)" and inputs["weight"].shape == [1]
        feeds["weight"] = np.array([0.5])
    assert set(inputs) == set(feeds)
    (out,) = session.run(["output"], feeds)
    lo, hi = spec.output_range
    assert out.shape == (2, 3, size, size) and out.min() >= lo and out.max() <= hi


def test_converter_stand_ins_map_512_to_512() -> None:
    session = ort.InferenceSession(make_standin("crossface_ghost").SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    (out,) = session.run(None, {"input": np.ones((3, 512), np.float32)})
    assert out.shape == (3, 512)
