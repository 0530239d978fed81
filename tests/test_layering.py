"""The package's shape: one import package, layers that import one way, no circles, no private imports.

The layers and the import parser live in :mod:`tools.architecture` (a repository tool, not installed) (the docs
generator draws ``docs/architecture.md``'s module table from the same code). Every ``import``
statement counts, including those inside functions (a lazy import is still a dependency). The
checks read the sources, so a planted back-import or circle is caught without importing it.
"""

from __future__ import annotations

import pathlib
import tomllib

import pytest

from tools import architecture as arch

ROOT = pathlib.Path(__file__).resolve().parents[1]
SOURCES = arch.sources()


def _examples():
    paths = [*sorted((ROOT / "tests").glob("*.py")), *sorted((ROOT / "docs").rglob("*.py")),
             *sorted((ROOT / "benchmarks").glob("*.py"))]
    return {f"<{p.relative_to(ROOT)}>": p.read_text() for p in paths}


def test_every_package_folder_is_in_the_wheel():
    """pyproject's explicit package list is exactly the packages (folders with __init__.py)."""
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    packages = {m for m, path in arch.module_files().items() if path.name == "__init__.py"}
    assert packages == listed, (sorted(packages - listed), sorted(listed - packages))


def test_every_module_has_a_layer_and_a_summary():
    for m, source in SOURCES.items():
        arch.layer(m)
        assert arch.summary_line(source), f"{m} has no docstring"


def test_layers_import_one_way():
    assert arch.layering_violations(SOURCES) == []


def test_no_import_circles():
    assert arch.cycles(arch.graph(SOURCES)) == []


def test_no_private_names_across_modules():
    assert arch.private_imports(SOURCES, _examples()) == []


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
    known = {**SOURCES, **planted}
    found = {"layer": arch.layering_violations(known), "circle": arch.cycles(arch.graph(known)),
             "private": arch.private_imports(known)}[kind]
    assert any(any(p in str(item) for p in planted) for item in found), f"a planted {kind} violation was missed"


def test_layer_refuses_a_foreign_module():
    with pytest.raises(ValueError, match="numpy"):
        arch.layer("numpy")
