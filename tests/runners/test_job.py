"""The Ray Data job end to end on 2 cores: generated clips from the shared photos (moving face,
frames without a face, an audio track), a corrupt file and an image in one job; then a re-run."""

import json
import shutil
from fractions import Fraction
from pathlib import Path

import cv2
import numpy as np
import pytest
from PIL import Image

from fusion_ray.cli import main
from fusion_ray.config import RuntimeConfig
from fusion_ray.errors import ConfigError
from fusion_ray.imageio import FORMAT_CHANGES_KEY, read_image
from fusion_ray.jobs.config import JobConfig, StageResources
from fusion_ray.jobs.manifest import expand_patterns
from fusion_ray.ops.align import align_face
from fusion_ray.ops.paste import crop_roi
from fusion_ray.runners.inline import Engine
from fusion_ray.runners.job import JobItem, plan_job, run_job
from fusion_ray.runners.ray.run import GroupRun
from fusion_ray.video import decode_all, make_corrupt_video, make_test_video, probe
from fusion_ray.video.synthetic import make_edit_list_video, make_truncated_video

pytestmark = pytest.mark.usefixtures("ray_cluster")

NO_FACE = (10, 11, 12, 30)
FPS = Fraction(30000, 1001)


@pytest.fixture(scope="module")
def media(tmp_path_factory, images_dir):
    root = tmp_path_factory.mktemp("media")
    obama = read_image(images_dir / "obama.jpg").frame
    clip = make_test_video(root / "clip.mp4", face_image=obama, n_frames=48, fps=FPS, size_wh=(320, 180),
                           no_face_frames=NO_FACE, gop=8)
    clip2 = make_test_video(root / "clip2.mp4", face_image=obama, n_frames=20, fps=Fraction(25), size_wh=(256, 144),
                            audio=False, gop=10, seed=3)
    bad = make_corrupt_video(root / "broken.mp4")
    image = root / "still.png"
    cv2.imwrite(str(image), cv2.resize(obama, (320, 400)))
    return {"clip": clip, "clip2": clip2, "bad": bad, "image": image, "source": images_dir / "biden.jpg"}


@pytest.fixture(scope="module")
def first_run(tmp_path_factory, media, job_cfg):
    out = tmp_path_factory.mktemp("out")
    source = (media["source"],)
    items = [JobItem(source, media["clip"], out / "clip.mp4"),
             JobItem(source, media["bad"], out / "broken.mp4"),
             JobItem(source, media["clip2"], out / "clip2.mp4"),
             JobItem(source, media["image"], out / "still.png")]
    progress = []
    report = run_job(items, job_cfg, output_root=out, progress=lambda d, t, r: progress.append((d, t)),
                     report_path=out / "report.json")
    return items, report, out, progress


def test_good_items_finish_and_the_bad_one_is_reported(first_run):
    items, report, out, _ = first_run
    status = {item.target.split("/")[-1]: (item.status, item.error) for item in report.items}
    assert status["clip.mp4"][0] == "done"
    assert status["clip2.mp4"][0] == "done"
    assert status["still.png"][0] == "done"
    assert status["broken.mp4"][0] == "failed" and "broken.mp4" in status["broken.mp4"][1]
    assert not (out / "broken.mp4").exists()
    assert not list(out.glob("*.fusion_ray_parts")) and not list(out.glob(".*.part"))
    saved = json.loads((out / "report.json").read_text())
    assert saved["counts"] == {"done": 3, "failed": 1}
    # no GPU: one fused pool runs the chain and reports its own waiting
    assert set(saved["stages"]) == {"detect", "swap", "paste", "encode", "fused"}
    pool = saved["stages"]["fused"]
    assert pool["busy_s"] >= sum(saved["stages"][s]["busy_s"] for s in ("detect", "swap", "paste")) > 0
    assert 0 < pool["idle_ratio"] < 1 and saved["stages"]["detect"]["idle_s"] == 0
    # each step's busy time, though detect, select and align share one stage (and all one pool)
    assert set(saved["steps"]) == {"detect", "select", "align", "swap", "mask", "paste"}
    assert all(step["busy_s"] > 0 for step in saved["steps"].values()), saved["steps"]
    assert saved["stand_in_models"] == ["arcface_w600k_r50", "inswapper_128"]
    driver = saved["driver"]  # what the scale benchmark reads
    assert 0 < driver["first_frame_s"] < saved["wall_s"] and driver["peak_rss_mb"] > 50


