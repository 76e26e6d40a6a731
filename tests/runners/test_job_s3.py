"""A job whose manifest, sources and targets are in a bucket of a real S3 API (the session's
moto server, tests/s3_server.py) writes the same outputs as the same job on local files, with
either runner.

The session's Ray cluster started before the test set the AWS variables: the read tasks get
the storage settings from the job (``JobPlan.storage``), not from their environment.
"""

from fractions import Fraction

import cv2
import numpy as np
import pytest

from fusion_ray.config import EngineConfig, RuntimeConfig, SwapConfig
from fusion_ray.imageio import read_image
from fusion_ray.jobs.config import JobConfig, PipelineConfig
from fusion_ray.jobs.manifest import read_manifest
from fusion_ray.runners.job import JobItem, run_job
from fusion_ray.storage import Location
from fusion_ray.video import EncodeOptions, decode_all, make_test_video, probe

pytestmark = pytest.mark.usefixtures("ray_cluster")


@pytest.fixture(scope="module")
def job_cfg(models_config):
    # The classic swapper (the one real swap here), the real SCRFD detector, tracking off (fast).
    engine = EngineConfig(models=models_config, runtime=RuntimeConfig(providers=["cpu"]), tracking=False,
                          swap=SwapConfig(swapper="classic"))
    pipeline = PipelineConfig(segment_seconds=0.5, block_frames=8, progress_bars=False, writers=1,
                              encode_options=EncodeOptions(preset="ultrafast", crf=12), no_progress_timeout_s=120)
    return JobConfig(engine=engine, pipeline=pipeline)


@pytest.fixture(scope="module")
def media(tmp_path_factory, images_dir):
    root = tmp_path_factory.mktemp("media")
    obama = read_image(images_dir / "obama.jpg").frame
    make_test_video(root / "clip.mp4", face_image=obama, n_frames=24, fps=Fraction(25), size_wh=(256, 144), gop=8)
    cv2.imwrite(str(root / "still.png"), cv2.resize(obama, (240, 300)))
    (root / "biden.jpg").write_bytes((images_dir / "biden.jpg").read_bytes())
    return root


@pytest.mark.parametrize("runner", ["ray", "local"])
def test_inputs_in_a_bucket_give_the_outputs_of_local_inputs(runner, media, job_cfg, s3_server, s3_bucket, tmp_path):
    storage = s3_server.storage()
    for name in ("clip.mp4", "still.png", "biden.jpg"):
        storage.publish(media / name, f"s3://{s3_bucket}/data/{name}")
    manifest = ("source,target,output\nbiden.jpg,clip.mp4,clip.mp4\nbiden.jpg,still.png,still.png\n"
                "biden.jpg,missing.mp4,missing.mp4\n")  # relative to the manifest's folder; a missing object fails alone
    storage.write_bytes_atomic(f"s3://{s3_bucket}/data/job.csv", manifest.encode())

    here = tmp_path / "local"
    local = run_job([JobItem((media / "biden.jpg",), media / "clip.mp4", here / "clip.mp4"),
                     JobItem((media / "biden.jpg",), media / "still.png", here / "still.png")],
                    job_cfg, output_root=here, runner=runner)
    there = tmp_path / "from_s3"
    items = read_manifest(f"s3://{s3_bucket}/data/job.csv", there, storage)
    remote = run_job(items, job_cfg, output_root=there, storage=storage, runner=runner)

    assert [i.status for i in local.items] == ["done", "done"], [i.error for i in local.items]
    status = {i.target.rsplit("/", 1)[-1]: (i.status, i.error) for i in remote.items}
    assert status["clip.mp4"][0] == status["still.png"][0] == "done", status
    missing = status["missing.mp4"]
    assert missing[0] == "failed" and missing[1].startswith(f"s3://{s3_bucket}/data/missing.mp4: no such file")
    assert remote.items[0].target == f"s3://{s3_bucket}/data/clip.mp4"

    a, b = probe(here / "clip.mp4"), probe(there / "clip.mp4")
    assert b.frame_count == a.frame_count == 24 and b.fps == a.fps
    assert b.has_audio and a.has_audio and b.audio_duration_s == pytest.approx(a.audio_duration_s, abs=1e-3)
    for x, y in zip(decode_all(here / "clip.mp4"), decode_all(there / "clip.mp4"), strict=True):
        assert np.array_equal(x.frame, y.frame), x.index
    swapped = read_image(there / "still.png").frame
    assert np.array_equal(read_image(here / "still.png").frame, swapped)
    assert not np.array_equal(swapped, read_image(media / "still.png").frame)  # the face was swapped

    # The output root in the bucket: the outputs appear there whole, the parts folder is gone.
    root = Location.parse(f"s3://{s3_bucket}/out")
    items = read_manifest(f"s3://{s3_bucket}/data/job.csv", root, storage)
    assert items[0].output == root / "clip.mp4"
    in_bucket = run_job(items, job_cfg, output_root=root, storage=storage, runner=runner)
    assert [i.status for i in in_bucket.items] == ["done", "done", "failed"], [i.error for i in in_bucket.items]
    assert in_bucket.items[0].output == f"s3://{s3_bucket}/out/clip.mp4"
    assert storage.glob(f"s3://{s3_bucket}/out/**") == [root / "clip.mp4", root / "still.png"]
    fetched = tmp_path / "fetched"
    fetched.mkdir()
    for name in ("clip.mp4", "still.png"):
        (fetched / name).write_bytes(storage.read_bytes(root / name))
    c = probe(fetched / "clip.mp4")
    assert c.frame_count == 24 and c.has_audio and c.audio_duration_s == pytest.approx(a.audio_duration_s, abs=1e-3)
    for x, y in zip(decode_all(here / "clip.mp4"), decode_all(fetched / "clip.mp4"), strict=True):
        assert np.array_equal(x.frame, y.frame), x.index
    assert np.array_equal(read_image(fetched / "still.png").frame, swapped)
    rerun = run_job(items, job_cfg, output_root=root, storage=storage, runner=runner)  # finished outputs in the bucket are skipped
    assert [i.status for i in rerun.items] == ["skipped", "skipped", "failed"]
