"""The package's architecture, read from its sources: modules, layers, the import graph.

depthcraft is one import package in layers that import one way (SPEC §2)::

    depthcraft                      facade: the public API, imported lazily     (layer 5)
      depthcraft.verify.cli         the command line                             (layer 4)
      depthcraft.verify             tasks, checks, verifier, API, views,
                                    cross-check                                  (layer 3)
      depthcraft.constructions.catalogue
                                    named constructions: registry + families     (layer 2)
      depthcraft.rasp_programs      the constructions as RASP programs           (layer 1)
      depthcraft.constructions      core: primitives, heads, compiler, model,
                                    runtime, io                                  (layer 0)

A module may import from its own layer and the layers below. This module finds
every module of the installed package, parses its imports (those inside
functions too: a lazy import is still a dependency) and reports back-imports,
import circles and imports of private names; ``tests/test_layering.py`` fails
on any of them, and :mod:`tools.docgen` draws the module table of
``docs/architecture.md`` from it.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import pathlib
from typing import Dict, Iterable, List, Mapping, Optional, Set, Tuple

#: The layers, lowest first: (number, name, what lives there).
LAYERS: Tuple[Tuple[int, str, str], ...] = (
    (0, "checker", "depthcraft.checker: the independent certificate checker (stdlib, numpy, safetensors and "
                   "tracr.rasp only; nothing else of depthcraft)"),
    (1, "core", "depthcraft.constructions: hand-built heads, compiler, model, runtime, io"),
    (2, "rasp_programs", "depthcraft.rasp_programs: the constructions as RASP programs"),
    (3, "catalogue", "depthcraft.constructions.catalogue: named constructions, task, source, bound formulas"),
    (4, "verify", "depthcraft.verify: tasks, checks, verifier, API, views, cross-check"),
    (5, "cli", "depthcraft.verify.cli: the depthcraft command line (and the docs runner that drives it, cli.doctools)"),
    (6, "facade", "depthcraft: the public API"),
)

#: The subpackages that make up the installed package.
TOP_PACKAGES = ("depthcraft", "depthcraft.checker", "depthcraft.constructions", "depthcraft.rasp_programs",
                "depthcraft.verify")


def layer(module: str) -> int:
    """The layer number of a project module (see :data:`LAYERS`).

    Raises:
        ValueError: ``module`` is not part of depthcraft.
    """
    parts = module.split(".")
    if parts[0] == "depthcraft" and (len(parts) == 1 or parts[1] not in ("checker", "constructions", "rasp_programs",
                                                                         "verify")):
        return 6  # the facade: depthcraft/__init__.py, __main__.py, testing.py
    if module == "depthcraft.verify.cli" or module.startswith("depthcraft.verify.cli."):
        return 5
    if module.startswith("depthcraft.verify"):
        return 4
    if module.startswith("depthcraft.constructions.catalogue"):
        return 3
    if module.startswith("depthcraft.rasp_programs"):
        return 2
    if module.startswith("depthcraft.constructions"):
        return 1
    if module == "depthcraft.checker" or module.startswith("depthcraft.checker."):
        return 0
    raise ValueError(f"module {module!r} is not part of depthcraft")


def _package_folder(package: str) -> pathlib.Path:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ValueError(f"package {package!r} is not installed")
    return pathlib.Path(list(spec.submodule_search_locations)[0])


def module_files() -> Dict[str, pathlib.Path]:
    """Every module of the installed package: dotted name -> source file (``.py``)."""
    out: Dict[str, pathlib.Path] = {}
    for package in TOP_PACKAGES:
        folder = _package_folder(package)
        files = sorted(folder.glob("*.py")) if package == "depthcraft" else folder.rglob("*.py")
        for path in files:
            if not path.is_file():
                continue
            parts = [p for p in path.relative_to(folder).with_suffix("").parts if p != "__init__"]
            out[".".join([package, *parts])] = path
    return out


def sources() -> Dict[str, str]:
    """Every module of the installed package: dotted name -> source text."""
    return {name: path.read_text(encoding="utf-8") for name, path in module_files().items()}


def _package_of(module: str, known: Mapping[str, str]) -> str:
    is_package = any(other.startswith(module + ".") for other in known)
    return module if is_package else module.rpartition(".")[0]


@functools.lru_cache(maxsize=None)
def _import_nodes(source: str) -> Tuple[ast.AST, ...]:
    """The import statements of a module's source, parsed once per source text (the checks run on the
    same sources many times)."""
    return tuple(n for n in ast.walk(ast.parse(source)) if isinstance(n, (ast.Import, ast.ImportFrom)))


def imports(module: str, source: str, known: Mapping[str, str]) -> List[Tuple[str, List[str], int]]:
    """The project imports of one module: (imported module, names taken from it, line).

    ``from a import b`` counts as an import of module ``a.b`` when that module exists,
    else as taking name ``b`` from ``a``. Relative imports are resolved.
    """
    out: List[Tuple[str, List[str], int]] = []
    for node in _import_nodes(source):
        if isinstance(node, ast.Import):
            out += [(a.name, [], node.lineno) for a in node.names
                    if a.name == "depthcraft" or a.name.startswith("depthcraft.")]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = _package_of(module, known)
                for _ in range(node.level - 1):
                    package = package.rpartition(".")[0]
                base = f"{package}.{base}" if base else package
            if not (base == "depthcraft" or base.startswith("depthcraft.")):
                continue
            names = [a.name for a in node.names]
            out += [(f"{base}.{n}", [], node.lineno) for n in names if f"{base}.{n}" in known]
            taken = [n for n in names if f"{base}.{n}" not in known]
            if taken:
                out.append((base, taken, node.lineno))
    return out


def graph(known: Mapping[str, str]) -> Dict[str, Set[str]]:
    """module -> the project modules it imports (itself excluded)."""
    return {m: {t for t, _, _ in imports(m, s, known) if t != m} for m, s in known.items()}


def layering_violations(known: Mapping[str, str]) -> List[str]:
    """Imports from a higher layer, one line each (``module:line imports target (layer a > b)``)."""
    bad = []
    for m, s in known.items():
        for target, _, line in imports(m, s, known):
            if target in known and layer(target) > layer(m):
                bad.append(f"{m}:{line} imports {target} (layer {layer(target)} > {layer(m)})")
    return bad


def private_imports(known: Mapping[str, str], extra: Optional[Mapping[str, str]] = None) -> List[str]:
    """``from depthcraft.x import _name`` across modules, one line each.

    ``extra`` adds importers that are not project modules (tests, examples), by a display name.
    """
    bad = []
    for m, s in {**known, **(extra or {})}.items():
        for target, names, line in imports(m, s, known):
            bad += [f"{m}:{line} imports private {target}.{n}" for n in names
                    if n.startswith("_") and not n.startswith("__") and target != m]
    return bad


def cycles(g: Mapping[str, Iterable[str]]) -> List[List[str]]:
    """The import circles: strongly connected components of more than one module (Tarjan), sorted."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on_stack: Set[str] = set()
    out: List[List[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
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
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return out


def summary_line(source: str) -> str:
    """The first line of a module's docstring ("" if it has none)."""
    doc = ast.get_docstring(ast.parse(source)) or ""
    return doc.strip().splitlines()[0].strip() if doc.strip() else ""


__all__ = ["LAYERS", "TOP_PACKAGES", "layer", "module_files", "sources", "imports", "graph",
           "layering_violations", "private_imports", "cycles", "summary_line"]
