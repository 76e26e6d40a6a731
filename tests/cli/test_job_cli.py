"""``fusion-ray job``: what is refused before any work (and before Ray starts)."""

import subprocess
import sys
from pathlib import Path

import pytest

RAY_STARTED = """
import sys
from fusion_ray.cli import main
code = main(sys.argv[1:])
ray = sys.modules.get("ray")
print(code, bool(ray is not None and ray.is_initialized()))
"""


@pytest.mark.parametrize("where", ["sys", "missing", "file"])
def test_an_output_root_that_cannot_be_written_is_one_line_before_ray(where, tmp_path, images_dir):
    root = {"sys": Path("/sys"), "missing": tmp_path / "missing", "file": images_dir / "obama.jpg"}[where]
    proc = subprocess.run([sys.executable, "-c", RAY_STARTED, "job", "--source-pattern", str(images_dir / "biden.jpg"),
                           "--target-pattern", str(images_dir / "obama.jpg"), "--output-root", str(root),
                           "--providers", "cpu", "--no-progress-bars"], capture_output=True, text=True, timeout=300)
    assert proc.stdout.split() == ["2", "False"], proc.stderr
    expected = {"sys": "output root is not writable: /sys (Permission denied)",
                "missing": f"output root does not exist: {root}", "file": f"output root is not a folder: {root}"}
    assert proc.stderr.strip().splitlines() == [f"error: {expected[where]}"]
