"""The notebooks execute (at a tiny size, without their Ray part) so that they cannot rot."""

from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("matplotlib")
pytest.importorskip("ipykernel")

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"


@pytest.fixture
def tiny_notebook_env(monkeypatch, tmp_path, assets_dir, scrfd_path):
    values = {
        "FUSION_RAY_ASSETS": str(assets_dir),
        "FUSION_RAY_MODELS": str(tmp_path / "models"),  # empty: stand-ins are generated and labelled
        "FUSION_RAY_NB_WORK_DIR": str(tmp_path / "work"),
        "FUSION_RAY_NB_FRAMES": "6",
        "FUSION_RAY_NB_SIZE": "160x90",
        "FUSION_RAY_NB_STANDINS": "light",
        "FUSION_RAY_NB_SWEEP_STANDINS": "light",
        "FUSION_RAY_NB_SWEEP_BATCHES": "1,2",
        "FUSION_RAY_NB_SWEEP_REPEATS": "1",
        "FUSION_RAY_NB_SKIP_RAY": "1",  # the kernel would start a second Ray instance
        "MPLBACKEND": "module://matplotlib_inline.backend_inline",
    }
    for key, value in values.items():
        monkeypatch.setenv(key, value)
    return values


def _execute(name: str) -> str:
    notebook = nbformat.read(NOTEBOOKS / name, as_version=4)
    client = nbclient.NotebookClient(notebook, timeout=120, kernel_name="python3",
                                     resources={"metadata": {"path": str(NOTEBOOKS)}})
    client.execute()
    texts = []
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            texts.append(output.get("text", ""))
            texts.extend(str(v) for k, v in output.get("data", {}).items() if k.startswith("text/"))
    images = sum(1 for cell in notebook.cells for o in cell.get("outputs", []) if "image/png" in o.get("data", {}))
    return "\n".join(texts) + f"\n[images: {images}]"


def test_quickstart_notebook_shows_a_real_swap_and_a_labelled_standin(tiny_notebook_env):
    text = _execute("01_quickstart.ipynb")
    assert "real SCRFD detector + classic" in text
    assert "NOT a real face swap" in text  # the inswapper path ran on a stand-in and says so
    assert "[images: 2]" in text


def test_throughput_notebook_runs_serial_and_sweep_and_notes_the_skipped_ray_part(tiny_notebook_env):
    text = _execute("02_throughput.ipynb")
    assert "the Ray pipeline part was skipped" in text
    assert "serial loop (square)" in text and "serial loop (fit)" in text
    assert "## Batch-size sweep" in text
    assert "STAND-IN" in text
    assert "[images: 3]" in text
