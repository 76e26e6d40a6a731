"""One capability, one file: a model kind with its registry rows, its wrapper, its stand-in and its
step is declared in one file and named in ``CAPABILITIES``; with one row of the options table, it
reaches every surface. The face classifier is one; a THROWAWAY capability, written here to a file,
is put in the list and taken out again."""

from __future__ import annotations

import argparse
import importlib.util
import json
import types
from pathlib import Path

import numpy as np
import pytest

from fusion_ray import options_table
from fusion_ray.cli import build_parser, main
from fusion_ray.cli.common import engine_config_from_args
from fusion_ray.config import EngineConfig, ModelsConfig, SelectionConfig
from fusion_ray.core.chain import Selection
from fusion_ray.core.facebatch import FaceBatch, FrameBatch
from fusion_ray.core.facefusion_options import OptionsModel, options_model
from fusion_ray.core.modelset import ModelSet
from fusion_ray.core.steps import Chain, Rows, Tools, required_components
from fusion_ray.errors import ModelError
from fusion_ray.jobs.config import JobConfig
from fusion_ray.jobs.manifest import read_manifest
from fusion_ray.jobs.plan import with_overrides
from fusion_ray.live.protocol import StartMessage
from fusion_ray.models import capabilities, face_classifier
from fusion_ray.models.hashes import write_hash_record
from fusion_ray.models.registry import get_spec, names_of_kind, optional_specs
from fusion_ray.models.standins import build_standin, is_stand_in
from fusion_ray.models.store import ModelStore
from fusion_ray.options_table import Option
from fusion_ray.serve.schemas import SwapOptions
from fusion_ray.types import Face

SCORER_FILE = '''"""A THROWAWAY capability: a model that scores each face (a stand-in that scores nothing)."""

from __future__ import annotations

from fusion_ray.capability import Capability, Step
from fusion_ray.models.onnx_graph import Graph, finish_standin, float_value_info
from fusion_ray.models.onnx_info import is_stand_in_metadata
from fusion_ray.models.registry_rows import facefusion_row
from fusion_ray.models.session import read_metadata

KIND = "scorer"
ROW = facefusion_row("face_scorer", "models-3.0.0", KIND, 112, 0.0, 255.0, ("throwaway", "https://example.invalid"),
                     0.0, "A throwaway face scorer.", template="arcface_112_v2")


class Scorer:
    def __init__(self, session, spec):
        self.session, self.spec = session, spec
        self.stand_in = is_stand_in_metadata(read_metadata(session))


def score_step(tools, rows, batch):
    assert tools.models.scorer is not None
    return batch


def make_standin(seed):
    g = Graph("face_scorer")
    g.op("ReduceMean", ["input"], out="score", axes=[1, 2, 3], keepdims=0)
    return finish_standin("face_scorer", "light", seed, g, [float_value_info("input", ["N", 3, 112, 112])],
                          [float_value_info("score", ["N"])])


CAPABILITY = Capability(
    "face scorer", KIND, (ROW,), lambda cfg: (ROW.name,), lambda session, spec, cfg: Scorer(session, spec),
    steps=(Step("score", "select", score_step, ("frame", "faces"), ("faces",), model=KIND,
                enabled=lambda cfg: cfg.detector.score_threshold != 0.5),),
    standins={ROW.name: make_standin})
'''

ROW = Option("face_scorer_threshold", "detector.score_threshold", float, "faces the scorer rates under this are "
             "dropped", "0.5", bounds=(0.0, 1.0))
"""The throwaway capability's one row of the options table."""


def _written(tmp_path: Path) -> Path:
    path = tmp_path / "throwaway_scorer.py"
    path.write_text(SCORER_FILE)
    return path


