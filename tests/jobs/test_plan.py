"""The planner (no Ray): each kind of item gets its kind, segments, frame count and status."""

import json
import os
import shutil
from fractions import Fraction

import cv2
import numpy as np
import pytest

from fusion_ray.config import EngineConfig
from fusion_ray.jobs.config import JobConfig, PipelineConfig
from fusion_ray.jobs.plan import JobItem, plan_job
from fusion_ray.jobs.report import ItemKind, ItemStatus
from fusion_ray.video import EncodeOptions, make_corrupt_video, make_test_video
from fusion_ray.video.synthetic import make_edit_list_video, make_truncated_video

CLIP = {"face_image": None, "fps": Fraction(25), "size_wh": (96, 64), "audio": False, "gop": 10}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("plan")
    cv2.imwrite(str(root / "photo.png"), np.full((300, 200, 3), 90, np.uint8))
    cv2.imwrite(str(root / "alpha.png"), np.full((30, 50, 4), 200, np.uint8))
    cv2.imwrite(str(root / "photo.tif"), np.full((70, 40, 3), 90, np.uint8))  # no header reader: decoded
    (root / "empty.png").write_bytes(b"")
    (root / "exists.png").write_bytes(b"already there")
    (root / "empty.mp4").write_bytes(b"")
    (root / "dir.png").mkdir()
    os.mkfifo(root / "fifo.png")
    for a, b in (("loop", "loop.png"), ("loop.png", "loop"), ("o_loop", "o_loop.png"), ("o_loop.png", "o_loop")):
        (root / a).symlink_to(root / b)
    return {
        "root": root,
        "clip": make_test_video(root / "clip.mp4", n_frames=40, **CLIP),
        "edit": make_edit_list_video(root / "edit.mp4", hidden=4, n_frames=40, **CLIP),
        "cut": make_truncated_video(root / "cut.mp4", keep=0.4, n_frames=100, **CLIP),
        "bad": make_corrupt_video(root / "bad.mp4"),
    }


@pytest.fixture(scope="module")
def cfg(models_config):
    """The planner checks each group's models: stand-ins (and the real detector) are there."""
    return JobConfig(engine=EngineConfig(models=models_config), pipeline=PipelineConfig(segment_seconds=0.7))


# target, output, expected (kind, status, frames, error fragment)
TABLE = [
    ("photo.png", "o/photo.png", (ItemKind.IMAGE, ItemStatus.PENDING, 1, "")),
    ("photo.tif", "o/photo.png", (ItemKind.IMAGE, ItemStatus.PENDING, 1, "")),
    ("clip.mp4", "o/clip.mp4", (ItemKind.VIDEO, ItemStatus.PENDING, 40, "")),
    ("edit.mp4", "o/edit.mp4", (ItemKind.VIDEO, ItemStatus.PENDING, 36, "")),  # hidden frames are no shortfall
    ("cut.mp4", "o/cut.mp4", (ItemKind.VIDEO, ItemStatus.FAILED, 0, "cut.mp4 is truncated")),
    ("bad.mp4", "o/bad.mp4", (ItemKind.VIDEO, ItemStatus.FAILED, 0, "bad.mp4")),
    ("clip.mp4", "o/clip.mkv", (ItemKind.VIDEO, ItemStatus.FAILED, 0, "must end in .mp4, .m4v or .mov")),
    ("missing.mp4", "o/missing.mp4", (ItemKind.UNKNOWN, ItemStatus.FAILED, 0, "file not found")),
    ("empty.png", "o/empty.png", (ItemKind.UNKNOWN, ItemStatus.FAILED, 0, "empty.png is empty (0 bytes)")),
    # each bad kind is its item's failure, named before any work (it once raised out of the planner)
    ("loop.png", "o/loop.png", (ItemKind.UNKNOWN, ItemStatus.FAILED, 0, "loop.png is a symbolic link loop")),
    ("photo.png", "o_loop.png", (ItemKind.UNKNOWN, ItemStatus.FAILED, 0, "o_loop.png is a symbolic link loop")),
    ("dir.png", "o/dir.png", (ItemKind.UNKNOWN, ItemStatus.FAILED, 0, "dir.png is a folder, not a file")),
    ("fifo.png", "o/fifo.png", (ItemKind.UNKNOWN, ItemStatus.FAILED, 0, "not a regular file but a named pipe")),
    ("empty.mp4", "o/empty.mp4", (ItemKind.UNKNOWN, ItemStatus.FAILED, 0, "empty.mp4 is empty (0 bytes)")),
    ("photo.png", "o/photo.mp4", (ItemKind.IMAGE, ItemStatus.FAILED, 0, "cannot write images with extension '.mp4'")),
    ("photo.png", "exists.png", (ItemKind.UNKNOWN, ItemStatus.SKIPPED, 0, "")),
    ("photo.png", "../escape.png", (ItemKind.UNKNOWN, ItemStatus.FAILED, 0, "outside the output root")),
]


