"""Stand-in models: interfaces, value ranges, determinism, identity dependence, labels, cost."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from fusion_ray.errors import ModelError
from fusion_ray.models.onnx_info import graph_gflops
from fusion_ray.models.standins import (
    REAL_MODEL_GFLOPS,
    STANDIN_NAMES,
    build_all_standins,
    build_standin,
    is_stand_in,
    make_standin,
    read_stand_in_label,
)

# The real models' interfaces: name -> (inputs, outputs) as
# (name, shape without the batch dimension); the batch is symbolic for ArcFace, 1 otherwise.
INTERFACES = {
    "arcface_w600k_r50": ([("input.1", [3, 112, 112])], [("683", [512])]),
    "inswapper_128": ([("target", [3, 128, 128]), ("source", [512])], [("output", [3, 128, 128])]),
    "gfpgan_1.4": ([("input", [3, 512, 512])], [("output", [3, 512, 512])]),
}


@pytest.fixture(scope="module")
def light(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return build_all_standins(tmp_path_factory.mktemp("standins"))


def session(path: Path, threads: int = 1) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    return ort.InferenceSession(str(path), sess_options=options, providers=["CPUExecutionProvider"])


def unit_rows(rng: np.random.Generator, n: int) -> np.ndarray:
    rows = rng.standard_normal((n, 512))
    return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


def synthetic_face(seed: int) -> np.ndarray:
    """A 112x112 RGB face-like picture: background, skin ellipse, hair, eyes, mouth, grain."""
    r = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:112, 0:112].astype(np.float32)
    img = np.empty((112, 112, 3), np.float32)
    img[:] = r.uniform(40, 200, 3)
    cx, cy = 56 + r.uniform(-3, 3), 60 + r.uniform(-3, 3)
    ax, ay = r.uniform(30, 40), r.uniform(40, 50)
    head = ((xx - cx) / ax) ** 2 + ((yy - cy) / ay) ** 2 < 1
    img[head] = r.uniform([150, 100, 80], [240, 200, 170])
    img[head & (yy < cy - ay * 0.6)] = r.uniform(0, 120, 3)
    for ex in (cx - r.uniform(14, 20), cx + r.uniform(14, 20)):
        ey, er = cy - r.uniform(8, 14), r.uniform(3, 6)
        img[(xx - ex) ** 2 + (yy - ey) ** 2 < er**2] = r.uniform(0, 60, 3)
    my, mw = cy + r.uniform(18, 26), r.uniform(8, 16)
    img[(abs(xx - cx) < mw) & (abs(yy - my) < r.uniform(2, 4))] = r.uniform([120, 20, 20], [220, 90, 90])
    return np.clip(img + r.normal(0, 6, img.shape), 0, 255)


def arcface_blob(images: list[np.ndarray]) -> np.ndarray:
    return np.stack([(im - 127.5) / 127.5 for im in images]).transpose(0, 3, 1, 2).astype(np.float32)


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


# ---------------------------------------------------------------------------------------------
# Interfaces and ranges
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", STANDIN_NAMES)
def test_interface_matches_the_real_model(light: dict[str, Path], name: str) -> None:
    sess = session(light[name])
    want_inputs, want_outputs = INTERFACES[name]
    for args, want in ((sess.get_inputs(), want_inputs), (sess.get_outputs(), want_outputs)):
        assert [a.name for a in args] == [n for n, _ in want]
        for arg, (_, shape) in zip(args, want, strict=True):
            assert arg.type == "tensor(float)"
            assert list(arg.shape[1:]) == shape
            if name == "arcface_w600k_r50":
                assert isinstance(arg.shape[0], str), f"{arg.name}: batch must be symbolic"
            else:
                assert arg.shape[0] == 1, f"{arg.name}: batch must be fixed at 1 like the real export"


@pytest.mark.parametrize("name", STANDIN_NAMES)
def test_cost_faithful_interface_equals_light(name: str) -> None:
    light_graph = make_standin(name).graph
    heavy_graph = make_standin(name, variant="cost_faithful").graph
    assert list(heavy_graph.input) == list(light_graph.input)
    assert list(heavy_graph.output) == list(light_graph.output)


def test_arcface_outputs_are_unnormalised_and_finite(light: dict[str, Path]) -> None:
    x = np.random.default_rng(0).uniform(-1, 1, (5, 3, 112, 112)).astype(np.float32)
    out = session(light["arcface_w600k_r50"]).run(["683"], {"input.1": x})[0]
    assert out.shape == (5, 512) and out.dtype == np.float32 and np.isfinite(out).all()
    norms = np.linalg.norm(out, axis=1)
    assert ((norms > 15) & (norms < 30)).all(), norms


def test_inswapper_output_in_unit_range(light: dict[str, Path]) -> None:
    rng = np.random.default_rng(1)
    target = rng.uniform(0, 1, (1, 3, 128, 128)).astype(np.float32)
    out = session(light["inswapper_128"]).run(["output"], {"target": target, "source": unit_rows(rng, 1)})[0]
    assert out.shape == (1, 3, 128, 128) and out.dtype == np.float32
    assert out.min() >= 0.0 and out.max() <= 1.0
    assert 0.1 < out.std() < 0.5  # not collapsed to a constant


def test_gfpgan_output_in_range_and_close_to_input(light: dict[str, Path]) -> None:
    x = np.random.default_rng(2).uniform(-1, 1, (1, 3, 512, 512)).astype(np.float32)
    out = session(light["gfpgan_1.4"]).run(["output"], {"input": x})[0]
    assert out.shape == (1, 3, 512, 512) and out.dtype == np.float32
    assert out.min() >= -1.0 and out.max() <= 1.0
    smooth = np.linspace(-0.8, 0.8, 512, dtype=np.float32)[None, None, None, :].repeat(512, 2).repeat(3, 1)
    restored = session(light["gfpgan_1.4"]).run(["output"], {"input": smooth})[0]
    assert np.abs(restored - smooth)[..., 1:-1].max() < 1e-4  # a mild filter: ramps pass unchanged


# ---------------------------------------------------------------------------------------------
# Determinism and identity dependence
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("variant", ["light", "cost_faithful"])
def test_build_is_byte_identical(tmp_path: Path, variant: str) -> None:
    first = build_all_standins(tmp_path / "a", variant=variant)
    second = build_all_standins(tmp_path / "b", variant=variant)
    for name in STANDIN_NAMES:
        assert first[name].read_bytes() == second[name].read_bytes(), name
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == sorted(f"{n}.onnx" for n in STANDIN_NAMES)


def test_seed_changes_the_weights() -> None:
    for name in ("arcface_w600k_r50", "inswapper_128"):
        assert make_standin(name, seed=0).SerializeToString() != make_standin(name, seed=1).SerializeToString()


def test_arcface_depends_on_identity(light: dict[str, Path]) -> None:
    sess = session(light["arcface_w600k_r50"])
    faces = [synthetic_face(seed) for seed in range(6)]
    emb = sess.run(["683"], {"input.1": arcface_blob(faces)})[0]
    for i in range(len(faces)):
        for j in range(i + 1, len(faces)):
            assert cosine(emb[i], emb[j]) < 0.5, (i, j)
    again = sess.run(["683"], {"input.1": arcface_blob(faces[:1])})[0]
    np.testing.assert_allclose(again[0], emb[0], rtol=1e-5, atol=1e-5)  # batch-independent
    assert cosine(again[0], emb[0]) == pytest.approx(1.0, abs=1e-6)
    noisy = np.clip(faces[0] + np.random.default_rng(9).normal(0, 3, faces[0].shape), 0, 255)
    assert cosine(sess.run(["683"], {"input.1": arcface_blob([noisy])})[0][0], emb[0]) > 0.99


def test_inswapper_depends_on_source_and_target(light: dict[str, Path]) -> None:
    sess = session(light["inswapper_128"])
    rng = np.random.default_rng(3)
    target = rng.uniform(0, 1, (1, 3, 128, 128)).astype(np.float32)
    latents = unit_rows(rng, 2)
    a = sess.run(["output"], {"target": target, "source": latents[:1]})[0]
    b = sess.run(["output"], {"target": target, "source": latents[1:]})[0]
    assert np.abs(a - b).mean() > 0.05  # different identities: visibly different
    np.testing.assert_array_equal(a, sess.run(["output"], {"target": target, "source": latents[:1]})[0])
    other = rng.uniform(0, 1, (1, 3, 128, 128)).astype(np.float32)
    assert np.abs(a - sess.run(["output"], {"target": other, "source": latents[:1]})[0]).mean() > 0.05


def test_emap_is_the_last_initializer(light: dict[str, Path]) -> None:
    model = onnx.load(str(light["inswapper_128"]))
    last = model.graph.initializer[-1]
    assert last.name == "emap" and list(last.dims) == [512, 512] and last.data_type == TensorProto.FLOAT
    emap = numpy_helper.to_array(last)
    np.testing.assert_allclose(emap @ emap.T, np.eye(512), atol=1e-4)  # near-orthogonal


# ---------------------------------------------------------------------------------------------
# Labels, errors, files
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", STANDIN_NAMES)
def test_stand_in_label_is_readable(light: dict[str, Path], name: str) -> None:
    label = read_stand_in_label(light[name])
    assert label is not None
    assert label["stand_in"] == "true" and label["stand_in_of"] == name and label["variant"] == "light"
    assert is_stand_in(light[name])
    meta = session(light[name]).get_modelmeta()
    assert meta.custom_metadata_map["fusion_ray.stand_in_of"] == name
    assert "NOT a real model" in meta.description


def test_label_of_cost_faithful_variant(tmp_path: Path) -> None:
    path = build_standin("gfpgan_1.4", tmp_path / "g.onnx", variant="cost_faithful", seed=7)
    assert read_stand_in_label(path) == {
        "stand_in": "true", "stand_in_of": "gfpgan_1.4", "variant": "cost_faithful", "seed": "7",
        "builder_version": "1", "real_model_gflops": "395.6"}


def test_other_models_have_no_label(tmp_path: Path) -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    model = helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y]))
    helper.set_model_props(model, {"author": "someone"})
    path = tmp_path / "plain.onnx"
    onnx.save(model, str(path))
    assert read_stand_in_label(path) is None and not is_stand_in(path)
    garbage = tmp_path / "garbage.onnx"
    garbage.write_bytes(b"\xff\xff\xff\xff not an onnx file")
    with pytest.raises(ModelError):
        read_stand_in_label(garbage)
    with pytest.raises(ModelError):
        read_stand_in_label(tmp_path / "missing.onnx")


def test_unknown_name_or_variant_raises(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="no stand-in"):
        build_standin("scrfd_2.5g", tmp_path / "x.onnx")
    with pytest.raises(ModelError, match="variant"):
        build_standin("gfpgan_1.4", tmp_path / "x.onnx", variant="heavy")
    assert list(tmp_path.iterdir()) == []


def test_build_replaces_existing_file(tmp_path: Path) -> None:
    path = tmp_path / "arcface.onnx"
    path.write_bytes(b"old")
    build_standin("arcface_w600k_r50", path)
    assert is_stand_in(path)
    assert [p.name for p in tmp_path.iterdir()] == ["arcface.onnx"]


# ---------------------------------------------------------------------------------------------
# Cost
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", STANDIN_NAMES)
def test_cost_faithful_flops_match_the_real_model(name: str) -> None:
    real = REAL_MODEL_GFLOPS[name]
    heavy = graph_gflops(make_standin(name, variant="cost_faithful"))
    assert 0.5 * real <= heavy <= 2.0 * real, (name, heavy, real)
    assert graph_gflops(make_standin(name)) < 0.01 * real  # the light variant stays cheap


def test_cost_faithful_arcface_runs_close_to_light(tmp_path: Path) -> None:
    # The only cost-faithful model run in the suite (12.6 GFLOPs, ~0.1 s on one core).
    path = build_standin("arcface_w600k_r50", tmp_path / "a.onnx", variant="cost_faithful")
    x = arcface_blob([synthetic_face(0)])
    heavy = session(path, threads=2).run(["683"], {"input.1": x})[0]
    light = session(build_standin("arcface_w600k_r50", tmp_path / "b.onnx")).run(["683"], {"input.1": x})[0]
    assert heavy.shape == (1, 512) and np.isfinite(heavy).all()
    assert 0 < np.abs(heavy - light).max() < 0.02  # the branch is computed, with a small weight


def test_light_models_are_cheap(tmp_path: Path) -> None:
    """Light stand-ins must stay cheap enough for the test suite: checked analytically, not timed."""
    paths = build_all_standins(tmp_path)
    for name, path in paths.items():
        assert graph_gflops(path) < 0.05 * REAL_MODEL_GFLOPS[name], name