def _load(path: Path) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location("throwaway_scorer", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture()
def scorer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    """The throwaway capability file, listed in CAPABILITIES with its row in the options table
    (monkeypatch takes both out again)."""
    module = _load(_written(tmp_path))
    monkeypatch.setattr(capabilities, "CAPABILITIES", (*capabilities.CAPABILITIES, module.CAPABILITY))
    monkeypatch.setattr(options_table, "OPTIONS", (*options_table.OPTIONS, ROW))
    return module


def _swap_flags() -> dict[str, argparse.Action]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {flag: action for action in sub.choices["swap"]._actions for flag in action.option_strings}


def test_the_face_classifier_is_a_capability() -> None:
    assert face_classifier.CAPABILITY in capabilities.CAPABILITIES
    assert capabilities.capability_of_kind("classifier") is face_classifier.CAPABILITY
    assert get_spec("fairface") is face_classifier.FAIRFACE and face_classifier.FAIRFACE in optional_specs()
    assert names_of_kind("classifier") == ("fairface",)
    filtered = EngineConfig(selection=SelectionConfig(gender="female"))
    assert Chain.of(filtered).names[:3] == ["detect", "classify", "select"]
    assert "classifier" in required_components(filtered)
    assert "classify" not in Chain.of(EngineConfig()).names


class _Answers(face_classifier.FairFaceClassifier):
    """A classifier whose answers are given: each call's genders, or an error to raise."""

    def __init__(self, *calls: list[str] | Exception) -> None:
        self.calls = list(calls)

    def classify_faces(self, frame: np.ndarray, landmarks_5: object) -> list[face_classifier.FaceAttributes]:
        call = self.calls.pop(0)
        if isinstance(call, Exception):
            raise call
        return [face_classifier.FaceAttributes(g, (20, 29), "white") for g in call]  # type: ignore[arg-type]


def _face(x: float) -> Face:
    points = np.asarray([[x + 3, 5], [x + 7, 5], [x + 5, 7], [x + 3, 9], [x + 7, 9]], np.float32)
    return Face(np.asarray([x, 0, x + 10, 12], np.float32), points, 0.9)


def test_the_classify_step_keeps_what_detection_kept() -> None:
    """As detection did: a given frame keeps its faces, a frame that fails is marked as a detect
    failure with none, and faces_detected counts the faces kept."""
    cfg = EngineConfig(selection=SelectionConfig(gender="female"))
    tools = Tools(cfg, ModelSet(loaded={"classifier": _Answers(["male", "female"], ValueError("bad crop"))}))
    rows = Rows([Selection("all")] * 3, [""] * 3, given=np.asarray([False, True, False]),
                given_found=np.asarray([0, 2, 0]))
    faces = FaceBatch.from_faces([[_face(0), _face(20)], [_face(0), _face(20)], [_face(0)]])
    batch = FrameBatch([np.zeros((32, 32, 3), np.uint8)] * 3, [""] * 3, faces).counted(
        faces_detected=np.asarray([2, 2, 1], np.int32))
    done = face_classifier.classify_step(tools, rows, batch)
    assert done.faces.frame_index.tolist() == [0, 1, 1] and float(done.faces.bbox_xyxy[0, 0]) == 20.0
    assert done.errors[:2] == ["", ""] and done.errors[2] == "detect: ValueError: bad crop"
    assert done.counter("faces_detected").tolist() == [1, 2, 0]


def test_a_throwaway_capability_reaches_every_surface(scorer: types.ModuleType, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    # the registry and `models list`
    assert get_spec("face_scorer") is scorer.ROW and names_of_kind("scorer") == ("face_scorer",)
    assert main(["models", "--models-dir", str(tmp_path), "list"]) == 0
    listed = [line.split() for line in capsys.readouterr().out.splitlines()]
    assert ["face_scorer", "scorer", "optional", "missing"] in [line[:4] for line in listed]

    # the command line: the swap parser's flag, onto the config
    action = _swap_flags()[ROW.flag]
    assert action.dest == ROW.name and ROW.help in (action.help or "")
    args = build_parser().parse_args(["swap", "-s", "s.jpg", "-t", "t.jpg", "-o", "o.png", ROW.flag, "0.7"])
    cfg = engine_config_from_args(args)
    assert cfg.detector.score_threshold == 0.7

    # the step is placed by its phase, its model kind is what the config loads
    assert Chain.of(cfg).names[:3] == ["detect", "select", "score"]
    assert "scorer" in required_components(cfg) and "scorer" not in required_components(EngineConfig())

    # the HTTP form (its OpenAPI) and the live start message, made from the table's rows
    rows = options_table.OPTIONS
    for base in (OptionsModel, SwapOptions, StartMessage):
        model = options_model(f"With{base.__name__}", base, rows)
        field = model.model_json_schema()["properties"][ROW.name]
        assert field["description"] == "Faces the scorer rates under this are dropped." and field["anyOf"][0][
            "maximum"] == 1.0
    start = options_model("Start", StartMessage, rows).model_validate({"source_id": "s", ROW.name: 0.7})
    assert start.value(ROW.name) == 0.7

    # a job manifest's options
    manifest = tmp_path / "m.csv"
    manifest.write_text('source,target,output,options\ns.jpg,t.png,o.png,"' +
                        json.dumps({ROW.name: 0.7}).replace('"', '""') + '"\n')
    item, = read_manifest(manifest, tmp_path / "out")
    assert with_overrides(JobConfig(), item.options).engine.detector.score_threshold == 0.7


def test_the_loader_loads_a_capabilitys_kind_from_its_declaration(scorer: types.ModuleType, tmp_path: Path) -> None:
    path = build_standin("face_scorer", tmp_path / "face_scorer.onnx")
    write_hash_record(path, "generated")
    assert is_stand_in(path)
    cfg = EngineConfig(models=ModelsConfig(paths={"face_scorer": path}), detector={"score_threshold": 0.7})
    models = ModelSet.load(cfg, ["scorer"], store=ModelStore(tmp_path, overrides={"face_scorer": path}))
    assert isinstance(models["scorer"], scorer.Scorer) and models.scorer is models["scorer"]
    assert models.stand_in_models == ["face_scorer"] and models.classifier is None


def test_a_capability_taken_out_is_gone(tmp_path: Path) -> None:
    with pytest.MonkeyPatch.context() as patch:
        module = _load(_written(tmp_path))
        patch.setattr(capabilities, "CAPABILITIES", (*capabilities.CAPABILITIES, module.CAPABILITY))
        assert get_spec("face_scorer") is module.ROW
    with pytest.raises(ModelError, match="unknown model 'face_scorer'"):
        get_spec("face_scorer")
    cfg = EngineConfig(detector={"score_threshold": 0.7})
    assert "score" not in Chain.of(cfg).names and "scorer" not in required_components(cfg)
    with pytest.raises(AttributeError):
        ModelSet().scorer  # noqa: B018


def test_every_capability_kind_is_new_and_no_name_of_the_model_set():
    from fusion_ray.core.modelset import BUILT_IN_COMPONENTS, ModelSet
    from fusion_ray.models.capabilities import CAPABILITIES

    kinds = [capability.kind for capability in CAPABILITIES]
    assert len(set(kinds)) == len(kinds)
    assert not set(kinds) & set(BUILT_IN_COMPONENTS)
    assert not {kind for kind in kinds if hasattr(ModelSet, kind)}  # a method would hide its view
