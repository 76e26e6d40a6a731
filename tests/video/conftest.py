"""Fixtures of the video tests: the face photo the test clips are made from."""

from pathlib import Path

import cv2
import numpy as np
import pytest


@pytest.fixture(scope="session")
def face(images_dir: Path) -> np.ndarray:
    """``obama.jpg`` as BGR, moved across the generated test clips."""
    image = cv2.imread(str(images_dir / "obama.jpg"))
    assert image is not None
    return image
