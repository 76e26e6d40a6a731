"""SCRFD on several same-canvas images in one call (the square crops of re-detection).

The insightface SCRFD exports declare a batch of 1, but their graphs compute each image on its
own: every head's ``(N, C, H, W)`` map is transposed to ``(H, W, N, C)`` and flattened to rows,
so with N images the rows of one grid cell hold the N images side by side. Making the input's
first dimension symbolic therefore runs N images at once, and
:func:`~fusion_ray.models.detector.split_rows` takes each image's rows back out (the same rows,
in the same order, as a call on that image alone).

:func:`batch_detector` makes that copy once per detector: the model is rewritten in memory
(the file is not touched), opened with the detector session's own options, and proved on two
random images (one call on both against one call on each; the rows must agree within
``PROOF_ATOL``). Where that cannot be done (a stand-in or export that bakes the batch in, a
detector not made from a file, a GPU provider), the detector itself is used, one call per image.
"""

from __future__ import annotations

import logging
import threading
import weakref
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

from fusion_ray.models.detector import ScrfdDetector, split_rows

log = logging.getLogger(__name__)

PROOF_HW = (64, 96)
"""The random images the rewritten model is proved on (small: the proof costs a few ms)."""
PROOF_ATOL = 1e-4

_made: weakref.WeakKeyDictionary[ScrfdDetector, ScrfdDetector | None] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def batch_model(path: Path) -> bytes:
    """The model at ``path`` with a symbolic first input dimension (serialised, in memory)."""
    model = onnx.load(str(path))
    weights = {init.name for init in model.graph.initializer}
    for value in model.graph.input:
        if value.name in weights:
            continue
        dim = value.type.tensor_type.shape.dim[0]
        dim.Clear()
        dim.dim_param = "batch"
    return model.SerializeToString()


def batch_session(path: Path, like: ort.InferenceSession) -> ort.InferenceSession:
    """A session over the rewritten model with ``like``'s options (threads, optimisation)."""
    return ort.InferenceSession(batch_model(path), sess_options=like.get_session_options(),
                                providers=["CPUExecutionProvider"])


def proved(detector: ScrfdDetector) -> bool:
    """Whether ``detector`` gives each image's rows, unchanged, from one call on two images."""
    rng = np.random.default_rng(0)
    blobs = rng.uniform(-1.0, 1.0, (2, 3, *PROOF_HW)).astype(np.float32)
    alone = [detector.forward(blobs[k:k + 1]) for k in range(2)]
    together = split_rows(detector.forward(blobs), 2, PROOF_HW)
    return all(np.allclose(a, b, rtol=0.0, atol=PROOF_ATOL)
               for k in range(2) for a, b in zip(alone[k], together[k], strict=True))


def batch_detector(detector: ScrfdDetector) -> ScrfdDetector:
    """``detector`` over a session that takes several images per call (made and proved once per
    detector), or ``detector`` itself where that cannot be done (see the module docstring)."""
    if detector.batch_dynamic:
        return detector
    with _lock:
        if detector not in _made:
            made = _make(detector)
            # None: the detector itself (a value that is its own key would keep it alive forever)
            _made[detector] = None if made is detector else made
        return _made[detector] or detector


def _make(detector: ScrfdDetector) -> ScrfdDetector:
    path = detector.model_path
    if path is None or detector.session.get_providers() != ["CPUExecutionProvider"]:
        return detector
    try:
        batched = ScrfdDetector(batch_session(path, detector.session), detector.spec, detector.cfg, model_path=path)
        if proved(batched):
            return batched
        log.info("%s: one call on several images does not give each image's outputs; one call per image",
                 path.name)
    except Exception as exc:  # onnx and onnxruntime raise several untyped errors
        log.info("%s: no batched detector (%s); one call per image", path.name, exc)
    return detector
