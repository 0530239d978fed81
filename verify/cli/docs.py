"""``depthcraft docs [--check]``: regenerate the generated blocks of README.md and docs/ from results/.

The docs generator is a repository tool, not part of the installed package: ``tools/docgen.py``
of the checkout named by ``--root`` (default: the current folder). This command imports it
from there, calls :func:`tools.docgen.run` and prints one line per page written (or, with
``--check``, per stale page, exiting 1 when any is). Outside a checkout it exits 2 saying so.
"""

from __future__ import annotations

import importlib
import pathlib
import sys

import click

from depthcraft.constructions.errors import ParameterError
from depthcraft.verify.cli.render import echo


def load_docgen(root: pathlib.Path):
    """The ``tools.docgen`` module of the checkout at ``root`` (imported with ``root`` first on ``sys.path``).

    Raises:
        ParameterError: ``root`` has no ``tools/docgen.py`` (not a checkout of the repository).
    """
    if not (root / "tools" / "docgen.py").is_file():
        raise ParameterError(f"{root} has no tools/docgen.py: depthcraft docs regenerates the pages of a checkout "
                             f"of the repository (run it from its root, or give --root)")
    loaded = sys.modules.get("tools.docgen")
    if loaded is not None and pathlib.Path(loaded.__file__).resolve() == (root / "tools" / "docgen.py").resolve():
        return loaded
    for name in [m for m in sys.modules if m == "tools" or m.startswith("tools.")]:
        del sys.modules[name]  # another checkout's tools (or none): import this root's
    sys.path.insert(0, str(root))
    try:
        return importlib.import_module("tools.docgen")
    finally:
        sys.path.remove(str(root))


@click.command("docs")
@click.option("--root", default=".", show_default=True, type=click.Path(file_okay=False, exists=True),
              help="Project root (holds README.md, docs/, results/ and tools/docgen.py).")
@click.option("--check", is_flag=True, help="Write nothing; exit 1 if a page is stale.")
def docs_cmd(root, check) -> None:
    """Regenerate the tables in README.md and docs/ from results/ (--check: only compare); from a checkout."""
    base = pathlib.Path(root).resolve()
    docgen = load_docgen(base)
    stale = docgen.run(base, check=check)
    for page in stale:
        echo(f"{'stale' if check else 'updated'}: {page.relative_to(base)}")
    sys.exit(1 if check and stale else 0)


__all__ = ["docs_cmd", "load_docgen"]
