"""Image targets in a Ray Data job: a photo stored sideways is swapped upright with the turn
recorded; animated GIF and APNG targets are swapped frame by frame and stay animated."""

from pathlib import Path

import cv2
import pytest
from PIL import Image

from fusion_ray.imageio import FORMAT_CHANGES_KEY, read_image
from fusion_ray.jobs.config import JobConfig
from fusion_ray.runners.job import JobItem, run_job
from tests.animated import assert_every_frame_swapped
from tests.cli.test_swap_cli import face_animation
from tests.test_imageio import sideways_jpeg

pytestmark = pytest.mark.usefixtures("ray_cluster")


def test_a_sideways_photo_is_swapped_upright_and_the_turn_is_recorded(images_dir, job_cfg, tmp_path):
    """A target and a source stored sideways with EXIF orientation 6: read upright (the job's
    read tasks and the driver's source embedding share the one decoder), written upright."""
    target, source = tmp_path / "target.jpg", tmp_path / "source.jpg"
    upright = cv2.resize(read_image(images_dir / "obama.jpg").frame, (320, 400))
    target.write_bytes(sideways_jpeg(upright))
    source.write_bytes(sideways_jpeg(read_image(images_dir / "biden.jpg").frame))
    out = tmp_path / "out"
    report = run_job([JobItem((source,), target, out / "out.png")], job_cfg, output_root=out)
    (item,) = report.items
    change = "EXIF orientation 6 applied: written upright, with no orientation tag"
    assert (item.status, item.warnings) == ("done", [f"{target}: {change}"]), item.error
    assert read_image(out / "out.png").frame.shape == (400, 320, 3)
    assert Image.open(out / "out.png").info[FORMAT_CHANGES_KEY] == change


@pytest.mark.parametrize("on_driver", [None, 0], ids=["planned on the driver", "planned in ray tasks"])
def test_animated_images_are_swapped_frame_by_frame_and_kept_animated(on_driver, images_dir, job_cfg, tmp_path):
    """An animated GIF and an APNG come back with every frame swapped, their durations and
    loop count (once 1 frame, silently); one named .jpg fails at planning, naming the format."""
    if on_driver is not None:
        job_cfg = JobConfig(engine=job_cfg.engine, pipeline=job_cfg.pipeline.model_copy(update={"plan_on_driver": 0}))
    gif, apng = tmp_path / "anim.gif", tmp_path / "anim.png"
    gif.write_bytes(face_animation(images_dir, "GIF"))
    apng.write_bytes(face_animation(images_dir, "PNG"))
    out = tmp_path / "out"
    source = (images_dir / "biden.jpg",)
    items = [JobItem(source, gif, out / "anim.gif"), JobItem(source, apng, out / "anim.png"),
             JobItem(source, gif, out / "anim.jpg")]
    report = run_job(items, job_cfg, output_root=out)
    statuses = {Path(item.output).name: item for item in report.items}
    assert statuses["anim.jpg"].status == "failed" and "'.jpg' holds one frame" in statuses["anim.jpg"].error
    for name in ("anim.gif", "anim.png"):
        item = statuses[name]
        assert (item.status, item.frames, item.faces_swapped) == ("done", 3, 3), item.error
        assert_every_frame_swapped(tmp_path / name, out / name, [40, 80, 120])
    assert "frames written as GIF: at most 256 colours each" in statuses["anim.gif"].warnings[0]