@pytest.mark.parametrize(("target", "output", "expected"), TABLE, ids=[f"{t}->{o}" for t, o, _ in TABLE])
def test_each_kind_of_item_is_planned(files, target, output, expected, cfg):
    root = files["root"]
    item = JobItem((root / "photo.png",), root / target, root / output)
    plan = plan_job([item], cfg, output_root=root).items[0]
    kind, status, frames, error = expected
    assert (plan.kind, plan.status) == (kind, status), plan.error
    assert error in plan.error
    if status is ItemStatus.PENDING:
        assert plan.expected_frames == frames
        assert not (root / "o").exists()  # the planner makes no folder


def test_a_video_is_planned_as_keyframe_segments_of_its_size(files, cfg):
    plan = plan_job([JobItem((), files["clip"], files["root"] / "o.mp4")], cfg).items[0]
    assert [(s.start_frame, s.frame_count) for s in plan.segments] == [(0, 20), (20, 20)]
    assert plan.frame_hw == (64, 96) and plan.video is not None and plan.video.fps == 25
    assert plan.work_dir.parent.name == "o.mp4.fusion_ray_parts" and len(plan.work_dir.name) == 16


def test_the_parts_key_changes_with_the_settings_and_the_inputs(files, cfg, tmp_path):
    """Finished segments are reused only for the same target, sources, settings and models."""
    clip = tmp_path / "clip.mp4"
    shutil.copyfile(files["clip"], clip)
    source = tmp_path / "face.png"
    shutil.copyfile(files["root"] / "photo.png", source)

    def key(config=cfg, sources=(source,)):
        return plan_job([JobItem(sources, clip, tmp_path / "o.mp4")], config).items[0].parts_key

    first = key()
    assert key() == first  # the same job: its parts are resumed
    threads = cfg.model_copy(update={"engine": cfg.engine.model_copy(
        update={"runtime": cfg.engine.runtime.model_copy(update={"intra_op_threads": 3})})})
    assert key(threads) == first  # threads do not change what is swapped
    blend = cfg.engine.model_copy(update={"swap": cfg.engine.swap.model_copy(update={"swapper": "classic"})})
    changed = {
        "engine": key(cfg.model_copy(update={"engine": blend})),
        "segments": key(cfg.model_copy(update={"pipeline": cfg.pipeline.model_copy(update={"segment_seconds": 2.0})})),
        "encoder": key(cfg.model_copy(update={"pipeline": cfg.pipeline.model_copy(
            update={"encode_options": EncodeOptions(crf=30)})})),
        "sources": key(sources=()),
    }
    source.write_bytes(source.read_bytes() + b"\0")  # a changed source (its size and mtime)
    changed["source file"] = key()
    clip.write_bytes(clip.read_bytes() + b"\0")
    changed["target file"] = key()
    assert first not in changed.values() and len(set(changed.values())) == len(changed), changed