def test_frame_count_rate_and_audio_are_preserved(first_run, media):
    _, _, out, _ = first_run
    src, dst = probe(media["clip"]), probe(out / "clip.mp4")
    assert dst.fps == src.fps == FPS
    assert dst.frame_count == src.frame_count == 48
    assert dst.has_audio and abs(dst.audio_duration_s - src.audio_duration_s) < 0.05
    assert "STAND-IN" in dst.metadata.get("comment", "")
    other = probe(out / "clip2.mp4")
    assert other.frame_count == 20 and other.fps == Fraction(25) and not other.has_audio


def _face_rois(engine, frame):
    mask = np.zeros(frame.shape[:2], bool)
    for face in engine.detect(frame):
        _, affine = align_face(frame, face.landmarks_5, engine.swap_layout.template, engine.swap_layout.size)
        roi = crop_roi(affine, engine.swap_layout.size, frame.shape[:2], margin=4)
        mask[roi.y0:roi.y1, roi.x0:roi.x1] = True
    return mask


def test_frames_are_swapped_in_order_and_only_in_face_regions(first_run, media, engine_cfg):
    _, _, out, _ = first_run
    engine = Engine.load(engine_cfg, cpu_budget=1)
    identity = engine.prepare_source([read_image(media["source"]).frame])
    source = [f.frame for f in decode_all(media["clip"])]
    result = [f.frame for f in decode_all(out / "clip.mp4")]
    assert len(result) == len(source)
    for i in range(0, len(source), 3):
        expected = engine.process_frame(source[i], identity).frame.astype(np.float32)
        got = result[i].astype(np.float32)
        err = float(np.mean((got - expected) ** 2))
        # Frame i is the swap of source frame i (H.264 at CRF 12 adds a little noise) ...
        assert 10 * np.log10(255**2 / max(err, 1e-6)) > 30, f"frame {i}"
        if 0 < i < len(source) - 1 and i not in NO_FACE:
            neighbour = engine.process_frame(source[i + 1], identity).frame.astype(np.float32)
            assert err < float(np.mean((got - neighbour) ** 2)), f"frame {i} is closer to frame {i + 1}"
        faces = _face_rois(engine, source[i])
        diff = np.abs(got - source[i].astype(np.float32)).mean(axis=2)
        assert diff[~faces].mean() < 3.0  # outside the faces: only coding noise
        if i not in NO_FACE:
            assert diff[faces].mean() > diff[~faces].mean() + 2.0  # inside: swapped


def test_no_face_frames_pass_through(first_run, media):
    _, report, out, _ = first_run
    clip = next(i for i in report.items if i.target.endswith("/clip.mp4"))
    assert clip.frames == 48 and clip.frames_failed == 0
    assert clip.faces_swapped == 48 - len(NO_FACE)


def test_image_items_and_progress(first_run):
    _, report, out, progress = first_run
    assert read_image(out / "still.png").frame.shape == (400, 320, 3)
    assert progress and progress[-1][0] == progress[-1][1] == 48 + 20 + 1
    assert [d for d, _ in progress] == sorted(d for d, _ in progress)


def test_report_rows_are_streamed_beside_the_report(first_run):
    """One JSON Lines row per item, written as each settles (the corrupt video's at planning)."""
    _, report, out, _ = first_run
    rows = [json.loads(line) for line in (out / "report.jsonl").read_text().splitlines()]
    assert rows[0]["index"] == 1 and rows[0]["status"] == "failed"  # refused at planning: first
    assert sorted(r["index"] for r in rows) == [0, 1, 2, 3]
    final = json.loads((out / "report.json").read_text())["items"]
    assert [{k: v for k, v in r.items() if k != "index"} for r in sorted(rows, key=lambda r: r["index"])] == final


def test_rerun_skips_finished_outputs(first_run, job_cfg):
    items, _, out, _ = first_run
    before = {p: p.stat().st_mtime_ns for p in out.iterdir()}
    report = run_job(items, job_cfg, output_root=out)
    assert [i.status for i in report.items] == ["skipped", "failed", "skipped", "skipped"]
    assert all(before[p] == p.stat().st_mtime_ns for p in before)


