"""``fusion-ray detect IMAGE|VIDEO``: each face's box, score and landmarks, with its ``--face-index``.

Faces are listed in reading order (:func:`fusion_ray.ops.select.order_faces`, the order
``--select index --face-index N`` counts in), so the index printed is the one to pass.
``--json`` writes them; ``--draw`` writes the picture with each face's box, index, score and
landmarks (for a video: a folder with one PNG per detected frame).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from fusion_ray.cli.common import add_engine_arguments, engine_config_from_args
from fusion_ray.errors import InputError
from fusion_ray.fsutil import atomic_write_bytes
from fusion_ray.ops.select import order_faces
from fusion_ray.types import Face, Frame

LANDMARK_COLOURS = ((0, 255, 0), (0, 255, 0), (0, 200, 255), (255, 0, 255), (255, 0, 255))
"""BGR per landmark: eyes green, nose orange, mouth corners magenta."""


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = sub.add_parser("detect", help="list (and draw) the faces of an image or a video",
                            description="Detect faces: box, score, 5 landmarks and the index --face-index uses.")
    parser.add_argument("input", type=Path, metavar="IMAGE|VIDEO")
    parser.add_argument("--json", type=Path, metavar="FILE", help="write the faces as JSON")
    parser.add_argument("--draw", type=Path, metavar="OUT",
                        help="write the picture with boxes, indices and landmarks (a video: a folder of PNGs)")
    parser.add_argument("--every", type=int, default=1, metavar="N", help="video: detect every Nth frame (default 1)")
    parser.add_argument("--force", action="store_true", help="overwrite existing outputs")
    add_engine_arguments(parser)
    parser.set_defaults(run=run)


def face_record(index: int, face: Face) -> dict[str, Any]:
    return {"index": index, "score": round(face.score, 4),
            "bbox_xyxy": [round(float(v), 2) for v in face.bbox_xyxy],
            "landmarks_5": [[round(float(x), 2), round(float(y), 2)] for x, y in face.landmarks_5]}


def draw_faces(frame: Frame, faces: list[Face]) -> Frame:
    """A copy of ``frame`` with each face's box, ``#index score`` and landmarks (faces in reading order)."""
    out = frame.copy()
    thickness = max(1, round(max(frame.shape[:2]) / 500))
    for index, face in enumerate(faces):
        x1, y1, x2, y2 = (int(round(float(v))) for v in face.bbox_xyxy)
        cv2.rectangle(out, (x1, y1), (x2, y2), (0, 0, 255), thickness, cv2.LINE_AA)
        label = f"#{index} {face.score:.2f}"
        scale = 0.5 * thickness
        (w, h), base = cv2.getTextSize(label, cv2.FONT_HERSHEY_SIMPLEX, scale, thickness)
        top = max(0, y1 - h - base - 2)
        cv2.rectangle(out, (x1, top), (x1 + w + 2, top + h + base + 2), (0, 0, 255), -1)
        cv2.putText(out, label, (x1 + 1, top + h + 1), cv2.FONT_HERSHEY_SIMPLEX, scale, (255, 255, 255),
                    thickness, cv2.LINE_AA)
        for (x, y), colour in zip(face.landmarks_5, LANDMARK_COLOURS, strict=True):
            cv2.circle(out, (int(round(float(x))), int(round(float(y)))), thickness + 1, colour, -1, cv2.LINE_AA)
    return out


def _frames(path: Path, every: int, is_video: bool) -> Iterator[tuple[int, float | None, Frame]]:
    """(frame index, time or None, frame): the image, or every ``every``-th frame of the video."""
    from fusion_ray.video import decode_all

    if is_video:
        for decoded in decode_all(path):
            if decoded.index % every == 0:
                yield decoded.index, decoded.time_s, decoded.frame
        return
    from fusion_ray.imageio import read_image

    yield 0, None, read_image(path).frame


def _print_progress(done: int, total: int) -> None:
    print(f"\rbuilding the INT8 detector: calibrating {done}/{total} frames", end="", file=sys.stderr)
    if done == total:
        print(", quantising", file=sys.stderr)


def _check_outputs(args: argparse.Namespace) -> None:
    for option, path in (("--json", args.json), ("--draw", args.draw)):
        if path is not None and path.exists() and not args.force:
            raise InputError(f"{option} output exists: {path} (use --force to overwrite)")


def run(args: argparse.Namespace) -> int:
    from fusion_ray.core.modelset import ModelSet

    if not args.input.is_file():
        raise InputError(f"file not found: {args.input}")
    if args.every < 1:
        raise InputError(f"--every expects a positive frame step, got {args.every}")
    _check_outputs(args)
    from fusion_ray.video import is_video_file

    is_video = bool(is_video_file(args.input))
    if is_video and args.draw is not None and args.draw.suffix:
        raise InputError(f"--draw for a video names a folder (one PNG per frame), got {args.draw}")
    cfg = engine_config_from_args(args)
    models = ModelSet.load(cfg, ["detector"], cpu_budget=float(os.cpu_count() or 1), progress=_print_progress)
    detector = models.need_detector()
    info = models.info[cfg.models.detector]
    records: list[dict[str, Any]] = []
    for index, time_s, frame in _frames(args.input, args.every, is_video):
        faces = order_faces(detector.detect(frame))
        records.append({"frame": index, "time_s": time_s, "faces": [face_record(i, f) for i, f in enumerate(faces)]})
        _print_frame(index, time_s, faces)
        if args.draw is not None:
            target = args.draw / f"frame_{index:06d}.png" if is_video else args.draw
            _write_drawing(target, draw_faces(frame, faces))
    if args.json is not None:
        body = {"input": str(args.input), "detector": info.name, "precision": info.precision,
                "providers": list(info.providers), "frames": records}
        atomic_write_bytes(args.json, (json.dumps(body, indent=1) + "\n").encode())
    print(f"{info.name} at {info.precision}: {sum(len(r['faces']) for r in records)} face(s) in "
          f"{len(records)} frame(s)", file=sys.stderr)
    return 0


def _print_frame(index: int, time_s: float | None, faces: list[Face]) -> None:
    where = f"frame {index} ({time_s:.2f} s)" if time_s is not None else "image"
    print(f"{where}: {len(faces)} face(s)")
    for i, face in enumerate(faces):
        x1, y1, x2, y2 = (float(v) for v in face.bbox_xyxy)
        points = " ".join(f"({x:.0f},{y:.0f})" for x, y in np.asarray(face.landmarks_5))
        print(f"  --face-index {i}: score {face.score:.3f} box ({x1:.0f},{y1:.0f})-({x2:.0f},{y2:.0f}) "
              f"landmarks {points}")


def _write_drawing(path: Path, frame: Frame) -> None:
    from fusion_ray.imageio import encode_image

    suffix = path.suffix.lower() or ".png"
    atomic_write_bytes(path, encode_image(frame, suffix))
