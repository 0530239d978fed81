"""Executable docs: tutorials, the pitfalls page, the README snippet, module examples, the example test file.

Every ``docs/tutorials/*.md`` is picked up automatically: its ``pycon`` blocks run as one doctest
session (verify.cli.doctools.run_markdown) and must reproduce the outputs shown.
"""

import contextlib
import doctest
import importlib
import importlib.util
import io
import pathlib
import re

import pytest

from depthcraft.verify.cli import doctools

ROOT = pathlib.Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = sorted((DOCS / "tutorials").glob("*.md")) + [DOCS / "pitfalls.md"]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(DOCS)))
def test_markdown_page_runs_as_shown(page):
    failed, attempted, report = doctools.run_markdown(str(page))
    assert attempted > 0, f"{page} has no pycon examples"
    assert failed == 0, report


def test_every_construction_tutorial_is_found():
    names = {p.stem for p in (DOCS / "tutorials").glob("*.md")}
    assert {"khop_doubling", "khop_rasp"} <= names


@pytest.mark.parametrize("module", ["depthcraft.verify.api", "depthcraft.verify.cli.doctools"])
def test_module_examples(module):
    result = doctest.testmod(importlib.import_module(module), optionflags=doctools.OPTIONS)
    assert result.attempted > 0 and result.failed == 0


def test_readme_snippet_runs_as_shown():
    text = (DOCS.parent / "README.md").read_text()
    code = re.search(r"```python\n(.*?)```", text, re.S).group(1)
    shown = re.search(r"```python\n.*?```\s*```text\n(.*?)```", text, re.S).group(1)
    assert len([ln for ln in code.splitlines() if ln.strip()]) <= 10
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "README snippet", "exec"), {"__name__": "__readme__"})
    assert out.getvalue() == shown


def test_example_test_file_passes():
    path = DOCS / "examples" / "test_my_program.py"
    spec = importlib.util.spec_from_file_location("docs_example_test_my_program", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    tests = [getattr(module, n) for n in dir(module) if n.startswith("test_")]
    assert len(tests) == 3
    for t in tests:
        t()