def test_an_image_has_its_real_size(files, cfg):
    root = files["root"]
    plans = plan_job([JobItem((), root / name, root / f"o-{name}") for name in ("photo.png", "alpha.png", "photo.tif")],
                     cfg).items
    assert [p.frame_hw for p in plans] == [(300, 200), (30, 50), (70, 40)]


def test_a_truncated_video_fails_unless_allowed(files, cfg):
    item = JobItem((), files["cut"], files["root"] / "cut-out.mp4")
    refused = plan_job([item], cfg).items[0]
    assert refused.status is ItemStatus.FAILED and "--allow-truncated" in refused.error
    result = refused.result()
    assert result.status == "failed" and result.frames_missing > 0 and not result.warnings
    allowed = plan_job([item], cfg.model_copy(update={"allow_truncated": True})).items[0]
    assert allowed.runs and allowed.shortfall is not None
    assert allowed.expected_frames == allowed.shortfall.present_frames == sum(s.frame_count for s in allowed.segments)
    assert allowed.shortfall.declared_frames == 100
    assert allowed.shortfall.frames_missing == 100 - allowed.expected_frames
    assert allowed.shortfall.missing_from_s == pytest.approx(allowed.expected_frames / 25, abs=1e-6)
    result = allowed.result()
    assert result.status == "pending" and result.frames_missing == 100 - allowed.expected_frames
    assert result.missing_from_s == pytest.approx(allowed.expected_frames / 25, abs=1e-3)
    assert "truncated" in result.warnings[0]


def test_items_are_grouped_by_options_and_bad_options_fail_their_group(files, cfg):
    root = files["root"]
    largest = json.dumps({"selection": {"mode": "largest"}})
    broken = json.dumps({"selection": {"mode": "no_such_mode"}})
    items = [JobItem((), root / "photo.png", root / "g0.png"),
             JobItem((), root / "photo.png", root / "g1.png", options=largest),
             JobItem((), root / "photo.png", root / "g2.png", options=broken),
             JobItem((), root / "clip.mp4", root / "g3.mp4", options=largest),
             JobItem((), root / "missing.png", root / "g4.png", options=largest)]
    plan = plan_job(items, cfg)
    assert [g.members for g in plan.groups] == [(0,), (1, 3)]
    assert plan.groups[1].cfg.engine.selection.mode == "largest" and plan.groups[0].cfg == cfg
    assert plan.items[2].status is ItemStatus.FAILED and "selection.mode" in plan.items[2].error
    assert plan.runs
    assert not plan_job([items[2], items[4]], cfg).runs  # nothing to run: no Ray needed


def test_a_variable_frame_rate_is_a_warning_and_its_timestamps_are_kept(tmp_path, cfg):
    times = [Fraction(i, 25) if i < 10 else Fraction(10, 25) + Fraction(i - 10, 10) for i in range(20)]
    vfr = make_test_video(tmp_path / "vfr.mp4", n_frames=20, frame_times=times, **CLIP)
    plan = plan_job([JobItem((), vfr, tmp_path / "o.mp4")], cfg).items[0]
    assert plan.runs and plan.shortfall is None and plan.frame_times is not None
    assert [Fraction(p - plan.frame_times.pts[0]) * plan.frame_times.time_base for p in plan.frame_times.pts] == times
    assert "variable frame rate" in plan.warnings[0] and plan.result().warnings == list(plan.warnings)
    clip = make_test_video(tmp_path / "cfr.mp4", n_frames=20, **CLIP)
    assert plan_job([JobItem((), clip, tmp_path / "o2.mp4")], cfg).items[0].warnings == ()


def test_force_plans_an_item_whose_output_exists(files, cfg):
    root = files["root"]
    item = JobItem((), root / "photo.png", root / "exists.png")
    assert plan_job([item], cfg).items[0].status is ItemStatus.SKIPPED
    assert plan_job([item], cfg, force=True).items[0].runs