def test_outputs_outside_the_root_are_refused(media, job_cfg, tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    report = run_job([JobItem((media["source"],), media["image"], tmp_path / "escape.png")], job_cfg, output_root=root)
    assert report.items[0].status == "failed" and "outside the output root" in report.items[0].error
    assert not (tmp_path / "escape.png").exists()


def test_a_pipeline_that_cannot_fit_is_refused(media, job_cfg, tmp_path):
    greedy = job_cfg.pipeline.model_copy(update={"detect": StageResources(num_cpus=1.0, min_actors=2, max_actors=2)})
    with pytest.raises(ConfigError, match="deadlock"):
        run_job([JobItem((media["source"],), media["clip2"], tmp_path / "x.mp4")],
                JobConfig(engine=job_cfg.engine, pipeline=greedy))
    assert not list(tmp_path.iterdir())  # refused before anything (a parts folder) was made


def test_a_failing_group_fails_its_items_and_the_others_still_run(media, job_cfg, tmp_path):
    source = (media["source"],)
    broken = json.dumps({"models": {"embedder": "no_such_embedder"}})  # Engine.load raises ModelError
    items = [JobItem(source, media["image"], tmp_path / "a.png", options=broken),
             JobItem(source, media["clip2"], tmp_path / "b.mp4", options=broken),
             JobItem(source, media["image"], tmp_path / "c.png")]
    report = run_job(items, job_cfg, output_root=tmp_path, report_path=tmp_path / "report.json")
    assert [i.status for i in report.items] == ["failed", "failed", "done"]
    assert all("ModelError" in i.error and "no_such_embedder" in i.error for i in report.items[:2])
    assert (tmp_path / "c.png").is_file() and not (tmp_path / "a.png").exists()
    assert json.loads((tmp_path / "report.json").read_text())["counts"] == {"done": 1, "failed": 2}
    assert not list(tmp_path.glob("*.fusion_ray_parts"))


def test_items_planned_in_ray_tasks_give_the_same_outputs(first_run, job_cfg, tmp_path, monkeypatch):
    """plan_on_driver 0: every item is planned in a Ray task (streamed), with the same results:
    the corrupt video fails alone, the others equal the driver-planned run's, frame for frame.
    The plans come back beside the stream: every row the driver folds is a frame."""
    items, first, out, _ = first_run
    folded: list[dict] = []
    fold = GroupRun.fold
    monkeypatch.setattr(GroupRun, "fold", lambda self, batch: (folded.append(dict(batch)), fold(self, batch))[1])
    here = tmp_path / "out"
    streamed = JobConfig(engine=job_cfg.engine, pipeline=job_cfg.pipeline.model_copy(update={"plan_on_driver": 0}))
    moved = [JobItem(i.sources, i.target, here / Path(i.output).name) for i in items]
    plan = plan_job(moved, streamed, output_root=here)
    assert not any(p.planned for p in plan.items) and plan.items[0].kind.value == "unknown"  # nothing read here
    report = run_job(moved, streamed, output_root=here, report_path=here / "report.json")
    assert [(i.kind, i.status) for i in report.items] == [(i.kind, i.status) for i in first.items]
    assert "broken.mp4" in report.items[1].error
    assert [i.frames for i in report.items] == [i.frames for i in first.items]
    for name in ("clip.mp4", "clip2.mp4"):
        a, b = list(decode_all(out / name)), list(decode_all(here / name))
        assert len(a) == len(b) and all(np.array_equal(x.frame, y.frame) for x, y in zip(a, b, strict=True)), name
        assert probe(here / name).has_audio == probe(out / name).has_audio
    assert np.array_equal(read_image(out / "still.png").frame, read_image(here / "still.png").frame)
    rows = [json.loads(line) for line in (here / "report.jsonl").read_text().splitlines()]
    assert sorted(r["index"] for r in rows) == [0, 1, 2, 3]
    assert not list(here.glob("*.fusion_ray_parts"))
    streamed_rows = [(int(n), int(i), bool(f)) for b in folded
                     for n, i, f in zip(b["item"], b["index"], b["read_failed"], strict=True)]
    frames = [(n, i) for n, i, failed in streamed_rows if not failed]
    assert len(frames) == len(set(frames)) == sum(i.frames for i in report.items)  # each row one frame, once
    assert all("info" not in b for b in folded) and {n for n, _, failed in streamed_rows if failed} <= {1}


def test_video_swap_command(media, tmp_path, standin_dir, scrfd_path, capsys):
    out = tmp_path / "swapped.mp4"
    code = main(["swap", "-s", str(media["source"]), "-t", str(media["clip2"]), "-o", str(out),
                 "--models-dir", str(standin_dir), "--model", f"scrfd_2.5g={scrfd_path}", "--providers", "cpu",
                 "--no-progress-bars", "--report", str(tmp_path / "r.json"), "--runner", "ray"])
    err = capsys.readouterr().err
    assert code == 0, err
    assert "frames/s" in err and "idle %" in err and "detect" in err
    assert probe(out).frame_count == 20
    assert json.loads((tmp_path / "r.json").read_text())["counts"] == {"done": 1}


def test_separate_pools_give_the_same_video(first_run, media, job_cfg, tmp_path):
    """fuse: never runs one actor pool per stage (the GPU-cluster layout) on the same clip."""
    _, _, out, _ = first_run
    pools = JobConfig(engine=job_cfg.engine, pipeline=job_cfg.pipeline.model_copy(update={"fuse": "never"}))
    report = run_job([JobItem((media["source"],), media["clip2"], tmp_path / "clip2.mp4")], pools)
    assert report.items[0].status == "done"
    assert set(report.stages) == {"detect", "swap", "paste", "encode"}
    assert report.stages["swap"].idle_s > 0  # its own pool waits for detect
    a = [f.frame.astype(np.float32) for f in decode_all(out / "clip2.mp4")]
    b = [f.frame.astype(np.float32) for f in decode_all(tmp_path / "clip2.mp4")]
    assert len(a) == len(b) == 20
    assert max(float(np.mean((x - y) ** 2)) for x, y in zip(a, b, strict=True)) < 1.0


def test_video_outputs_in_other_containers_fail_alone(media, job_cfg, tmp_path):
    """The default output pattern keeps the target's extension: a .mkv clip would get MP4 bytes
    named .mkv. Such items fail at planning with a clear message; the others go on."""
    targets = tmp_path / "targets"
    targets.mkdir()
    shutil.copy(media["clip2"], targets / "clip.mkv")
    shutil.copy(media["image"], targets / "still.png")
    out = tmp_path / "out"
    out.mkdir()
    items = expand_patterns(str(media["source"]), str(targets / "*"), "{source_name}-{target_name}.{target_extension}",
                            out)
    report = run_job(items, job_cfg, output_root=out)
    status = {Path(i.output).name: (i.status, i.error) for i in report.items}
    assert status["biden-clip.mkv"][0] == "failed"
    assert "video outputs must end in .mp4, .m4v or .mov" in status["biden-clip.mkv"][1]
    assert status["biden-still.png"][0] == "done"
    assert sorted(p.name for p in out.iterdir()) == ["biden-still.png"]


def test_the_driver_embeds_the_sources_on_cpu(media, job_cfg, tmp_path, monkeypatch, caplog):
    """Even with GPU providers configured: the driver holds no GPU that Ray counts. The group's
    failure is logged once, below WARNING and without its traceback (-vv shows that): the CLI
    prints each failed item once."""
    import logging

    from fusion_ray.errors import ModelError

    seen = []

    def load(cfg, **kwargs):
        seen.append(cfg.runtime.providers)
        raise ModelError("stopped by the test")

    monkeypatch.setattr(Engine, "load", load)
    cuda = job_cfg.engine.model_copy(update={"runtime": RuntimeConfig(providers=["cuda"])})
    with caplog.at_level(logging.DEBUG, logger="fusion_ray"):
        report = run_job([JobItem((media["source"],), media["image"], tmp_path / "x.png")],
                         JobConfig(engine=cuda, pipeline=job_cfg.pipeline))
    assert seen == [["cpu"]]
    assert report.items[0].status == "failed" and report.items[0].error == "ModelError: stopped by the test"
    group = [r for r in caplog.records if "stopped by the test" in r.getMessage()]
    assert [(r.levelno, r.getMessage(), r.exc_info is None) for r in group] == [
        (logging.INFO, "a group of 1 item(s) failed: ModelError: stopped by the test", True),
        (logging.INFO, f"{media['image']}: ModelError: stopped by the test", True)]
    assert any(r.levelno == logging.DEBUG and r.exc_info for r in caplog.records)  # the traceback, for -vv


def test_truncated_and_edit_list_videos_and_an_alpha_image(media, images_dir, standin_dir, scrfd_path, tmp_path,
                                                           capsys):
    """`fusion-ray job --allow-truncated`: a truncated clip is processed as far as it goes, with its
    loss in the report; an edit list's hidden frames are no loss; an image's alpha is kept."""
    obama = read_image(images_dir / "obama.jpg").frame
    clip = {"face_image": obama, "fps": Fraction(25), "size_wh": (160, 96), "audio": True, "gop": 10}
    cut = make_truncated_video(tmp_path / "cut.mp4", keep=0.4, n_frames=60, **clip)
    edit = make_edit_list_video(tmp_path / "edit.mp4", hidden=3, n_frames=30, **clip)
    bgra = cv2.cvtColor(cv2.resize(obama, (200, 240)), cv2.COLOR_BGR2BGRA)
    bgra[..., 3] = np.linspace(0, 255, 200, dtype=np.uint8)[None, :]
    cv2.imwrite(str(tmp_path / "alpha.png"), bgra)
    cv2.imwrite(str(tmp_path / "deep.png"), cv2.resize(obama, (200, 240)).astype(np.uint16) * 257)
    out = tmp_path / "out"
    out.mkdir()
    (tmp_path / "m.csv").write_text("source,target,output\n" + "".join(
        f"{media['source']},{t},{t.name}\n" for t in (cut, edit, tmp_path / "alpha.png", tmp_path / "deep.png")))
    code = main(["job", "--manifest", str(tmp_path / "m.csv"), "--output-root", str(out), "--allow-truncated",
                 "--models-dir", str(standin_dir), "--model", f"scrfd_2.5g={scrfd_path}", "--providers", "cpu",
                 "--no-progress-bars"])
    err = capsys.readouterr().err
    assert code == 0, err
    saved = {Path(i["target"]).name: i for i in json.loads((out / "fusion_ray_report.json").read_text())["items"]}
    present = probe(out / "cut.mp4").frame_count
    assert saved["cut.mp4"]["status"] == "done" and saved["cut.mp4"]["frames"] == present < 60
    assert saved["cut.mp4"]["frames_missing"] == 60 - present
    assert 0 < saved["cut.mp4"]["missing_from_s"] <= present / 25 + 1e-3  # the first frame absent
    assert "truncated" in saved["cut.mp4"]["warnings"][0] and err.count("cut.mp4 is truncated") == 1 and "warning: " in err
    assert saved["edit.mp4"]["status"] == "done" and saved["edit.mp4"]["frames"] == 27
    assert saved["edit.mp4"]["frames_missing"] == 0 and not saved["edit.mp4"]["warnings"]
    assert probe(out / "edit.mp4").frame_count == 27
    written = cv2.imread(str(out / "alpha.png"), cv2.IMREAD_UNCHANGED)
    assert saved["alpha.png"]["status"] == "done" and written.shape == (240, 200, 4)
    assert np.array_equal(written[..., 3], bgra[..., 3])  # the alpha that came with the item
    assert not saved["alpha.png"]["warnings"]  # a PNG keeps it
    deep = f"{tmp_path / 'deep.png'}: 16-bit image written as 8-bit"
    assert saved["deep.png"]["status"] == "done" and saved["deep.png"]["warnings"] == [deep]
    assert err.count("16-bit image written as 8-bit") == 1
    assert Image.open(out / "deep.png").info[FORMAT_CHANGES_KEY] == "16-bit image written as 8-bit"


def test_a_truncated_video_fails_without_the_flag_and_writes_nothing(images_dir, standin_dir, scrfd_path, tmp_path,
                                                                    capsys):
    cut = make_truncated_video(tmp_path / "cut.mp4", keep=0.4, n_frames=60, face_image=None, fps=Fraction(25),
                               size_wh=(160, 96))
    args = ["--models-dir", str(standin_dir), "--model", f"scrfd_2.5g={scrfd_path}", "--providers", "cpu",
            "--no-progress-bars"]
    code = main(["swap", "-s", str(images_dir / "biden.jpg"), "-t", str(cut), "-o", str(tmp_path / "o.mp4"), *args])
    err = capsys.readouterr().err
    assert code == 2 and not (tmp_path / "o.mp4").exists()
    assert err.count("is truncated") == 1 and "60 frames" in err and "--allow-truncated" in err
    assert "Traceback" not in err
    (tmp_path / "m.csv").write_text(f"source,target,output\n{images_dir / 'biden.jpg'},{cut},o.mp4\n")
    code = main(["job", "--manifest", str(tmp_path / "m.csv"), "--output-root", str(tmp_path), *args])
    report = json.loads((tmp_path / "fusion_ray_report.json").read_text())
    assert code == 1 and report["items"][0]["status"] == "failed" and report["items"][0]["frames_missing"] > 0
    assert "is truncated" in report["items"][0]["error"] and not (tmp_path / "o.mp4").exists()
    assert not list(tmp_path.glob("*.fusion_ray_parts"))
