"""The benchmark harness at tiny sizes, without Ray: models, memory sampling, serial loop, sweep,
and the JSON / Markdown reports. Behaviour only: no timing is asserted."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fusion_ray.bench import (
    BenchOptions,
    PeakMemorySampler,
    prepare_models,
    run_bench,
    run_sweep,
    tree_rss,
)
from fusion_ray.cli import main
from fusion_ray.config import DetectorConfig, EngineConfig, ModelsConfig, RuntimeConfig
from fusion_ray.errors import ModelMissingError
from fusion_ray.jobs.config import PipelineConfig

ALL_BATCHES = (1, 2, 4, 8, 16, 32)


@pytest.fixture(scope="module")
def empty_models_cfg(tmp_path_factory, scrfd_path):
    """No model in the models directory but the real detector: stand-ins get generated."""
    empty = tmp_path_factory.mktemp("no_models")
    return EngineConfig(models=ModelsConfig(models_dir=empty, paths={"scrfd_2.5g": scrfd_path}),
                        runtime=RuntimeConfig(providers=["cpu"]), detector=DetectorConfig(size=320))


@pytest.fixture(scope="module")
def bench_models(tmp_path_factory, empty_models_cfg):
    return prepare_models(empty_models_cfg, standins="light", work_dir=tmp_path_factory.mktemp("bench_work"))


def test_absent_models_become_labelled_standins_with_batch_dynamic_copies(bench_models, scrfd_path):
    models = bench_models.models
    assert models["detector"].path == str(scrfd_path) and not models["detector"].stand_in
    for role in ("embedder", "swapper", "enhancer"):
        assert models[role].stand_in and models[role].variant == "light" and models[role].generated
    # inswapper and GFPGAN declare batch 1 like the real exports: the harness uses proven copies.
    for role in ("swapper", "enhancer"):
        assert models[role].batch_dynamic_copy_of is not None
        assert models[role].path != models[role].batch_dynamic_copy_of
    assert models["embedder"].batch_dynamic_copy_of is None  # already batch-dynamic
    assert bench_models.stand_in_models == ["arcface_w600k_r50", "gfpgan_1.4", "inswapper_128"]
    summary = bench_models.stand_in_summary()
    assert "STAND-IN" in summary and "inswapper_128 (light)" in summary
    assert bench_models.engine.models.paths["inswapper_128"] == models["swapper"].path or \
        str(bench_models.engine.models.paths["inswapper_128"]) == models["swapper"].path


def test_labels_describe_the_file_used_and_copies_follow_their_source(tmp_path, bench_models, empty_models_cfg):
    from fusion_ray.models.standins import read_stand_in_label

    for model in bench_models.models.values():
        label = read_stand_in_label(Path(model.path))
        assert (label or {}).get("variant") == model.variant
    # A changed source file gets a new batch-dynamic copy instead of a stale one.
    work = Path(bench_models.models["swapper"].batch_dynamic_copy_of).parents[2]
    again = prepare_models(empty_models_cfg, standins="light", work_dir=work)
    assert again.models["swapper"].path == bench_models.models["swapper"].path
    source = Path(bench_models.models["swapper"].batch_dynamic_copy_of)
    os.utime(source, ns=(source.stat().st_atime_ns, source.stat().st_mtime_ns + 10**9))
    changed = prepare_models(empty_models_cfg, standins="light", work_dir=work)
    assert changed.models["swapper"].path != bench_models.models["swapper"].path


def test_models_found_in_the_models_dir_are_used_as_they_are(tmp_path, models_config):
    cfg = EngineConfig(models=models_config)
    prepared = prepare_models(cfg, standins="cost_faithful", work_dir=tmp_path, batch_dynamic=False)
    assert not any(m.generated for m in prepared.models.values())
    assert prepared.models["swapper"].variant == "light"  # the file's own label, not --standins
    assert not (tmp_path / "standins").exists()


def test_a_missing_detector_is_an_error_naming_the_option(tmp_path):
    cfg = EngineConfig(models=ModelsConfig(models_dir=tmp_path))
    with pytest.raises(ModelMissingError, match="--model scrfd_2.5g=PATH"):
        prepare_models(cfg, standins="light", work_dir=tmp_path)


def test_memory_sampler_counts_child_processes():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3)"])
    try:
        total, count = tree_rss()
        assert count >= 2 and total > 0
        with PeakMemorySampler(0.05, pss=True) as sampler:
            buffer = bytearray(64 * 2**20)  # noqa: F841 - held while sampled
            import time

            time.sleep(0.3)
        assert sampler.result is not None
        assert sampler.result.samples >= 3
        assert sampler.result.peak_rss_mib >= sampler.result.baseline_rss_mib
        assert sampler.result.processes_at_peak >= 2
        if sys.platform.startswith("linux"):  # PSS splits shared pages: never above the RSS sum
            assert sampler.result.peak_pss_mib is not None
            assert 0 < sampler.result.peak_pss_mib <= sampler.result.peak_rss_mib
        assert sampler.result.driver_peak_rss_mib > 0 and sampler.result.top_at_peak
        assert sampler.result.system_added_peak_mib >= 0
        with PeakMemorySampler(0.05) as cheap:  # PSS is opt-in (reading it is slow)
            time.sleep(0.1)
        assert cheap.result is not None and cheap.result.peak_pss_mib is None
    finally:
        child.kill()
        child.wait()


def test_sweep_covers_every_batch_size_and_honours_caps(bench_models):
    result = run_sweep(bench_models, batches=ALL_BATCHES, repeats=1, warmup=1, caps={"gfpgan_1.4": 2})
    assert result.batches == list(ALL_BATCHES)
    embed, swap, enhance = (result.models[n] for n in ("arcface_w600k_r50", "inswapper_128", "gfpgan_1.4"))
    for model in (embed, swap):
        assert [p.batch for p in model.points] == list(ALL_BATCHES)
        assert model.fixed_batch is None and model.skipped == []
    assert [p.batch for p in enhance.points] == [1, 2] and enhance.skipped == [4, 8, 16, 32]
    for model in result.models.values():
        assert model.stand_in and model.variant == "light"
        assert model.providers == ["CPUExecutionProvider"]
        for point in model.points:
            assert len(point.calls_ms) == 1 and point.per_face_ms > 0 and point.faces_per_s > 0
    data = result.to_json()
    assert data["models"]["inswapper_128"]["batch_dynamic_copy_of"].endswith("inswapper_128.onnx")
    assert data["models"]["gfpgan_1.4"]["skipped_batches"] == [4, 8, 16, 32]


def test_serial_loops_and_sweep_report_as_json_and_markdown(tmp_path, empty_models_cfg):
    options = BenchOptions(engine=empty_models_cfg, pipeline=PipelineConfig(progress_bars=False),
                           work_dir=tmp_path, standins="light", parts=("serial", "sweep"), frames=6,
                           size_wh=(160, 90), sweep_batches=(1, 2), sweep_repeats=1, sweep_warmup=0,
                           command="test")
    steps = []
    report = run_bench(options, progress=steps.append)
    assert steps[0] == "preparing the video" and "serial loop, square canvas" in steps
    data = json.loads(json.dumps(report.to_json()))
    assert data["schema"] == "fusion_ray.bench/1"
    assert data["stand_in_models"] == ["arcface_w600k_r50", "gfpgan_1.4", "inswapper_128"]
    assert data["stand_in_variant"] == "light"
    for key in ("cpu_model", "logical_cores", "ram_gib", "gpus", "onnxruntime", "ray", "providers_used",
                "load_average_at_start", "load_average_at_end", "code"):
        assert key in data["machine"]
    assert set(data["machine"]["code"]) == {"package_path", "commit", "dirty_files"}
    assert data["video"]["frames"] == 6 and data["video"]["width"] == 160
    assert set(data["serial"]) == {"square", "fit"}
    assert data["serial"]["square"]["detector_canvas_hw"] == [320, 320]
    assert data["serial"]["fit"]["detector_canvas_hw"] == [192, 320]
    for loop in data["serial"].values():
        assert loop["frames"] == 6 and loop["faces_swapped"] == 6
        assert {"decode", "detect", "swap", "paste", "encode"} <= set(loop["stage_ms_per_frame"])
        assert loop["memory"]["peak_rss_mib"] > 0 and loop["wall_s"] >= loop["loop_s"]
    assert data["pipeline"] is None and data["ratios"] == {}
    assert [p["batch"] for p in data["sweep"]["models"]["inswapper_128"]["points"]] == [1, 2]

    markdown = report.to_markdown()
    assert "STAND-IN models" in markdown and "inswapper_128 (light)" in markdown
    assert "| serial loop (square)" in markdown and "| serial loop (fit)" in markdown
    assert "## Batch-size sweep" in markdown and "STAND-IN (light)" in markdown
    assert "Machine:" in markdown
    assert not list(tmp_path.glob("serial_*_video.mp4"))  # the loop's intermediate file is removed


@pytest.mark.parametrize("argv, message", [
    (["--parts", "serial,bogus"], "--parts"),
    (["--size", "641x360"], "--size"),
    (["--sweep-batches", "1,0"], "--sweep-batches"),
    (["--sweep-cap", "inswapper_128"], "--sweep-cap"),
    (["--sweep-models", "detector"], "--sweep-models"),
])
def test_cli_rejects_bad_options(argv, message, capsys):
    assert main(["bench", "pipeline", *argv]) == 2
    assert message in capsys.readouterr().err


def test_cli_sweep_only_writes_json_and_markdown(tmp_path, standin_dir, capsys, monkeypatch):
    monkeypatch.setenv("FUSION_RAY_ASSETS", str(tmp_path / "no_assets"))  # a sweep needs no detector
    json_path, md_path = tmp_path / "bench.json", tmp_path / "bench.md"
    code = main(["bench", "pipeline", "--sweep-only", "--models-dir", str(standin_dir), "--providers", "cpu",
                 "--sweep-models", "embedder,enhancer", "--sweep-batches", "1,2", "--sweep-repeats", "1",
                 "--sweep-warmup", "0", "--sweep-cap", "gfpgan_1.4=1",
                 "--json", str(json_path), "--markdown", str(md_path)])
    assert code == 0
    data = json.loads(json_path.read_text())
    assert data["serial"] == {} and data["pipeline"] is None
    assert set(data["sweep"]["models"]) == {"arcface_w600k_r50", "gfpgan_1.4"}
    assert data["sweep"]["models"]["gfpgan_1.4"]["skipped_batches"] == [2]
    assert "detector" not in data["models"]
    assert data["command"].startswith("fusion-ray bench pipeline")
    printed = capsys.readouterr().out
    assert printed.strip() == md_path.read_text().strip()
    assert "STAND-IN" in printed
