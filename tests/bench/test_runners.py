"""``fusion-ray bench runners``: its table and its insightface runner's requirements (no runs here)."""

from pathlib import Path

import pytest

from fusion_ray.bench.runners import bench_runners, parse_setting, render_markdown
from fusion_ray.errors import InputError


def _row(workload: str, runner: str, wall: float, status: str = "ok") -> dict[str, object]:
    return {"workload": workload, "runner": runner, "frames": 10, "wall_s": wall, "first_frame_s": 1.0,
            "steady_fps": 5.0, "status": status}


def test_rows_show_their_speed_up_over_insightface_s_loop_of_the_same_workload() -> None:
    checked = {**_row("clip", "local", 4.0), "unswapped": "0/30"}
    table = render_markdown([checked, _row("clip", "insightface", 10.0), _row("photos", "local", 2.0)])
    lines = table.splitlines()
    assert "| clip | local | 10 | 4.0 | 1.00 | 5.0 | 2.50x | 0/30 | ok |" in lines
    assert "| clip | insightface | 10 | 10.0 | 1.00 | 5.0 | 1.00x | - | ok |" in lines
    assert "| photos | local | 10 | 2.0 | 1.00 | 5.0 | - | - | ok |" in lines  # no loop ran on it, not checked


def test_the_insightface_runner_needs_its_python_and_the_inswapper_folder(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="--insightface-python and --models-dir"):
        bench_runners(photos=[tmp_path / "a.jpg"], group_photo=tmp_path / "g.jpg", scrfd=tmp_path / "s.onnx",
                      runners=["local", "insightface"], models_dir=tmp_path)


def test_a_setting_is_a_name_and_shell_split_job_options_shown_beside_the_runner() -> None:
    assert parse_setting("masks=--face-mask-types box 'occlusion' region") == (
        "masks", ["--face-mask-types", "box", "occlusion", "region"])
    assert parse_setting("box=") == ("box", [])
    with pytest.raises(InputError, match="NAME=OPTIONS"):
        parse_setting("--face-mask-types box")
    table = render_markdown([{**_row("clip", "local", 4.0), "setting": "masks"}])
    assert "| clip | local (masks) | 10 | 4.0 |" in table
