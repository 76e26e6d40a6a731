"""The mask steps' cost through the chain: the engine over a photo with the box mask
alone, with area + mouth masks (REAL dlib_68 landmarker) and with occlusion + region masks (xseg
and BiSeNet STAND-INS: their timings are a stand-in's, not the real models'). The classic swapper
and the real SCRFD detector; no Ray. One row per setting: each step's mean ms per frame."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from fusion_ray.config import (
    EngineConfig,
    LandmarkerConfig,
    MaskConfig,
    ModelsConfig,
    RuntimeConfig,
    SwapConfig,
)
from fusion_ray.imageio import read_image
from fusion_ray.models.hashes import write_hash_record
from fusion_ray.models.standins_quality import make_quality_standin
from fusion_ray.runners.inline import Engine

SETTINGS: dict[str, tuple[MaskConfig, str]] = {
    "box": (MaskConfig(), "none"),
    "box + area + mouth (dlib_68)": (MaskConfig(types=["box", "area"], mouth_mask=True), "dlib_68"),
    "box + occlusion + region (STAND-INS)": (MaskConfig(types=["box", "occlusion", "region"]), "none"),
}


def _standins(directory: Path) -> dict[str, Path]:
    paths = {}
    for name in ("xseg_1", "bisenet_resnet_34"):
        path = directory / f"{name}.onnx"
        path.write_bytes(make_quality_standin(name).SerializeToString())
        write_hash_record(path, "generated")
        paths[name] = path
    return paths


def mask_chain_bench(target: Path, source: Path, scrfd: Path, repeats: int = 5) -> list[dict[str, Any]]:
    """Each setting's per-step mean ms per frame over ``repeats`` runs (after one warm-up)."""
    frame = read_image(target).frame
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        paths = {"scrfd_2.5g": scrfd, **_standins(Path(tmp))}
        for name, (masks, landmarker) in SETTINGS.items():
            cfg = EngineConfig(models=ModelsConfig(paths=paths), runtime=RuntimeConfig(providers=["cpu"]),
                               swap=SwapConfig(swapper="classic"), masks=masks,
                               landmarker=LandmarkerConfig(model=landmarker))  # type: ignore[arg-type]
            engine = Engine.load(cfg, cpu_budget=1)
            identity = engine.prepare_source([read_image(source).frame])
            faces = engine.process_frame(frame, identity).faces_swapped
            totals: dict[str, float] = {}
            for _ in range(repeats):
                for step, ms in engine.process_frame(frame, identity).timings_ms.items():
                    totals[step] = totals.get(step, 0.0) + ms
            steps = {step: round(ms / repeats, 2) for step, ms in totals.items()}
            rows.append({"setting": name, "faces": faces, "ms_per_frame": round(sum(steps.values()), 1),
                         "steps_ms": steps})
    return rows