def test_the_swap_command_refuses_a_truncated_video_before_ray_starts(files, capsys):
    import ray

    from fusion_ray.cli import main

    was_running = ray.is_initialized()
    root = files["root"]
    code = main(["swap", "-s", str(root / "photo.png"), "-t", str(files["cut"]), "-o", str(root / "cut-swap.mp4")])
    err = capsys.readouterr().err
    assert code == 2 and "cut.mp4 is truncated" in err and not (root / "cut-swap.mp4").exists()
    assert ray.is_initialized() == was_running  # planned on the driver: no Ray for a refused video


def test_allow_truncated_is_an_option_of_both_commands():
    from fusion_ray.cli import build_parser
    from fusion_ray.cli.common import engine_config_from_args
    from fusion_ray.cli.video import job_config

    for command in (["swap", "-s", "a.png", "-t", "b.mp4", "-o", "c.mp4"], ["job", "--manifest", "m.csv"]):
        args = build_parser().parse_args([*command, "--allow-truncated"])
        assert job_config(args, engine_config_from_args(args)).allow_truncated
        args = build_parser().parse_args(command)
        assert not job_config(args, engine_config_from_args(args)).allow_truncated


def test_an_output_that_is_one_of_its_inputs_fails_at_planning(files, cfg, tmp_path):
    """Even with force, and through a link: the item fails with both names, the others run."""
    root = files["root"]
    (tmp_path / "link.mp4").symlink_to(files["clip"])
    items = [JobItem((root / "photo.png",), files["clip"], tmp_path / "link.mp4"),
             JobItem((root / "photo.png",), root / "photo.tif", root / "photo.png"),
             JobItem((root / "photo.png",), root / "photo.tif", tmp_path / "fine.png")]
    plan = plan_job(items, cfg, force=True)
    assert [p.status for p in plan.items] == [ItemStatus.FAILED, ItemStatus.FAILED, ItemStatus.PENDING]
    assert plan.items[0].error == (f"output {tmp_path / 'link.mp4'} is the same file as target {files['clip']}: "
                                   "refusing to overwrite an input")
    assert plan.items[1].error == (f"output {root / 'photo.png'} is the same file as source {root / 'photo.png'}: "
                                   "refusing to overwrite an input")
    assert plan_job(items[:1], cfg).items[0].status is ItemStatus.FAILED  # not skipped as already done


def test_a_frame_size_the_encoder_refuses_fails_at_planning(tmp_path, cfg):
    odd = make_test_video(tmp_path / "odd.mp4", n_frames=3, **{**CLIP, "size_wh": (65, 47)})
    yuv420 = cfg.pipeline.model_copy(update={"encode_options": EncodeOptions(pix_fmt="yuv420p")})
    items = [JobItem((), odd, tmp_path / "o.mp4")]
    refused = plan_job(items, cfg.model_copy(update={"pipeline": yuv420})).items[0]
    assert refused.status is ItemStatus.FAILED
    assert refused.error.startswith("cannot encode 65x47 frames as yuv420p with libx264")
    assert plan_job(items, cfg).items[0].runs  # auto: 4:4:4 for an odd size


def _clip_in(path, pix_fmt: str, n_frames: int = 3):
    """A small H.264 clip stored in ``pix_fmt`` (PyAV's libx264 writes 4:4:4 and 10-bit)."""
    import av

    with av.open(str(path), "w") as out:
        stream = out.add_stream("libx264", rate=25)
        stream.width, stream.height, stream.pix_fmt = 96, 64, pix_fmt
        for i in range(n_frames):
            frame = av.VideoFrame.from_ndarray(np.full((64, 96, 3), 40 * i, np.uint8), format="bgr24")
            out.mux(stream.encode(frame.reformat(format=pix_fmt)))
        out.mux(stream.encode(None))
    return path


