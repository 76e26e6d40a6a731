"""Provenance: one value writes every output's stand-in label."""

from fusion_ray.core.modelset import ModelInfo
from fusion_ray.core.provenance import STAND_IN_KEY, Provenance


def info(name: str, stand_in: bool) -> ModelInfo:
    return ModelInfo(name, f"/m/{name}.onnx", "verified", ("CPUExecutionProvider",), stand_in)


def test_real_models_say_only_the_software():
    p = Provenance.of({"scrfd_2.5g": info("scrfd_2.5g", False)})
    assert not p.is_stand_in and p.header_value() is None and p.warning("out.png") is None
    assert p.metadata() == {"Software": p.software} and p.comment() == f"made by {p.software}"


def test_stand_ins_are_named_everywhere_and_restricted_to_the_models_used():
    models = {"scrfd_2.5g": info("scrfd_2.5g", False), "inswapper_128": info("inswapper_128", True),
              "gfpgan_1.4": info("gfpgan_1.4", True)}
    p = Provenance.of(models, used=["scrfd_2.5g", "inswapper_128"])
    assert p.stand_in_models == ("inswapper_128",)
    assert p.metadata()[STAND_IN_KEY] == "inswapper_128" and "not a real face swap" in p.metadata()["Comment"]
    assert "STAND-IN" in p.comment() and p.header_value() == "inswapper_128"
    assert p.report_field() == ["inswapper_128"] and "NOT a real face swap" in (p.warning("o.png") or "")
    assert Provenance.of(models).stand_in_models == ("gfpgan_1.4", "inswapper_128")
