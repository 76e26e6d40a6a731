"""Provenance: one value writes every output's stand-in label."""

from fusion_ray.core.modelset import ModelInfo
from fusion_ray.core.provenance import PRECISION_KEY, STAND_IN_KEY, Provenance


def info(name: str, stand_in: bool, precision: str = "fp32") -> ModelInfo:
    return ModelInfo(name, f"/m/{name}.onnx", "verified", ("CPUExecutionProvider",), stand_in, precision)


def test_real_models_say_only_the_software_and_the_precision():
    p = Provenance.of({"scrfd_2.5g": info("scrfd_2.5g", False)})
    assert not p.is_stand_in and p.header_value() is None and p.warning("out.png") is None
    assert p.metadata() == {"Software": p.software, PRECISION_KEY: "scrfd_2.5g=fp32"}
    assert p.comment() == f"made by {p.software} (precision scrfd_2.5g=fp32)"


def test_the_precision_that_ran_is_named_per_model_used():
    models = {"scrfd_2.5g": info("scrfd_2.5g", False, "int8"), "inswapper_128": info("inswapper_128", False),
              "gfpgan_1.4": info("gfpgan_1.4", False, "fp16")}
    p = Provenance.of(models, used=["scrfd_2.5g", "inswapper_128"])
    assert p.metadata()[PRECISION_KEY] == "inswapper_128=fp32,scrfd_2.5g=int8"
    assert "(precision inswapper_128=fp32,scrfd_2.5g=int8) with STAND-IN" not in p.comment()
    assert p.comment() == f"made by {p.software} (precision inswapper_128=fp32,scrfd_2.5g=int8)"
    assert Provenance().metadata() == {"Software": Provenance().software}
    assert Provenance().comment() == f"made by {Provenance().software}"


def test_stand_ins_are_named_everywhere_and_restricted_to_the_models_used():
    models = {"scrfd_2.5g": info("scrfd_2.5g", False), "inswapper_128": info("inswapper_128", True),
              "gfpgan_1.4": info("gfpgan_1.4", True)}
    p = Provenance.of(models, used=["scrfd_2.5g", "inswapper_128"])
    assert p.stand_in_models == ("inswapper_128",)
    assert p.metadata()[STAND_IN_KEY] == "inswapper_128" and "not a real face swap" in p.metadata()["Comment"]
    assert "STAND-IN" in p.comment() and p.header_value() == "inswapper_128"
    assert p.report_field() == ["inswapper_128"] and "NOT a real face swap" in (p.warning("o.png") or "")
    assert Provenance.of(models).stand_in_models == ("gfpgan_1.4", "inswapper_128")