def test_the_encoded_pixel_format_follows_the_source_and_a_loss_is_a_warning(tmp_path, cfg):
    sources = {fmt: _clip_in(tmp_path / f"{fmt}.mp4", fmt) for fmt in ("yuv420p", "yuv444p", "yuv420p10le")}
    plans = plan_job([JobItem((), path, tmp_path / f"o-{fmt}.mp4") for fmt, path in sources.items()], cfg).items
    assert all(p.runs for p in plans)
    assert [p.pix_fmt for p in plans] == ["yuv420p", "yuv444p", "yuv420p"]
    assert [p.result().warnings for p in plans] == [
        [], [], [f"{sources['yuv420p10le']}: yuv420p10le video written as yuv420p: 10-bit samples become 8-bit"]]
    assert plans[2].format_changes == ("yuv420p10le video written as yuv420p: 10-bit samples become 8-bit",)


def test_format_changes_of_images_are_warnings(tmp_path, cfg):
    cv2.imwrite(str(tmp_path / "deep.png"), np.full((20, 30, 3), 40000, np.uint16))
    cv2.imwrite(str(tmp_path / "alpha.png"), np.full((20, 30, 4), 200, np.uint8))
    cv2.imwrite(str(tmp_path / "plain.png"), np.full((20, 30, 3), 90, np.uint8))
    cv2.imwrite(str(tmp_path / "plain.jpg"), np.full((20, 30, 3), 90, np.uint8))
    pairs = [("deep.png", "o-deep.png"), ("alpha.png", "o-alpha.jpg"), ("alpha.png", "o-alpha.png"),
             ("plain.png", "o-plain.jpg"), ("plain.jpg", "o-plain.png")]
    plans = plan_job([JobItem((), tmp_path / t, tmp_path / o) for t, o in pairs], cfg).items
    assert all(p.runs for p in plans)
    assert [p.format_changes for p in plans] == [
        ("16-bit image written as 8-bit",), ("alpha channel dropped: .jpg has none",), (), (), ()]
    assert plans[0].result().warnings == [f"{tmp_path / 'deep.png'}: 16-bit image written as 8-bit"]
    assert plans[0].frame_hw == (20, 30)


def test_a_missing_or_corrupt_model_fails_its_group_at_planning(files, cfg, tmp_path, standin_dir):
    """Before Ray: the group's items fail with the model's error, the other groups run."""
    models = tmp_path / "models"
    shutil.copytree(standin_dir, models)
    swapper = models / "inswapper_128.onnx"
    data = bytearray(swapper.read_bytes())
    data[1000:1100] = b"x" * 100  # its hash record no longer matches
    swapper.write_bytes(bytes(data))
    root = files["root"]
    corrupt = json.dumps({"models": {"models_dir": str(models)}})
    unknown = json.dumps({"models": {"embedder": "no_such_embedder"}})
    items = [JobItem((), root / "photo.png", tmp_path / "a.png", options=corrupt),
             JobItem((), files["clip"], tmp_path / "b.mp4", options=corrupt),
             JobItem((), root / "photo.png", tmp_path / "c.png", options=unknown),
             JobItem((), root / "photo.png", tmp_path / "d.png")]
    plan = plan_job(items, cfg)
    assert [p.status for p in plan.items] == [ItemStatus.FAILED] * 3 + [ItemStatus.PENDING]
    assert [g.members for g in plan.groups] == [(3,)]
    assert plan.items[0].error == plan.items[1].error
    assert plan.items[0].error.startswith(f"ModelIntegrityError: model 'inswapper_128' at {swapper} does not match")
    assert plan.items[2].error.startswith("ModelError: unknown model 'no_such_embedder'")
    assert not plan_job(items[:3], cfg).runs  # nothing to run: Ray is not needed


# Targets in a bucket of the session's moto S3 server (tests/s3_server.py)

REMOTE = ["clip.mp4", "edit.mp4", "cut.mp4", "bad.mp4", "photo.png", "alpha.png", "photo.tif", "empty.png"]


