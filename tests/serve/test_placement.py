"""Each placement of the chain (fused, split) deploys its own graph, gives the inline engine's pixels
under FaceFusion's per-request options (HTTP form fields and the live start message), refuses what
is over its caps, and a fused stream at level 3 swaps every frame it delivers. That both placements
give the inline engine's pixels without options, over HTTP and for a live frame, is a row of the
one equal-outputs table (tests/runners/test_equal_outputs.py).

The classic swapper with the real SCRFD detector (a real swap; no stand-in is involved).
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass

import cv2
import numpy as np
import pytest
import requests

from fusion_ray.config import EngineConfig, RuntimeConfig, SwapConfig
from fusion_ray.core.facefusion_options import FaceFusionOptions, configured
from fusion_ray.imageio import read_image
from fusion_ray.live.client import register_source, run_stream
from fusion_ray.live.frame_sources import JpegClip
from fusion_ray.live.media import encode_jpeg
from fusion_ray.runners.inline import Engine
from fusion_ray.serve.metrics import parse_exposition
from tests.procs import free_port

pytestmark = pytest.mark.ray

PLACEMENTS = ("fused", "split")
DEPLOYMENTS = {"fused": {"Fused", "ServiceState"}, "split": {"Detector", "Swapper", "ServiceState"}}


BOX = (("face_mask_padding", "20 5 0 5"), ("face_mask_blur", 0.6), ("face_mask_types", "box"))
"""Per-request options both placements run (tests/serve/test_quality.py: what split refuses)."""


@dataclass(frozen=True)
class Case:
    placement: str
    surface: str  # "http" (POST /v1/swap, PNG) or "live" (one frame of a /v1/stream stream, JPEG)
    target: str   # a photo of the shared assets
    select: str = "all"
    options: tuple[tuple[str, object], ...] = ()  # FaceFusion's options, as form fields and in the start message


CASES = [  # the same pixels without options: tests/runners/test_equal_outputs.py's serve rows
    Case("fused", "http", "obama_and_biden", options=BOX),
    Case("split", "http", "obama_and_biden", options=BOX),
    Case("fused", "live", "biden", options=BOX),
    Case("split", "live", "biden", options=BOX),
]


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


@pytest.fixture(scope="module")
def sources(apps, images_dir):
    photo = (images_dir / "obama.jpg").read_bytes()
    return {p: register_source(base, photo, "obama.jpg") for p, base in apps.items()}


LIVE_SIDE = 960  # live frames are camera-sized: the photos are scaled to this longest side


def _target(images_dir, case: Case) -> np.ndarray:
    frame = read_image(images_dir / f"{case.target}.jpg").frame
    if case.surface != "live":
        return frame
    scale = LIVE_SIDE / max(frame.shape[:2])
    return cv2.resize(frame, (round(frame.shape[1] * scale), round(frame.shape[0] * scale)),
                      interpolation=cv2.INTER_AREA)


def _inline(engine: Engine, images_dir, case: Case) -> np.ndarray:
    cfg = engine.cfg.model_copy(update={"selection": engine.cfg.selection.model_copy(update={"mode": case.select})})
    cfg = configured(cfg, FaceFusionOptions.model_validate(dict(case.options)))
    inline = Engine(cfg, engine.models)
    identity = inline.prepare_source([read_image(images_dir / "obama.jpg").frame])
    return inline.process_frame(_target(images_dir, case), identity).frame


def _http(base: str, source_id: str, target: bytes, case: Case) -> np.ndarray:
    response = requests.post(f"{base}/v1/swap", files=[("target", ("t.jpg", target, "image/jpeg"))],
                             data={"source_id": source_id, "format": "png", "select": case.select,
                                   **dict(case.options)}, timeout=120)
    assert response.status_code == 200, response.text
    return cv2.imdecode(np.frombuffer(response.content, np.uint8), cv2.IMREAD_COLOR)


def _live(base: str, source_id: str, target: np.ndarray, case: Case) -> np.ndarray:
    got: list[bytes] = []
    frame = cv2.imencode(".png", target)[1].tobytes()
    start = {"source_id": source_id, "select": case.select, "quality": 100, "deadline_ms": 5000, **dict(case.options)}
    report = asyncio.run(run_stream(base.replace("http://", "ws://") + "/v1/stream", start,
                                    JpegClip([frame], fps=2, loop=False), on_result=lambda seq, image: got.append(image),
                                    drain_s=60.0))
    assert report.received == 1, (report.dropped, report.errors)
    return cv2.imdecode(np.frombuffer(got[0], np.uint8), cv2.IMREAD_COLOR)


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c.placement}-{c.surface}-{c.target}-{c.select}"
                         f"{'-options' if c.options else ''}")
def test_every_placement_gives_the_inline_engines_pixels(case, apps, sources, engine, images_dir):
    expected = _inline(engine, images_dir, case)
    assert not np.array_equal(expected, _target(images_dir, case))  # a visible swap
    base, source_id = apps[case.placement], sources[case.placement]
    if case.surface == "http":
        got = _http(base, source_id, (images_dir / f"{case.target}.jpg").read_bytes(), case)
    else:
        got = _live(base, source_id, _target(images_dir, case), case)
        expected = cv2.imdecode(np.frombuffer(encode_jpeg(expected, 100), np.uint8), cv2.IMREAD_COLOR)
    assert got.shape == expected.shape and np.array_equal(got, expected)
    if case.options:  # the options changed the pixels
        assert not np.array_equal(expected, _inline(engine, images_dir, Case(case.placement, "http", case.target)))


@pytest.mark.parametrize("placement", PLACEMENTS)
def test_each_placement_deploys_its_own_graph(placement, apps):
    ready = requests.get(f"{apps[placement]}/readyz", timeout=60)
    assert ready.status_code == 200, ready.text
    assert set(ready.json()["deployments"]) == DEPLOYMENTS[placement]


def test_the_fused_placement_reports_each_steps_busy_time_in_metrics(apps, sources, images_dir):
    base = apps["fused"]
    _http(base, sources["fused"], (images_dir / "obama_and_biden.jpg").read_bytes(), Case("fused", "http", "x"))
    samples = parse_exposition(requests.get(f"{base}/metrics", timeout=30).text)
    busy = {lab["step"]: v for lab, v in samples["fusion_ray_step_seconds_sum"]}
    ran = {"detect", "select", "align", "swap", "mask", "paste"}
    assert ran <= set(busy) and all(busy[step] > 0 for step in ran), busy
    assert not {"landmark", "area_mask", "mouth_mask", "occlusion_mask", "region_mask"} & set(busy)  # not configured


@pytest.fixture(scope="module")
def fused_level2(apps, models_config):
    """A fused app whose streams step straight down to level 3 (detect_every_k) and stay there: detection on every 3rd
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
                 "ladder": {"allowed_levels": [0, 3], "degrade_latency": 0.001, "recover_latency": 0.001,
                            "degrade_after_s": 0.2, "recover_after_s": 600, "detect_every": 3}},
    }
    serve.run(build_app(args), name="fusion_ray_fused_level2", route_prefix="/fused_l2")
    return apps["fused"].replace("/fused", "/fused_l2")


