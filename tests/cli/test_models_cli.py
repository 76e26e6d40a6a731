"""`fusion-ray models`: list (every registry row), verify, make-standins, make-dynamic (download is tested in tests/models)."""

import pytest

from fusion_ray.cli import main
from fusion_ray.models.standins import is_stand_in


def test_make_standins_then_list_and_verify(tmp_path, capsys):
    assert main(["models", "make-standins", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.count("STAND-IN") == 3
    assert is_stand_in(tmp_path / "inswapper_128.onnx")
    assert main(["models", "--models-dir", str(tmp_path), "list"]) == 0
    listing = capsys.readouterr().out
    assert "inswapper_128" in listing and "missing" in listing  # gfpgan etc. present, scrfd missing
    assert main(["models", "--models-dir", str(tmp_path), "verify", "inswapper_128"]) == 0
    assert "verified" in capsys.readouterr().out
    (tmp_path / "inswapper_128.onnx").write_bytes(b"tampered")
    assert main(["models", "--models-dir", str(tmp_path), "verify", "inswapper_128"]) == 4
    assert "FAILED" in capsys.readouterr().err


def test_verify_with_nothing_present(tmp_path, capsys):
    assert main(["models", "--models-dir", str(tmp_path), "verify"]) == 4
    assert "no model files" in capsys.readouterr().err


def test_download_needs_licence_acceptance_off_a_terminal(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("sys.stdin.isatty", lambda: False)
    assert main(["models", "--models-dir", str(tmp_path), "download", "gfpgan_1.4"]) == 2
    err = capsys.readouterr().err
    assert "Apache-2.0" in err and "--accept-licences" in err
    assert list(tmp_path.iterdir()) == []


def test_make_dynamic_command(tmp_path, capsys):
    assert main(["models", "make-standins", str(tmp_path)]) == 0
    capsys.readouterr()
    dst = tmp_path / "inswapper_dynamic.onnx"
    assert main(["models", "make-dynamic", str(tmp_path / "inswapper_128.onnx"), str(dst)]) == 0
    assert "max abs diff" in capsys.readouterr().out
    assert dst.is_file()
    assert main(["models", "make-dynamic", str(dst), str(tmp_path / "again.onnx")]) == 0
    assert "already has a dynamic batch" in capsys.readouterr().out


@pytest.mark.parametrize("argv", [["models", "download", "nope", "--accept-licences"]])
def test_unknown_model_is_a_clear_error(argv, capsys, tmp_path):
    assert main(["models", "--models-dir", str(tmp_path), *argv[1:]]) == 4
    assert "nope" in capsys.readouterr().err


def test_make_standins_quality_writes_the_optional_models_labelled(tmp_path, capsys):
    from fusion_ray.models.standins import read_stand_in_label
    from fusion_ray.models.standins_quality import QUALITY_STANDIN_NAMES

    assert main(["models", "make-standins", str(tmp_path), "--quality"]) == 0
    out = capsys.readouterr().out
    for name in ("arcface_w600k_r50", *QUALITY_STANDIN_NAMES):
        assert read_stand_in_label(tmp_path / f"{name}.onnx")["stand_in_of"] == name
    assert "xseg_1: STAND-IN (light)" in out and "hyperswap_1a_256: STAND-IN (light)" in out


def _listed(out: str) -> dict[str, list[str]]:
    """``models list`` rows by name: [kind, set, status, check, size...]."""
    lines = out.splitlines()
    assert lines[0].startswith("models directory:") and lines[1].split()[:6] == [
        "name", "kind", "set", "status", "check", "size"]
    rows = [line.split() for line in lines[2:]]
    return {row[0]: row[1:] for row in rows}


def test_list_shows_every_registry_row_with_its_set_and_status(tmp_path, capsys, scrfd_path):
    import shutil

    from fusion_ray.models.registry import all_specs, optional_specs

    assert main(["models", "make-standins", str(tmp_path)]) == 0
    shutil.copy(scrfd_path, tmp_path / "scrfd_2.5g.onnx")  # the real detector: present, not a stand-in
    capsys.readouterr()
    assert main(["models", "--models-dir", str(tmp_path), "list"]) == 0
    rows = _listed(capsys.readouterr().out)
    specs = (*all_specs(), *optional_specs())
    assert list(rows) == [s.name for s in specs] and len(rows) > 30
    for spec in specs:
        kind, kept, status = rows[spec.name][:3]
        assert kind == spec.kind and kept == ("standard" if spec.default_set else "optional")
        assert status in ("present", "missing", "stand-in")
    assert rows["scrfd_2.5g"][2:4] == ["present", "unverified"]
    assert rows["inswapper_128"][2] == "stand-in" and rows["gfpgan_1.4"][2] == "stand-in"
    assert rows["inswapper_128_fp16"][2:4] == ["missing", "-"]
    assert rows["hyperswap_1a_256"][:3] == ["swapper", "optional", "missing"]
    assert rows["codeformer"][:3] == ["enhancer", "optional", "missing"]


def test_list_marks_optional_stand_ins(tmp_path, capsys):
    assert main(["models", "make-standins", str(tmp_path), "--quality"]) == 0
    capsys.readouterr()
    assert main(["models", "--models-dir", str(tmp_path), "list"]) == 0
    rows = _listed(capsys.readouterr().out)
    assert rows["xseg_1"][:3] == ["occluder", "optional", "stand-in"]
    assert rows["hyperswap_1a_256"][:3] == ["swapper", "optional", "stand-in"]
