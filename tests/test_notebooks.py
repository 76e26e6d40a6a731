"""The notebooks execute (at a tiny size) so that they cannot rot; their outputs say what ran.

The throughput notebook's kernel joins the session's Ray cluster (``FUSION_RAY_NB_RAY_ADDRESS``)
instead of starting a second Ray instance.
"""

import re
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("matplotlib")
pytest.importorskip("ipykernel")

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
TINY_FRAMES = 6


@pytest.fixture
def tiny_notebook_env(monkeypatch, tmp_path, assets_dir, scrfd_path):
    values = {
        "FUSION_RAY_ASSETS": str(assets_dir),
        "FUSION_RAY_NB_WORK_DIR": str(tmp_path / "work"),
        "FUSION_RAY_NB_FRAMES": str(TINY_FRAMES),
        "FUSION_RAY_NB_SIZE": "192x108",
        "FUSION_RAY_NB_STANDINS": "light",
        "MPLBACKEND": "module://matplotlib_inline.backend_inline",
    }
    for key, value in values.items():
        monkeypatch.setenv(key, value)
    return values


def _execute(name: str) -> str:
    """Run every cell (an error in any cell fails the test); the outputs' text and image count."""
    notebook = nbformat.read(NOTEBOOKS / name, as_version=4)
    client = nbclient.NotebookClient(notebook, timeout=180, kernel_name="python3",
                                     resources={"metadata": {"path": str(NOTEBOOKS)}})
    client.execute()
    texts = []
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            texts.append(output.get("text", ""))
            texts.extend(str(v) for k, v in output.get("data", {}).items() if k.startswith("text/"))
    images = sum(1 for cell in notebook.cells for o in cell.get("outputs", []) if "image/png" in o.get("data", {}))
    return "\n".join(texts) + f"\n[images: {images}]"


def test_committed_notebooks_are_executed_and_small():
    for path in sorted(NOTEBOOKS.glob("*.ipynb")):
        notebook = nbformat.read(path, as_version=4)
        code = [cell for cell in notebook.cells if cell.cell_type == "code"]
        assert all(cell.get("execution_count") for cell in code), f"{path.name} has unexecuted cells"
        assert any("image/png" in o.get("data", {}) for cell in code for o in cell.outputs), path.name
        assert not any(o.get("output_type") == "error" for cell in code for o in cell.outputs), path.name
        assert path.stat().st_size < 1_000_000, f"{path.name} is {path.stat().st_size} bytes"


def test_quickstart_notebook_shows_a_real_swap_and_a_labelled_standin(tiny_notebook_env):
    text = _execute("01_quickstart.ipynb")
    assert "real SCRFD detector + classic swapper: a real swap" in text
    assert "stand-in models: none" in text
    assert "select=largest: 1 of 3 faces swapped" in text and "select=all: 3 of 3 faces swapped" in text
    # The inswapper path ran on stand-ins, and the output file's own metadata says so.
    assert "stand-in models: arcface_w600k_r50, inswapper_128" in text
    assert "Comment in the output's PNG text: made with fusion_ray STAND-IN models" in text
    assert "NOT a real face swap" in text
    assert "[images: 4]" in text


@pytest.mark.ray
def test_throughput_notebook_builds_pipelines_and_reports_idle_ratios(tiny_notebook_env, ray_cluster,
                                                                     monkeypatch):
    import ray

    monkeypatch.setenv("FUSION_RAY_NB_RAY_ADDRESS", ray.get_runtime_context().gcs_address)
    text = _execute("02_throughput.ipynb")
    assert "STAND-INS (light): arcface_w600k_r50, inswapper_128; not real swaps" in text
    assert f"serial loop: {TINY_FRAMES} frames" in text
    assert "fused on this cluster: True" in text
    assert re.search(rf"\b{TINY_FRAMES} frames, {TINY_FRAMES} faces swapped by the STAND-IN swapper", text)
    assert "ConfigError: the pipeline's actor pools reserve" in text
    for experiment in ("fused: 1 actor, batch 4", "pools: detect 2x4, swap 16, paste 8",
                       "pools: detect 1x2, swap 2, paste 2"):
        assert experiment in text
    for stage in ("detect", "swap", "paste", "fused"):
        assert f"idle ratio {stage}" in text
    assert "[images: 2]" in text