def test_a_fused_stream_at_level_3_swaps_every_frame_it_delivers(fused_level2, images_dir, engine, tmp_path):
    """Level 3 (detect_every_k) through the fused replica never delivers a face left unswapped or pasted elsewhere (that
    the follower crosses to the replica and back and follows there: tests/core/test_frames.py)."""
    from fractions import Fraction

    from fusion_ray.live.frame_sources import encode_frame
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
    assert any(stats["level"] == 3 for stats in report.stats)
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


# ------------------------------------------------------------ FaceFusion's options, caps
@pytest.fixture(scope="module")
def capped(apps, models_config, images_dir):
    """One app per placement with dlib's 68-point landmarker, caps (pixel boost 128, no enhancer) and
    the detector at FP32 (as the command below runs it)."""
    pytest.importorskip("dlib", reason="the dlib_68 landmarker needs the [landmarks] extra")
    from ray import serve

    from fusion_ray.serve.app import build_app

    models = {**models_config.model_dump(mode="json"), "precision": {"detector": "fp32"}}
    found = {}
    for placement in PLACEMENTS:
        args = {
            "placement": placement,
            "engine": {"models": models, "runtime": {"providers": ["cpu"]}, "swap": {"swapper": "classic"},
                       "landmarker": {"model": "dlib_68"}},
            "deployments": {"ingress": {"num_cpus": 0.05}, "fused": {"num_cpus": 0.05, "cpu_budget": 1},
                            "detector": {"num_cpus": 0.05}, "swapper": {"num_cpus": 0.05},
                            "enhancer_enabled": False, "state": {"num_cpus": 0.05}},
            "limits": {"max_pixel_boost": 128, "enhancer_allowed": False},
            "auth": {"token": None, "token_env": None, "metrics_public": True},
            "live": {"deadline_ms": 5000},
        }
        serve.run(build_app(args), name=f"fusion_ray_capped_{placement}", route_prefix=f"/capped_{placement}")
        base = apps["fused"].replace("/fused", f"/capped_{placement}")
        found[placement] = base, register_source(base, (images_dir / "obama.jpg").read_bytes(), "obama.jpg")
    return found


