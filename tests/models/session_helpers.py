"""A real ONNX Runtime session that keeps what it was fed and what it returned (for tests that
check the blobs a wrapper sends to its model against the documented formulas)."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnxruntime as ort


class RecordingSession:
    """Runs ``session`` and keeps every call's feeds and outputs (copies), in order."""

    def __init__(self, session: ort.InferenceSession) -> None:
        self.session = session
        self.calls: list[tuple[dict[str, np.ndarray], list[np.ndarray]]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.session, name)

    def run(self, output_names: list[str] | None, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        outputs = self.session.run(output_names, feeds)
        self.calls.append(({k: np.array(v, copy=True) for k, v in feeds.items()}, [np.array(o) for o in outputs]))
        return outputs

    def fed(self, name: str) -> np.ndarray:
        """Everything fed to input ``name``, all calls concatenated."""
        return np.concatenate([feeds[name] for feeds, _ in self.calls])

    def returned(self) -> np.ndarray:
        """The first output of every call, concatenated."""
        return np.concatenate([outputs[0] for _, outputs in self.calls])


def recording(model: Any) -> RecordingSession:
    """Put a :class:`RecordingSession` in ``model.session`` (a loaded wrapper) and return it."""
    recorder = RecordingSession(model.session)
    model.session = recorder
    return recorder
