"""The package's imports point one way (docs/ARCHITECTURE.md, "Layers"), and no module imports
itself through others. Imports inside functions count; ``if TYPE_CHECKING:`` imports do not."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "fusion_ray"

LAYERS: tuple[tuple[str, ...], ...] = (
    ("fusion_ray", "fusion_ray.types", "fusion_ray.errors", "fusion_ray.versions", "fusion_ray.fsutil",
     "fusion_ray.config", "fusion_ray.capability", "fusion_ray.runners"),
    ("fusion_ray.ops", "fusion_ray.video", "fusion_ray.storage", "fusion_ray.imageheader", "fusion_ray.imageio",
     "fusion_ray.animation"),
    ("fusion_ray.models",),
    ("fusion_ray.options_table",),
    ("fusion_ray.core",),
    ("fusion_ray.runners.inline",),
    ("fusion_ray.image",),
    ("fusion_ray.jobs",),
    ("fusion_ray.runners.local", "fusion_ray.runners.ray"),
    ("fusion_ray.runners.job",),
    ("fusion_ray.live",),
    ("fusion_ray.serve",),
    ("fusion_ray.bench",),
    ("fusion_ray.cli",),
)
"""Lowest first: a module may import its own layer and the layers before it."""


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer_of(module: str) -> int:
    """The layer of the longest prefix of ``module`` named in LAYERS."""
    best, rank = -1, -1
    for i, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best:
                best, rank = len(prefix), i
    assert rank >= 0, f"{module} is in no layer of tests/test_layers.py"
    return rank


def _type_checking(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and getattr(test, "id", getattr(test, "attr", "")) == "TYPE_CHECKING"


def imports_of(path: Path, modules: set[str]) -> set[str]:
    """The package's modules ``path`` imports (a name imported from a package counts as its module
    when it is one)."""
    tree = ast.parse(path.read_text())
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if _type_checking(node):  # only its else branch runs
            for child in getattr(node, "orelse", []):
                visit(child)
            return
        if isinstance(node, ast.ImportFrom) and node.level:
            raise AssertionError(f"{path}: a relative import (from {'.' * node.level}{node.module or ''}); "
                                 "the package imports by absolute names")
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("fusion_ray"):
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                found.add(sub if sub in modules else node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("fusion_ray"))
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


PATHS = {module_name(p): p for p in PACKAGE.rglob("*.py")}
"""Every module of the package and its file."""
GRAPH = {m: imports_of(p, set(PATHS)) - {m} for m, p in PATHS.items()}
"""Every module and the package's modules it imports."""


def test_every_module_is_in_a_layer() -> None:
    for module in GRAPH:
        layer_of(module)


@pytest.mark.parametrize("module", sorted(GRAPH))
def test_no_module_imports_a_later_layer(module: str) -> None:
    upward = sorted(t for t in GRAPH[module] if layer_of(t) > layer_of(module))
    assert not upward, f"{module} (layer {layer_of(module)}) imports {upward}"


def test_no_import_cycle() -> None:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def connect(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in GRAPH[v]:
            if w not in GRAPH:
                continue
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for module in GRAPH:
        if module not in index:
            connect(module)
    assert not cycles, f"import cycles: {cycles}"


def test_the_layer_rule_catches_an_upward_import(tmp_path: Path) -> None:
    module = tmp_path / "probe.py"
    module.write_text("from typing import TYPE_CHECKING\n"
                      "if TYPE_CHECKING:\n    from fusion_ray.cli import main\n"
                      "else:\n    from fusion_ray.ops import align\n"
                      "def later():\n    from fusion_ray.jobs.plan import plan_job\n")
    found = imports_of(module, {"fusion_ray.ops.align", "fusion_ray.jobs.plan"})
    assert found == {"fusion_ray.ops.align", "fusion_ray.jobs.plan"}  # not the TYPE_CHECKING one
    assert layer_of("fusion_ray.jobs.plan") > layer_of("fusion_ray.core.tracking.tracks")
    assert layer_of("fusion_ray.runners.inline") < layer_of("fusion_ray.runners.local.runner")
    assert layer_of("fusion_ray.runners") < layer_of("fusion_ray.ops.align")
    module.write_text("from .x import y\n")
    with pytest.raises(AssertionError, match="relative import"):
        imports_of(module, set())


NO_SERVICE_OR_CLUSTER = ("fusion_ray.core", "fusion_ray.jobs", "fusion_ray.ops", "fusion_ray.models")
"""Packages that import neither Ray nor the web stack: they run in any runner's process."""


@pytest.mark.parametrize("module", sorted(m for m in GRAPH if m.startswith(NO_SERVICE_OR_CLUSTER)))
def test_the_core_and_jobs_import_neither_ray_nor_the_web_stack(module: str) -> None:
    names = set()
    for node in ast.walk(ast.parse(PATHS[module].read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
    assert not names & {"ray", "fastapi", "starlette"}, f"{module} imports {sorted(names & {'ray', 'fastapi', 'starlette'})}"