@pytest.mark.parametrize("placement", PLACEMENTS)
def test_a_form_with_area_masks_gives_the_pixels_of_the_swap_command(placement, capped, images_dir, scrfd_path,
                                                                     tmp_path):
    """POST /v1/swap with --face-mask-types box area (dlib_68, FaceFusion's option names as form
    fields) equals `fusion-ray swap` with the same options, in both placements: the classic swap,
    the real detector."""
    from fusion_ray.cli import main

    base, source_id = capped[placement]
    target = images_dir / "obama_and_biden.jpg"
    fields = [("face_mask_types", "box"), ("face_mask_types", "area"), ("face_mask_areas", "lower-face mouth"),
              ("face_mask_blur", "0.5"), ("face_landmarker_score", "0.3")]
    response = requests.post(f"{base}/v1/swap", files=[("target", ("t.jpg", target.read_bytes(), "image/jpeg"))],
                             data=[("source_id", source_id), ("format", "png"), *fields], timeout=120)
    assert response.status_code == 200, response.text
    got = cv2.imdecode(np.frombuffer(response.content, np.uint8), cv2.IMREAD_COLOR)
    out = tmp_path / "cli.png"
    code = main(["swap", "--swapper", "classic", "--model", f"scrfd_2.5g={scrfd_path}", "--models-dir", str(tmp_path),
                 "--precision", "detector=fp32", "--source", str(images_dir / "obama.jpg"), "--target", str(target),
                 "-o", str(out), "--face-mask-types", "box", "area", "--face-mask-areas", "lower-face", "mouth",
                 "--face-mask-blur", "0.5", "--face-landmarker-score", "0.3", "--face-landmarker-model", "dlib_68"])
    assert code == 0
    expected = read_image(out).frame
    assert np.array_equal(got, expected)
    plain = requests.post(f"{base}/v1/swap", files=[("target", ("t.jpg", target.read_bytes(), "image/jpeg"))],
                          data={"source_id": source_id, "format": "png"}, timeout=120)
    assert not np.array_equal(cv2.imdecode(np.frombuffer(plain.content, np.uint8), cv2.IMREAD_COLOR), got)


@pytest.mark.parametrize(("fields", "status", "code", "words"), [
    ({"face_swapper_pixel_boost": "256x256"}, 403, "over_cap", "limits.max_pixel_boost=128"),
    ({"face_enhancer_blend": "50"}, 403, "over_cap", "limits.enhancer_allowed=false"),
    ({"face_mask_types": "box occlusion"}, 403, "over_cap", "limits.mask_models_allowed=[]"),
    ({"face_mask_types": "box ears"}, 422, "invalid_option", "face_mask_types"),
    ({"face_swapper_model": "inswapper_128"}, 422, "model_not_served", "this service runs 'classic'"),
])
def test_a_form_over_a_cap_or_with_a_bad_value_is_refused(capped, images_dir, fields, status, code, words):
    base, source_id = capped["fused"]
    target = (images_dir / "biden.jpg").read_bytes()
    response = requests.post(f"{base}/v1/swap", files=[("target", ("t.jpg", target, "image/jpeg"))],
                             data={"source_id": source_id, **fields}, timeout=120)
    assert response.status_code == status, response.text
    assert response.json()["error"] == code and words in response.json()["detail"]


def test_a_live_start_over_a_cap_is_refused_with_a_close_code(capped):
    from websockets.asyncio.client import connect

    base, source_id = capped["split"]

    async def start(message: dict) -> tuple[dict, int | None]:
        async with connect(base.replace("http://", "ws://") + "/v1/stream") as conn:
            await conn.send(json.dumps(message))
            event = json.loads(await conn.recv())
            await conn.wait_closed()
            return event, conn.close_code

    event, code = asyncio.run(start({"source_id": source_id, "face_swapper_pixel_boost": "512x512"}))
    assert (event["type"], event["code"], code) == ("error", "over_cap", 1008)
    assert event["message"] == "face_swapper_pixel_boost 512x512 is over this service's cap limits.max_pixel_boost=128"
    event, code = asyncio.run(start({"source_id": source_id, "face_mask_blur": 3}))
    assert (event["code"], code) == ("malformed_start", 1003) and "face_mask_blur" in event["message"]
