"""The /live page in Debian's headless Chromium, whose fake camera plays a clip (a .y4m file)."""

from __future__ import annotations

import shutil
from pathlib import Path

import cv2
import numpy as np

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
COUNTERS = ("fps", "latency", "sent", "received", "level", "transport")


def y4m(frames: list[np.ndarray], path: Path, fps: int) -> Path:
    """A YUV4MPEG2 (4:2:0) file: Chromium's fake camera plays it in a loop."""
    height, width = frames[0].shape[:2]
    with path.open("wb") as out:
        out.write(f"YUV4MPEG2 W{width} H{height} F{fps}:1 Ip A1:1 C420jpeg\n".encode())
        for frame in frames:
            out.write(b"FRAME\n" + cv2.cvtColor(frame, cv2.COLOR_BGR2YUV_I420).tobytes())
    return path


def run_live_page(base: str, token: str, frames: list[np.ndarray], source: Path,
                  work: Path) -> tuple[np.ndarray, dict[str, str]]:
    """Register ``source`` and stream the camera on ``base``/live until frames come back; the output
    canvas (a screenshot taken once 3 frames came back) and the counters shown after more did
    (``received_at_shot``: the count when the screenshot was taken)."""
    from playwright.sync_api import sync_playwright

    camera = y4m(frames, work / "camera.y4m", fps=15)
    args = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--use-fake-ui-for-media-stream",
            "--use-fake-device-for-media-stream", f"--use-file-for-fake-video-capture={camera}"]
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=args)
        try:
            page = browser.new_page()
            page.goto(f"{base}/live")
            page.fill("#token", token)
            page.set_input_files("#source", str(source))
            page.click("#register")
            page.wait_for_selector("#start:not([disabled])", timeout=60_000)
            page.click("#start")
            page.wait_for_function("Number(document.querySelector('#received').textContent) >= 3", timeout=90_000)
            received = int(page.text_content("#received") or 0)
            shot = page.locator("#out").screenshot()
            try:
                page.wait_for_function(f"Number(document.querySelector('#received').textContent) > {received}",
                                       timeout=60_000)
            except Exception as exc:  # say what the page showed: frames sent, drops and why, the status
                shown = {name: page.text_content(f"#{name}") or "" for name in (*COUNTERS, "dropped", "status")}
                raise AssertionError(f"no frame came back after the first {received}: {shown}") from exc
            page.wait_for_function("document.querySelector('#server-latency').textContent !== '-'", timeout=30_000)
            page.wait_for_function("document.querySelector('#latency').textContent !== '-'", timeout=30_000)
            shown = {name: page.text_content(f"#{name}") or "" for name in COUNTERS}
        finally:
            browser.close()
    shown["received_at_shot"] = str(received)
    return cv2.imdecode(np.frombuffer(shot, np.uint8), cv2.IMREAD_COLOR), shown


def face_detector(models_config):
    from fusion_ray.config import EngineConfig, RuntimeConfig
    from fusion_ray.runners.inline import Engine

    cfg = EngineConfig(models=models_config, runtime=RuntimeConfig(providers=["cpu"]))
    return Engine.load(cfg, components=["detector"], cpu_budget=1)


def aligned(engine, frame: np.ndarray) -> np.ndarray:
    from fusion_ray.ops.align import align_face

    face = max(engine.detect(frame), key=lambda f: f.area)
    crop, _ = align_face(frame, face.landmarks_5, "arcface_128", 128)
    grey = cv2.cvtColor(crop, cv2.COLOR_BGR2GRAY).astype(np.float32)
    inner = grey[40:110, 30:98]
    return (inner - inner.mean()) / (inner.std() + 1e-6)


def swapped_towards_source(detector, out: np.ndarray, source: np.ndarray, camera: np.ndarray) -> bool:
    """The canvas shows the camera's face swapped: closer to the source photo's face than to the
    clip's own face (the same check as the engine's classic-swap test)."""
    to_source = float(np.mean((aligned(detector, out) - aligned(detector, source)) ** 2))
    to_camera = float(np.mean((aligned(detector, out) - aligned(detector, camera)) ** 2))
    assert to_source < 0.8 * to_camera, (to_source, to_camera)
    return True