def test_targets_in_a_bucket_are_planned_as_the_same_local_files(files, cfg, s3_server, s3_bucket, tmp_path):
    from fusion_ray.storage import Location

    storage = s3_server.storage()
    for name in REMOTE:
        storage.publish(files["root"] / name, f"s3://{s3_bucket}/in/{name}")
    local = plan_job([JobItem((), files["root"] / n, tmp_path / f"o-{n}") for n in REMOTE], cfg).items
    remote = plan_job([JobItem((), Location.parse(f"s3://{s3_bucket}/in/{n}"), tmp_path / f"o-{n}") for n in REMOTE],
                      cfg, storage=storage).items
    for name, here, there in zip(REMOTE, local, remote, strict=True):
        assert (there.kind, there.status, there.frame_hw, there.segments, there.expected_frames, there.format_changes) \
            == (here.kind, here.status, here.frame_hw, here.segments, here.expected_frames, here.format_changes), name
        assert (there.shortfall, there.frame_times) == (here.shortfall, here.frame_times), name
        assert bool(there.error) == bool(here.error), there.error
        assert there.error.startswith(f"s3://{s3_bucket}/in/{name}") or not there.error, there.error
        if here.video is not None:
            assert there.video is not None and there.video.frame_count == here.video.frame_count
            assert (there.video.fps, there.video.size_wh, there.video.has_audio) == \
                (here.video.fps, here.video.size_wh, here.video.has_audio)


@pytest.mark.parametrize("case", ["missing object", "wrong bucket", "wrong credentials"])
def test_an_unreadable_target_in_a_bucket_fails_its_item_in_one_line(case, files, cfg, s3_server, s3_bucket,
                                                                    tmp_path):
    from fusion_ray.storage import Location, Storage, StorageConfig

    s3_server.storage().publish(files["root"] / "clip.mp4", f"s3://{s3_bucket}/clip.mp4")
    uri, storage, expected = {
        "missing object": (f"s3://{s3_bucket}/none.mp4", s3_server.storage(), "no such file or object"),
        "wrong bucket": ("s3://fr-no-such-bucket/clip.mp4", s3_server.storage(), "no such bucket"),
        "wrong credentials": (f"s3://{s3_bucket}/clip.mp4",
                              Storage(StorageConfig.from_env({**s3_server.env(), "AWS_SECRET_ACCESS_KEY": "wrong"})),
                              "access denied"),
    }[case]
    good = JobItem((), files["clip"], tmp_path / "good.mp4")
    plans = plan_job([JobItem((), Location.parse(uri), tmp_path / "o.mp4"), good], cfg, storage=storage).items
    assert plans[0].status is ItemStatus.FAILED and plans[1].status is ItemStatus.PENDING
    assert plans[0].error.startswith(uri) and expected in plans[0].error and "\n" not in plans[0].error


def test_outputs_in_a_bucket_stay_under_the_root_and_existing_ones_are_skipped(files, cfg, s3_server, s3_bucket):
    from fusion_ray.storage import Location

    storage = s3_server.storage()
    root = Location.parse(f"s3://{s3_bucket}/out")
    storage.write_bytes_atomic(root / "done.png", b"already there")
    photo = files["root"] / "photo.png"
    plans = plan_job([JobItem((), photo, root / "new.png"), JobItem((), photo, root / "done.png"),
                      JobItem((), photo, Location.parse(f"s3://{s3_bucket}/out2/x.png")),
                      JobItem((), photo, files["root"] / "o/local.png"),
                      JobItem((), files["clip"], root / "clip.mkv")], cfg, output_root=root, storage=storage).items
    assert [p.status for p in plans] == [ItemStatus.PENDING, ItemStatus.SKIPPED, ItemStatus.FAILED,
                                         ItemStatus.FAILED, ItemStatus.FAILED]
    assert plans[0].output == root / "new.png" and plans[0].frame_hw == (300, 200)
    assert "outside the output root" in plans[2].error and "outside the output root" in plans[3].error
    assert "must end in .mp4" in plans[4].error
    clip = plan_job([JobItem((), files["clip"], root / "c.mp4")], cfg, output_root=root, storage=storage).items[0]
    assert clip.runs and clip.work_dir == root / "c.mp4.fusion_ray_parts" / clip.parts_key
