"""Scale-out: the job on a real two-node Ray cluster (``ray.cluster_utils.Cluster``: a head and
a worker raylet, one CPU each) gives the same output as on one node, with the work spread over
both nodes. The classic swapper (a real swap), the real SCRFD detector, faces tracked in the
read tasks (the default), a clip with an AAC track.

The runs happen in a subprocess (tests/runners/ray/multinode_job.py): this process may already be
connected to the session's Ray instance, and a process connects to one cluster only. The fused
pool's two actors ask for 0.6 CPU each, so they cannot share a one-CPU node: one must run on
the worker. The encoder runs with one thread, so that x264 is deterministic whatever a node's
core count, and the outputs are compared pixel for pixel (they come out byte-identical).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import numpy as np
import pytest

from fusion_ray.config import EngineConfig, RuntimeConfig, SwapConfig
from fusion_ray.imageio import read_image
from fusion_ray.jobs.config import JobConfig, PipelineConfig, StageResources
from fusion_ray.video import EncodeOptions, decode_all, make_test_video, probe

pytestmark = pytest.mark.ray

FRAMES = 40
GOP = 10  # 4 keyframe segments of 0.4 s at 25 fps (segment_seconds 0.3)
SCRIPT = Path(__file__).with_name("multinode_job.py")
TIMEOUT_S = 240
FUSED = "MapWorker(MapBatches(FusedStage))"


def _job_config(models_config: Any) -> JobConfig:
    engine = EngineConfig(models=models_config, runtime=RuntimeConfig(providers=["cpu"]),
                          swap=SwapConfig(swapper="classic"))
    pipeline = PipelineConfig(
        segment_seconds=0.3, block_frames=5, read_tasks=2, progress_bars=False, object_store_mb=64,
        # two fused actors of 0.6 CPU: one per node (a node has 1 CPU)
        detect=StageResources(num_cpus=0.6, min_actors=2, max_actors=2, batch_size=5, threads=1),
        encode_options=EncodeOptions(preset="ultrafast", crf=12, threads=1),
        no_progress_timeout_s=60, actor_start_timeout_s=60)
    return JobConfig(engine=engine, pipeline=pipeline)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, images_dir: Path, models_config: Any) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("multinode")
    clip = make_test_video(root / "clip.mp4", face_image=read_image(images_dir / "obama.jpg").frame,
                           n_frames=FRAMES, fps=Fraction(25), size_wh=(256, 144), gop=GOP, audio=True)
    spec = {"config": _job_config(models_config).model_dump_json(),
            "items": [[[str(images_dir / "biden.jpg")], str(clip), "clip.mp4"]],
            "single_root": str(root / "single"), "cluster_root": str(root / "cluster"),
            "summary": str(root / "summary.json")}
    (root / "spec.json").write_text(json.dumps(spec))
    _run_script(root / "spec.json")
    summary = json.loads((root / "summary.json").read_text())
    return {**summary, "clip": clip, "outputs": {run: root / run / "clip.mp4" for run in ("single", "cluster")}}


def _run_script(spec: Path) -> None:
    """The two runs in a subprocess (its own process group: a hung run is killed with its Ray)."""
    # task events (what ran where) reach the state API every 0.1 s, before an actor is stopped
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["RAY_task_events_report_interval_ms"] = "100"
    proc = subprocess.Popen([sys.executable, str(SCRIPT), str(spec)], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env, start_new_session=True)
    try:
        output, _ = proc.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        pytest.fail(f"the runs took over {TIMEOUT_S} s:\n{output[-4000:]}")
    assert proc.returncode == 0, output[-4000:]


def _audio_packets(path: Path) -> list[tuple[int | None, bytes]]:
    with av.open(str(path)) as container:
        return [(p.pts, bytes(p)) for p in container.demux(container.streams.audio[0]) if p.size]


def test_both_runs_swap_the_clip(runs):
    for run in ("single", "cluster"):
        (item,) = runs[run]["items"]
        assert item["status"] == "done", item["error"]
        assert item["frames"] == FRAMES and item["faces_swapped"] == FRAMES
    source = [f.frame.astype(np.float32) for f in decode_all(runs["clip"])]
    swapped = [f.frame.astype(np.float32) for f in decode_all(runs["outputs"]["cluster"])]
    # a real swap changes the frames (more than coding noise), the clip is not passed through
    assert min(float(np.abs(a - b).mean()) for a, b in zip(source, swapped, strict=True)) > 1.0


def test_the_cluster_output_equals_the_single_node_output(runs):
    single, cluster = runs["outputs"]["single"], runs["outputs"]["cluster"]
    a, b = probe(single), probe(cluster)
    assert a.frame_count == b.frame_count == FRAMES and a.fps == b.fps == Fraction(25)
    assert a.has_audio and b.has_audio and a.audio_codec == b.audio_codec == "aac"
    assert a.audio_duration_s == b.audio_duration_s
    # the same audio stream: the source's packets, copied
    assert _audio_packets(cluster) == _audio_packets(single) == _audio_packets(runs["clip"])
    for i, (x, y) in enumerate(zip(decode_all(single), decode_all(cluster), strict=True)):
        assert np.array_equal(x.frame, y.frame), f"frame {i} differs"


def _task_nodes(cluster: dict[str, Any], name: str) -> set[str]:
    return {t["node_id"] for t in cluster["tasks"] if t["name"] == name}


def test_the_work_ran_on_both_nodes(runs):
    cluster = runs["cluster"]
    head, worker = cluster["head"], cluster["worker"]
    assert head != worker and set(cluster["nodes"]) == {head, worker}
    actors: dict[str, list[str]] = {}
    for actor in cluster["actors"]:
        actors.setdefault(actor["class_name"], []).append(actor["node_id"])
    # the fused pool's two actors cannot share a one-CPU node, and each processed frames
    assert sorted(actors[FUSED]) == sorted([head, worker])
    assert _task_nodes(cluster, f"{FUSED}.submit") == {head, worker}
    # one segment writer per segment decoded at once (read_tasks 2, of 4 segments), spread over
    # the nodes; each encoded frames
    assert sorted(actors["SegmentWriter"]) == sorted([head, worker])
    assert _task_nodes(cluster, "SegmentWriter.push") == {head, worker}
