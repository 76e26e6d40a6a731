"""Planning in the read tasks (no Ray): per item its info, posted to the driver beside the stream,
then its units to decode; images grouped by bytes; a video's finished segments resumed, not
decoded again; the decoded stream holds frames only."""

from fractions import Fraction

import cv2
import numpy as np
import pytest

from fusion_ray.config import EngineConfig
from fusion_ray.jobs.config import JobConfig, PipelineConfig
from fusion_ray.jobs.parts import SegmentCounts
from fusion_ray.jobs.plan import JobItem, plan_job
from fusion_ray.runners.ray.datasource import FRAME_COLUMNS, unpack
from fusion_ray.runners.ray.stream import GroupContext, decode_units, plan_items
from fusion_ray.video import make_test_video


@pytest.fixture
def job(tmp_path, models_config):
    clip = make_test_video(tmp_path / "clip.mp4", face_image=None, n_frames=30, fps=Fraction(25), size_wh=(64, 48),
                           audio=False, gop=10)
    for n in range(3):
        cv2.imwrite(str(tmp_path / f"p{n}.png"), np.full((40, 50, 3), 60 * n, np.uint8))
    cfg = JobConfig(engine=EngineConfig(models=models_config),
                    pipeline=PipelineConfig(segment_seconds=0.3, plan_on_driver=0, image_task_mb=0.012))
    items = [JobItem((tmp_path / "p0.png",), clip, tmp_path / "out" / "clip.mp4"),
             *(JobItem((tmp_path / "p0.png",), tmp_path / f"p{n}.png", tmp_path / "out" / f"o{n}.png")
               for n in range(3)),
             JobItem((tmp_path / "p0.png",), tmp_path / "missing.mp4", tmp_path / "out" / "m.mp4")]
    plan = plan_job(items, cfg, output_root=tmp_path / "out")
    (group,) = plan.groups
    ctx = GroupContext(cfg, group.models_fingerprint, {n: "s0" for n in range(5)}, {"Software": "test"},
                       output_root=tmp_path / "out")
    return plan, ctx


def _rows(plan, ctx):
    """(item, info, units) per item info posted and per unit row."""
    posted = []
    (block,) = list(plan_items(plan.items, ctx, posted.extend))
    rows = block.to_pydict()
    assert set(rows) == {"item", "units"}  # the plans are not in the stream
    infos = [(n, unpack(i), None) for n, i in posted]
    return infos + [(n, None, unpack(u).units) for n, u in zip(rows["item"], rows["units"], strict=True) if u]


def test_each_item_has_an_info_row_then_its_units(job):
    plan, ctx = job
    rows = _rows(plan, ctx)
    infos = {n: info.plan for n, info, _ in rows if info is not None}
    assert sorted(infos) == [0, 1, 2, 3, 4]
    assert infos[0].kind.value == "video" and infos[0].parts_key and infos[0].frame_times is None  # compact
    assert infos[4].status.value == "failed" and "file not found" in infos[4].error
    segments = [u[0].segment.index for n, _, u in rows if u is not None and u[0].segment is not None]
    assert segments == [0, 1, 2]
    images = [[x.item for x in u] for _, _, u in rows if u is not None and u[0].segment is None]
    assert sorted(i for g in images for i in g) == [1, 2, 3] and len(images) == 2  # 0.012 MB per task: 2 + 1
    assert (plan.items[0].output.parent).is_dir()  # the plan task made the output folder


def test_finished_segments_are_resumed_and_not_decoded(job):
    plan, ctx = job
    info = next(i for n, i, _ in _rows(plan, ctx) if n == 0 and i is not None)
    work_dir = info.plan.work_dir
    (work_dir / "segment_00001.json").write_bytes(SegmentCounts(2, 5, "swap: boom").to_json())
    (work_dir / "segment_00001.mp4").write_bytes(b"finished earlier")
    (work_dir / ".segment_00002.mp4.partial").write_bytes(b"cut off by a kill")
    (work_dir / "segment_00000.mp4").write_bytes(b"no counts beside it: not reused")
    stale = work_dir.parent / "0000000000000000"
    stale.mkdir()
    (stale / "segment_00000.mp4").write_bytes(b"other settings")
    rows = _rows(plan, ctx)
    info = next(i for n, i, _ in rows if n == 0 and i is not None)
    assert list(info.resumed) == [1] and info.resumed[1].path.endswith("segment_00001.mp4")
    assert info.resumed[1].counts == SegmentCounts(2, 5, "swap: boom")  # as the run that made it counted
    assert [u[0].segment.index for n, _, u in rows if n == 0 and u is not None] == [0, 2]
    assert stale.is_dir()  # other keys stay until the video is joined (a key changed by mistake loses nothing)


def test_every_decoded_block_holds_frames_only(job):
    plan, ctx = job
    posted = []
    (block,) = list(plan_items(plan.items, ctx, posted.extend))
    batch = {k: np.asarray(v, dtype=object) if k != "item" else np.asarray(v)
             for k, v in block.to_pydict().items()}
    out = [b.to_pydict() for b in decode_units(batch, block_frames=4, block_mb=8.0, tracking=None,
                                               storage=ctx.storage)]
    assert sorted(n for n, _ in posted) == [0, 1, 2, 3, 4]  # every item's plan, beside the stream
    for b in out:  # no planning row: each row a decoded frame (the missing item has none)
        assert set(b) == set(FRAME_COLUMNS) and len(b["item"]) <= 4
        assert all(e == "" and np.asarray(f).ndim == 3 and np.asarray(f).size > 12 for e, f in
                   zip(b["error"], b["frame"], strict=True))
    frames = [(n, i) for b in out for n, i in zip(b["item"], b["index"], strict=True)]
    assert len(frames) == 30 + 3 and sorted(frames) == [(0, i) for i in range(30)] + [(1, 0), (2, 0), (3, 0)]
