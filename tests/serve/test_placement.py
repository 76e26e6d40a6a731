"""Each placement of the chain (fused, split) deploys its own graph, and a fused stream at level 2
swaps every frame it delivers. That both placements give the inline engine's pixels, over HTTP and
for a live frame, is a row of the one equal-outputs table (tests/runners/test_equal_outputs.py).

The classic swapper with the real SCRFD detector (a real swap; no stand-in is involved).
"""

from __future__ import annotations

import asyncio

import cv2
import numpy as np
import pytest
import requests

from fusion_ray.config import EngineConfig, RuntimeConfig, SwapConfig
from fusion_ray.engine import Engine
from fusion_ray.imageio import read_image
from fusion_ray.live.client import register_source, run_stream
from fusion_ray.live.sources import JpegClip
from tests.procs import free_port

pytestmark = pytest.mark.ray

PLACEMENTS = ("fused", "split")
DEPLOYMENTS = {"fused": {"Fused", "ServiceState"}, "split": {"Detector", "Swapper", "ServiceState"}}


@pytest.fixture(scope="module")
def apps(ray_cluster, models_config):
    """One app per placement, under route prefixes /fused and /split."""
    from ray import serve

    from fusion_ray.serve.app import build_app

    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    try:
        for placement in PLACEMENTS:
            args = {
                "placement": placement,
                "engine": {"models": models_config.model_dump(mode="json"), "runtime": {"providers": ["cpu"]},
                           "swap": {"swapper": "classic"}},
                "deployments": {"ingress": {"num_cpus": 0.1}, "detector": {"num_cpus": 0.1},
                                "swapper": {"num_cpus": 0.05}, "fused": {"num_cpus": 0.1, "cpu_budget": 1},
                                "enhancer_enabled": False, "state": {"num_cpus": 0.05}},
                "auth": {"token": None, "token_env": None, "metrics_public": True},
                "live": {"deadline_ms": 5000},
            }
            serve.run(build_app(args), name=f"fusion_ray_{placement}", route_prefix=f"/{placement}")
        yield {p: f"http://127.0.0.1:{port}/{p}" for p in PLACEMENTS}
    finally:
        serve.shutdown()


@pytest.fixture(scope="module")
def engine(models_config):
    cfg = EngineConfig(models=models_config, runtime=RuntimeConfig(providers=["cpu"]), swap=SwapConfig(swapper="classic"))
    return Engine.load(cfg, components=["detector"], cpu_budget=1)


@pytest.mark.parametrize("placement", PLACEMENTS)
def test_each_placement_deploys_its_own_graph(placement, apps):
    ready = requests.get(f"{apps[placement]}/readyz", timeout=60)
    assert ready.status_code == 200, ready.text
    assert set(ready.json()["deployments"]) == DEPLOYMENTS[placement]


@pytest.fixture(scope="module")
def fused_level2(apps, models_config):
    """A fused app whose streams step straight down to level 2 and stay there: detection on every 3rd
    frame, the stream's follower carried to the fused replica with each frame and back."""
    from ray import serve

    from fusion_ray.serve.app import build_app

    args = {
        "placement": "fused",
        "engine": {"models": models_config.model_dump(mode="json"), "runtime": {"providers": ["cpu"]},
                   "swap": {"swapper": "classic"}},
        "deployments": {"ingress": {"num_cpus": 0.05}, "fused": {"num_cpus": 0.05, "cpu_budget": 1},
                        "enhancer_enabled": False, "state": {"num_cpus": 0.05}},
        "auth": {"token": None, "token_env": None, "metrics_public": True},
        "live": {"deadline_ms": 3000, "stats_interval_s": 0.2,
                 "ladder": {"allowed_levels": [0, 2], "degrade_latency": 0.001, "recover_latency": 0.001,
                            "degrade_after_s": 0.2, "recover_after_s": 600, "detect_every": 3}},
    }
    serve.run(build_app(args), name="fusion_ray_fused_level2", route_prefix="/fused_l2")
    return apps["fused"].replace("/fused", "/fused_l2")


def test_a_fused_stream_at_level_2_swaps_every_frame_it_delivers(fused_level2, images_dir, engine, tmp_path):
    """Level 2 through the fused replica never delivers a face left unswapped or pasted elsewhere (that
    the follower crosses to the replica and back and follows there: tests/core/test_frames.py)."""
    from fractions import Fraction

    from fusion_ray.live.sources import encode_frame
    from fusion_ray.video.decode import decode_all
    from fusion_ray.video.synthetic import make_test_video

    clip = make_test_video(tmp_path / "clip.mp4", face_image=read_image(images_dir / "biden.jpg").frame, n_frames=24,
                           fps=Fraction(30), audio=False)
    frames = [d.frame for d in decode_all(clip)] * 2
    jpegs = [encode_frame(f, 90) for f in frames]
    source = register_source(fused_level2, (images_dir / "obama.jpg").read_bytes(), "obama.jpg")
    got: dict[int, bytes] = {}
    report = asyncio.run(run_stream(fused_level2.replace("http://", "ws://") + "/v1/stream", {"source_id": source},
                                    JpegClip(jpegs, fps=6, loop=False), drain_s=10.0,
                                    on_result=lambda seq, image: got.__setitem__(seq, image)))
    assert any(stats["level"] == 2 for stats in report.stats)
    late = [seq for seq in report.received_seqs if seq >= 24]  # well after the step down
    assert len(late) >= 3
    for seq in late:  # the face changed (swapped, detected or followed), the rest did not
        sent = cv2.imdecode(np.frombuffer(jpegs[seq], np.uint8), cv2.IMREAD_COLOR)
        out = cv2.imdecode(np.frombuffer(got[seq], np.uint8), cv2.IMREAD_COLOR)
        diff = np.abs(sent.astype(np.int16) - out.astype(np.int16)).mean(axis=2)
        x0, y0, x1, y1 = (int(v) for v in max(engine.detect(sent), key=lambda f: f.area).bbox_xyxy)
        inside = np.zeros(diff.shape, bool)
        inside[y0:y1, x0:x1] = True
        assert diff[inside].mean() > 4 * diff[~inside].mean() and diff[~inside].mean() < 3, seq
