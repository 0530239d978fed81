"""The package's shape: one import package, layers that import one way, no circles, no private imports.

Layers, lowest first (SPEC §2; issue 10):

0. core: ``depthcraft.constructions`` (primitives, heads, compiler, model, runtime, io), not its catalogue;
1. ``depthcraft.rasp_programs``;
2. the catalogue ``depthcraft.constructions.catalogue`` (registry and per-family registrations);
3. ``depthcraft.verify`` (tasks, checks, verifier, api, views, cross-check) and, on top of it,
   4. its command line ``depthcraft.verify.cli``;
5. the facade: ``depthcraft`` itself and ``depthcraft.__main__``.

A module may import from its own layer and the layers below. Every ``import`` statement counts,
including those inside functions (a lazy import is still a dependency). The checks run on the
sources, so a planted back-import or circle is caught without importing anything.
"""

from __future__ import annotations

import ast
import pathlib
import tomllib
from typing import Dict, Iterable, List, Set, Tuple

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


def package_dirs() -> Dict[str, pathlib.Path]:
    """Package name -> source folder, from pyproject.toml's package-dir mapping."""
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    return {name: ROOT / folder for name, folder in cfg["package-dir"].items()}


def project_sources() -> Dict[str, str]:
    """Every module of the installed package: dotted name -> source text."""
    out: Dict[str, str] = {}
    for pkg, folder in package_dirs().items():
        for path in folder.rglob("*.py"):
            rel = path.relative_to(folder).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            name = ".".join([pkg, *parts])
            if pkg == "depthcraft" and parts and parts[0] in ("constructions", "rasp_programs", "verify"):
                continue  # not expected, but never count a module twice
            out[name] = path.read_text()
    return out


def layer(module: str) -> int:
    """The layer of a project module (see the module docstring)."""
    if module in ("depthcraft", "depthcraft.__main__"):
        return 5
    if module == "depthcraft.verify.cli" or module.startswith("depthcraft.verify.cli."):
        return 4
    if module.startswith("depthcraft.verify"):
        return 3
    if module.startswith("depthcraft.constructions.catalogue"):
        return 2
    if module.startswith("depthcraft.rasp_programs"):
        return 1
    if module.startswith("depthcraft.constructions"):
        return 0
    raise AssertionError(f"module {module} is outside the known layers")


def _package_of(module: str, sources: Dict[str, str]) -> str:
    """The package a module's relative imports resolve against."""
    is_pkg = any(other.startswith(module + ".") for other in sources)
    return module if is_pkg else module.rpartition(".")[0]


def imports(module: str, source: str, sources: Dict[str, str]) -> List[Tuple[str, List[str], int]]:
    """Project imports of one module: (imported module, names imported from it, line)."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name == "depthcraft" or a.name.startswith("depthcraft."):
                    out.append((a.name, [], node.lineno))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                pkg = _package_of(module, sources)
                for _ in range(node.level - 1):
                    pkg = pkg.rpartition(".")[0]
                base = f"{pkg}.{base}" if base else pkg
            if not (base == "depthcraft" or base.startswith("depthcraft.")):
                continue
            names = [a.name for a in node.names]
            submodules = [n for n in names if f"{base}.{n}" in sources]
            others = [n for n in names if f"{base}.{n}" not in sources]
            for n in submodules:
                out.append((f"{base}.{n}", [], node.lineno))
            if others:
                out.append((base, others, node.lineno))
    return out


def graph(sources: Dict[str, str]) -> Dict[str, Set[str]]:
    """module -> the project modules it imports."""
    return {m: {target for target, _, _ in imports(m, s, sources) if target != m} for m, s in sources.items()}


def layering_violations(sources: Dict[str, str]) -> List[str]:
    """Imports from a higher layer, one line each."""
    bad = []
    for m, s in sources.items():
        for target, _, line in imports(m, s, sources):
            if target in sources and layer(target) > layer(m):
                bad.append(f"{m}:{line} imports {target} (layer {layer(target)} > {layer(m)})")
    return bad


def private_imports(sources: Dict[str, str], extra: Dict[str, str] = None) -> List[str]:
    """``from depthcraft.x import _name`` across modules (tests and docs examples included via ``extra``)."""
    bad = []
    everything = {**sources, **(extra or {})}
    for m, s in everything.items():
        for target, names, line in imports(m, s, sources):
            for n in names:
                if n.startswith("_") and not n.startswith("__") and target != m:
                    bad.append(f"{m}:{line} imports private {target}.{n}")
    return bad


def cycles(g: Dict[str, Set[str]]) -> List[List[str]]:
    """Strongly connected components with more than one module (Tarjan), each sorted."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on_stack: Set[str] = set()
    out: List[List[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in g.get(v, ()):
            if w not in g:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return out


def _examples() -> Dict[str, str]:
    paths: Iterable[pathlib.Path] = [*sorted((ROOT / "tests").glob("*.py")),
                                     *sorted((ROOT / "docs").rglob("*.py")),
                                     *sorted((ROOT / "benchmarks").glob("*.py"))]
    return {f"<{p.relative_to(ROOT)}>": p.read_text() for p in paths}


SOURCES = project_sources()


def test_every_package_folder_is_in_the_wheel():
    """pyproject's explicit package list names every folder with an __init__.py (and nothing else)."""
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    found = {m for m, _ in SOURCES.items() if any(o.startswith(m + ".") for o in SOURCES)}
    found |= {m for m in SOURCES if (package_dirs().get(m) or pathlib.Path("/nonexistent")).is_dir()}
    listed = set(cfg["packages"])
    assert found == listed, (sorted(found - listed), sorted(listed - found))


def test_layers_import_one_way():
    assert layering_violations(SOURCES) == []


def test_no_import_circles():
    assert cycles(graph(SOURCES)) == []


def test_no_private_names_across_modules():
    assert private_imports(SOURCES, _examples()) == []


@pytest.mark.parametrize("planted, kind", [
    ({"depthcraft.constructions.planted": "from depthcraft.verify import lookup\n"}, "layer"),
    ({"depthcraft.rasp_programs.planted": "def f():\n    from depthcraft.constructions.catalogue import get\n"},
     "layer"),
    ({"depthcraft.verify.planted_a": "from depthcraft.verify import planted_b\n",
      "depthcraft.verify.planted_b": "import depthcraft.verify.planted_a\n"}, "circle"),
    ({"depthcraft.verify.planted": "from depthcraft.verify.checks import _private_helper\n"}, "private"),
])
def test_the_checks_catch_a_planted_violation(planted, kind):
    """Each check fails on a planted back-import, circle or private import (so the tests above can fail)."""
    sources = {**SOURCES, **planted}
    found = {"layer": layering_violations(sources), "circle": cycles(graph(sources)),
             "private": private_imports(sources)}[kind]
    assert found, f"a planted {kind} violation was not caught"
    assert any(any(p in str(item) for p in planted) for item in found)
