"""insightface's own loop over image files: the baseline of ``fusion-ray bench-images``.

Run with a Python that has ``insightface`` (it is not a fusion_ray dependency; its models are
non-commercial): ``python insightface_loop.py MODELS_ROOT SWAPPER SOURCE OUT_DIR FILE...``.
``MODELS_ROOT/models/fr/`` holds the detector and the embedder, ``SWAPPER`` the inswapper
file. Every face of every file is swapped (``FaceAnalysis.get`` then ``INSwapper.get`` with
``paste_back``) and the result written as JPEG, one image at a time, as the examples do.
Prints one JSON line: wall seconds, images, faces. Imports nothing of fusion_ray.
"""

import json
import sys
import time
from pathlib import Path


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
    faces = 0
    start = time.perf_counter()
    for name in files:
        image = cv2.imread(name)
        if image is None:
            raise SystemExit(f"cannot read {name}")
        found = app.get(image)
        for face in found:
            image = swapper.get(image, face, source_face, paste_back=True)
        faces += len(found)
        cv2.imwrite(str(Path(out_dir) / Path(name).name), image)
    sys.stdout.write(json.dumps({"wall_s": time.perf_counter() - start, "images": len(files), "faces": faces}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
