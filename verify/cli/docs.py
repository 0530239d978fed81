"""``depthcraft docs [--check]``: regenerate the generated blocks of README.md and docs/ from results/.

The work is :func:`depthcraft.verify.docgen.run`; this command parses, calls and prints
one line per page written (or, with ``--check``, per stale page, exiting 1 when any is).
"""

from __future__ import annotations

import pathlib
import sys

import click

from depthcraft.verify.cli.render import echo


@click.command("docs")
@click.option("--root", default=".", show_default=True, type=click.Path(file_okay=False, exists=True),
              help="Project root (holds README.md, docs/ and results/).")
@click.option("--check", is_flag=True, help="Write nothing; exit 1 if a page is stale.")
def docs_cmd(root, check) -> None:
    """Regenerate the tables in README.md and docs/ from results/ (--check: only compare)."""
    from depthcraft.verify import docgen

    base = pathlib.Path(root).resolve()
    stale = docgen.run(base, check=check)
    for page in stale:
        echo(f"{'stale' if check else 'updated'}: {page.relative_to(base)}")
    sys.exit(1 if check and stale else 0)


__all__ = ["docs_cmd"]
