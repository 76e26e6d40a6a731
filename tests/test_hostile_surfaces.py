"""Hostile inputs on the other surfaces: job manifests (their options column, and ``job --runner
local`` in this process), ``POST /v1/swap``'s option check, the live start message (parsed and
opened on the in-process backend), ``POST /v1/sources`` on the in-process host, and ``live
--output``'s check. Each case: its status or error code, and that nothing was written."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from fusion_ray.cli import main
from fusion_ray.cli.common import check_stream_output
from fusion_ray.config import EngineConfig, RuntimeConfig, SwapConfig
from fusion_ray.core.facefusion_options import FaceFusionOptions
from fusion_ray.errors import ConfigError, InputError
from fusion_ray.imageio import read_image
from fusion_ray.jobs.config import JobConfig, with_overrides
from fusion_ray.live.backend import StreamRefused
from fusion_ray.live.local import EngineBackend, local_hub
from fusion_ray.live.localhost import LocalServer
from fusion_ray.live.protocol import ProtocolError, StartMessage, parse_start
from fusion_ray.runners.inline import Engine
from fusion_ray.serve.limits import ApiError
from fusion_ray.serve.quality import request_quality
from fusion_ray.serve.settings import parse_settings
from tests.hostile import make_kit, snapshot

UNUSED = [  # one rule on every surface: (id, options, words)
    ("occluder_without_occlusion", {"face_occluder_model": "xseg_1"}, "occlusion mask"),
    ("parser_without_region", {"face_parser_model": "bisenet_resnet_34"}, "region mask"),
    ("regions_without_region", {"face_mask_regions": ["skin"]}, "region mask"),
    ("areas_without_area", {"face_mask_areas": ["mouth"]}, "area mask"),
    ("enhancer_weight_no_enhancer", {"face_enhancer_weight": 0.9}, "not enhanced"),
    ("landmarker_score_no_landmarker", {"face_landmarker_score": 0.7}, "face_landmarker_model 'none'"),
]
BOOLEANS = [("face_swapper_weight", True), ("face_mask_blur", False), ("face_enhancer_blend", True),
            ("face_landmarker_score", True), ("face_mask_padding", [True]), ("face_enhancer_weight", True)]


@pytest.fixture(scope="module")
def kit(tmp_path_factory: pytest.TempPathFactory, images_dir: Path) -> Path:
    return make_kit(tmp_path_factory.mktemp("hostile") / "kit", images_dir)


@pytest.fixture(scope="module")
def backend(models_config, images_dir: Path) -> EngineBackend:  # type: ignore[no-untyped-def]
    cfg = EngineConfig(models=models_config, runtime=RuntimeConfig(providers=["cpu"]), swap=SwapConfig(swapper="classic"))
    backend = EngineBackend(Engine.load(cfg, components=["detector"], cpu_budget=1))
    backend.source = backend.add_source(read_image(images_dir / "obama.jpg").frame)  # type: ignore[attr-defined]
    return backend


# --- job manifests: the options column -------------------------------------------------------------

@pytest.mark.parametrize(("options", "words"), [c[1:] for c in UNUSED], ids=[c[0] for c in UNUSED])
def test_manifest_options_that_would_be_unused(options: dict, words: str) -> None:
    with pytest.raises(ConfigError, match="unused") as err:
        with_overrides(JobConfig(), json.dumps(options))
    assert words in str(err.value)


@pytest.mark.parametrize(("option", "value"), BOOLEANS)
def test_manifest_booleans_are_not_numbers(option: str, value: object) -> None:
    with pytest.raises(ConfigError, match="expected a number"):
        with_overrides(JobConfig(), json.dumps({option: value}))


@pytest.mark.parametrize("options", ['{"detector": {"size": 320000}}', '{"detector": {"size": 0}}', "[1]", "{",
                                     '{"enhance": {"blend": NaN}}', '{"face_swapper_weight": 2}'])
def test_manifest_options_out_of_range(options: str) -> None:
    with pytest.raises(ConfigError):
        with_overrides(JobConfig(), options)


JOB_ITEMS = [  # (id, target in the kit, output name, words of the item's error)
    ("gif_bomb", "bomb.gif", "a.gif", "9000x9000"),
    ("gif_bomb_20", "bomb20.gif", "b.gif", "20 frames"),
    ("huge_png", "huge.png", "c.png", "over the limit"),
    ("animated_to_jpg", "anim.gif", "d.jpg", "holds one frame"),
    ("text", "text.jpg", "e.png", "not an image"),
    ("image_to_mp4", "target.jpg", "f.mp4", "cannot write images"),
]


def test_job_items_fail_alone_and_name_their_output(kit: Path, tmp_path: Path, models_config,  # type: ignore[no-untyped-def]
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """Every hostile item fails at planning with its reason, named by target and output (two rows
    of one target can be told apart); nothing is written for them and no input changes."""
    rows = [f"{kit / 'face.jpg'},{kit / target},{out}" for _, target, out, _ in JOB_ITEMS]
    rows.append(f"{kit / 'face.jpg'},{kit / 'bomb.gif'},again.gif")  # one target, two rows
    manifest = tmp_path / "m.csv"
    manifest.write_text("source,target,output\n" + "\n".join(rows) + "\n")
    root = tmp_path / "out"
    root.mkdir()
    before = snapshot(kit)
    code = main(["job", "--manifest", str(manifest), "--output-root", str(root), "--runner", "local",
                 "--providers", "cpu", "--swapper", "classic", "--models-dir", str(models_config.models_dir or root)])
    err = capsys.readouterr().err
    assert code in (1, 2) and "internal error" not in err, err
    for _, target, out, words in JOB_ITEMS:
        line = next((x for x in err.splitlines() if x.startswith(f"FAILED {kit / target} -> ")), "")
        assert out in line and words in line, (target, err)
    assert f"-> {root / 'again.gif'}" in err
    assert snapshot(kit) == before
    assert not [p for p in root.rglob("*") if p.suffix in (".gif", ".png", ".jpg", ".mp4")]


# --- POST /v1/swap's options (the service's check, no Ray) ---------------------------------------

@pytest.mark.parametrize(("options", "words"), [c[1:] for c in UNUSED], ids=[c[0] for c in UNUSED])
def test_service_options_that_would_be_unused_are_422(options: dict, words: str) -> None:
    settings = parse_settings({"auth": {"token_env": None}})
    with pytest.raises(ApiError) as err:
        request_quality(FaceFusionOptions.model_validate(options), settings, enhancer=True)
    assert (err.value.status, err.value.code) == (422, "invalid_option") and words in err.value.detail


@pytest.mark.parametrize(("option", "value"), BOOLEANS)
def test_service_booleans_are_not_numbers(option: str, value: object) -> None:
    with pytest.raises(ValueError, match="expected a number"):
        FaceFusionOptions.model_validate({option: value})


# --- the live start message -----------------------------------------------------------------------

@pytest.mark.parametrize("fields", [*({o: v} for o, v in BOOLEANS), {"quality": True}, {"face_index": False},
                                    {"deadline_ms": True}, {"face_swapper_weight": "nan"}, {"face_mask_blur": 2},
                                    {"face_swapper_pixel_boost": "999x999"}, {"select": "everyone"},
                                    {"unknown": 1}, {"source_id": ""}])
def test_start_messages_that_are_malformed(fields: dict) -> None:
    with pytest.raises(ProtocolError, match="malformed start message"):
        parse_start(json.dumps({"source_id": "s", **fields}))


@pytest.mark.parametrize(("options", "words"), [
    *((c[1], c[2]) for c in UNUSED),
    ({"face_swapper_weight": 0.8}, "runs the classic swapper"),
    ({"face_enhancer_weight": 0.9, "face_enhancer_blend": 50}, "enhance"),
])
def test_start_options_that_would_be_unused_are_refused(options: dict, words: str, backend: EngineBackend) -> None:
    start = StartMessage.model_validate({"source_id": backend.source, **options})  # type: ignore[attr-defined]
    with pytest.raises(StreamRefused) as err:
        asyncio.run(backend.open(start))
    assert err.value.code in ("invalid_option", "enhance_unavailable") and words in err.value.message


# --- POST /v1/sources on the in-process host --------------------------------------------------------

@pytest.mark.parametrize(("name", "status", "code"), [
    ("bomb.gif", 422, "invalid_image"), ("anim.webp", 422, "invalid_image"), ("anim.gif", 422, "invalid_image"),
    ("huge.png", 422, "invalid_image"), ("text.jpg", 422, "invalid_image"), ("truncated.png", 422, "invalid_image"),
    ("strip_wide.png", 422, "no_face"), ("dot.png", 422, "no_face"), ("audio.m4a", 422, "invalid_image"),
])
def test_source_uploads(name: str, status: int, code: str, kit: Path, backend: EngineBackend) -> None:
    with LocalServer(local_hub(backend), backend) as server:
        got, body = _upload(f"{server.http_url}/v1/sources", name, (kit / name).read_bytes())
    assert (got, body["error"]) == (status, code), body


def _upload(url: str, name: str, data: bytes) -> tuple[int, dict]:
    """POST a multipart form with the file field ``image``: (status, JSON body)."""
    boundary = "hostile-boundary"
    body = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"image\"; filename=\"{name}\"\r\n"
            "Content-Type: application/octet-stream\r\n\r\n").encode() + data + f"\r\n--{boundary}--\r\n".encode()
    request = urllib.request.Request(url, body, {"Content-Type": f"multipart/form-data; boundary={boundary}"})
    try:
        with urllib.request.urlopen(request, timeout=60) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


# --- live --output ------------------------------------------------------------------------------------

@pytest.mark.parametrize(("output", "words"), [
    ("{o}/x.txt", "must end in .mp4"), ("{o}/missing/x.mp4", "does not exist"), ("{k}/notes.txt/x.mp4", "not a folder"),
    ("{k}/garbage.mp4", "same file as --input"), ("/proc/x.mp4", "not writable"),
])
def test_live_outputs_refused_before_any_work(output: str, words: str, kit: Path, tmp_path: Path) -> None:
    before = snapshot(kit)
    with pytest.raises(InputError, match=words):
        check_stream_output(Path(output.format(k=kit, o=tmp_path)), [("--input", kit / "garbage.mp4")])
    assert snapshot(kit) == before and not list(tmp_path.iterdir())
    check_stream_output(tmp_path / "fine.mp4", [("--input", kit / "garbage.mp4")])  # a good one passes
    check_stream_output(None, [])
