"""insightface's own loop over image files: the baseline of ``fusion-ray bench images``.

Run with a Python that has ``insightface`` (it is not a fusion_ray dependency; its models are
non-commercial): ``python insightface_loop.py MODELS_ROOT SWAPPER SOURCE OUT_DIR FILE...``.
``MODELS_ROOT/models/fr/`` holds the detector and the embedder, ``SWAPPER`` the inswapper
file. Every face of every file is swapped (``FaceAnalysis.get`` then ``INSwapper.get`` with
``paste_back``) and the result written as JPEG, one image at a time, as the examples do. A video
file (``.mp4``, ``.mov``, ``.mkv``, ``.avi``) is read frame by frame with OpenCV and written to
``OUT_DIR`` with ``cv2.VideoWriter`` (no audio: the loop's users add it back with ffmpeg), as
roop-style tools run a clip. Prints one JSON line: wall seconds (model loading not counted),
seconds to the first written frame, images, frames, faces. Imports nothing of fusion_ray.
"""

import json
import sys
import time
from pathlib import Path

VIDEO_SUFFIXES = {".mp4", ".mov", ".mkv", ".avi"}


def main(argv: list[str]) -> int:
    import cv2
    import insightface
    from insightface.app import FaceAnalysis

    root, swapper_path, source, out_dir, *files = argv
    providers = ["CPUExecutionProvider"]
    app = FaceAnalysis(name="fr", root=root, providers=providers, allowed_modules=["detection", "recognition"])
    app.prepare(ctx_id=-1, det_size=(640, 640))
    swapper = insightface.model_zoo.get_model(swapper_path, providers=providers)
    source_face = max(app.get(cv2.imread(source)), key=lambda f: (f.bbox[2] - f.bbox[0]) * (f.bbox[3] - f.bbox[1]))
    def swap(image):  # type: ignore[no-untyped-def]
        found = app.get(image)
        for face in found:
            image = swapper.get(image, face, source_face, paste_back=True)
        return image, len(found)

    faces = frames = 0
    first = None
    start = time.perf_counter()
    for name in files:
        out = Path(out_dir) / Path(name).name
        if Path(name).suffix.lower() in VIDEO_SUFFIXES:
            capture = cv2.VideoCapture(name)
            fps = capture.get(cv2.CAP_PROP_FPS) or 25.0
            writer = None
            while True:
                ok, image = capture.read()
                if not ok:
                    break
                image, n = swap(image)
                if writer is None:
                    size = (image.shape[1], image.shape[0])
                    writer = cv2.VideoWriter(str(out), cv2.VideoWriter.fourcc(*"mp4v"), fps, size)
                writer.write(image)
                first = time.perf_counter() - start if first is None else first
                faces, frames = faces + n, frames + 1
            capture.release()
            if writer is not None:
                writer.release()
            continue
        still = cv2.imread(name)
        if still is None:
            raise SystemExit(f"cannot read {name}")
        still, n = swap(still)
        cv2.imwrite(str(out), still)
        first = time.perf_counter() - start if first is None else first
        faces, frames = faces + n, frames + 1
    result = {"wall_s": time.perf_counter() - start, "first_frame_s": first, "images": len(files), "frames": frames,
              "faces": faces}
    sys.stdout.write(json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
