"""``fusion-ray bench pipeline`` end to end on the test session's Ray instance, at a tiny size."""

import json

import pytest

from fusion_ray.cli import main

pytestmark = pytest.mark.usefixtures("ray_cluster")


def test_bench_runs_serial_pipeline_and_sweep_on_the_same_frames(tmp_path, scrfd_path, capsys):
    import ray

    json_path, md_path = tmp_path / "bench.json", tmp_path / "bench.md"
    code = main(["bench", "pipeline", "--standins", "light", "--frames", "12", "--size", "160x90", "--detector-size", "320",
                 "--model", f"scrfd_2.5g={scrfd_path}", "--models-dir", str(tmp_path / "models"),
                 "--providers", "cpu", "--sweep-batches", "1,2", "--sweep-repeats", "1",
                 "--work-dir", str(tmp_path / "work"), "--json", str(json_path), "--markdown", str(md_path)])
    assert code == 0
    assert ray.is_initialized()  # the harness leaves a Ray instance it did not start running
    data = json.loads(json_path.read_text())
    pipeline = data["pipeline"]
    assert pipeline["status"] == "done" and pipeline["frames"] == 12
    assert pipeline["ray_started_here"] is False and pipeline["ray_startup_s"] == 0
    assert pipeline["faces_swapped"] == data["serial"]["fit"]["faces_swapped"] == 12
    # no GPU: one fused pool; "track": the read tasks' detection (tracking is on)
    assert set(pipeline["stages"]) == {"track", "detect", "swap", "paste", "encode", "fused"}
    for stage in pipeline["stages"].values():
        assert 0.0 <= stage["idle_ratio"] <= 1.0 and stage["ms_per_frame"] >= 0
    assert 0 < pipeline["first_output_s"] <= pipeline["wall_s"] and "steady_frames_per_s" in pipeline
    assert pipeline["memory"]["peak_rss_mib"] > 0 and pipeline["memory"]["processes_at_peak"] > 1
    assert pipeline["stand_in_models"] == ["arcface_w600k_r50", "inswapper_128"]
    assert set(data["ratios"]) == {"pipeline_vs_serial_square", "pipeline_vs_serial_fit"}
    assert all(r > 0 for r in data["ratios"].values())
    assert [p["batch"] for p in data["sweep"]["models"]["arcface_w600k_r50"]["points"]] == [1, 2]
    assert not any("did not process the same work" in note for note in data["notes"])

    markdown = md_path.read_text()
    assert "Ray was already running" in markdown
    assert "### Pipeline: per-stage time and idle ratio" in markdown
    assert "pipeline / serial loop (square canvas)" in markdown
    assert "STAND-IN models" in markdown and "(light)" in markdown
    assert not list((tmp_path / "work").glob("*.mp4.fusion_ray_parts"))
    assert not (tmp_path / "work" / "pipeline.mp4").exists()
