"""Executable docs: run ``depthcraft`` command lines in-process and run the ``pycon`` blocks of markdown files.

The tutorials (``docs/tutorials/*.md``) and the pitfalls page are markdown whose
```` ```pycon ```` blocks are doctest sessions; :func:`run_markdown` runs them in
order in one namespace and reports mismatches, and ``tests/test_docs.py`` runs
every such file, so the docs cannot drift from the code.

>>> from depthcraft.verify.cli.doctools import depthcraft
>>> depthcraft("depthcraft verify nope")  # doctest: +ELLIPSIS
depthcraft: error: unknown construction 'nope'; known: ...
[exit status 2]
"""

from __future__ import annotations

import contextlib
import doctest
import io
import os
import re
import shlex
import sys
from typing import Tuple

#: Doctest options for the docs: ``...`` matches anything; whitespace runs compare equal.
OPTIONS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
_BLOCK = re.compile(r"^```pycon[^\n]*\n(.*?)^```", re.M | re.S)


#: The terminal width the examples are printed at (``COLUMNS``), so that they read the same everywhere.
COLUMNS = 80


def depthcraft(line: str) -> None:
    """Run one command line (``"depthcraft show ..."``; the leading ``depthcraft`` is optional).

    Prints what the command prints at :data:`COLUMNS` columns (stdout, then stderr) and,
    when the exit status is not 0, a last line ``[exit status N]``.
    """
    from depthcraft.verify.cli import main

    args = shlex.split(line)
    if args and args[0] == "depthcraft":
        args = args[1:]
    err = io.StringIO()
    code = 0
    saved = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = str(COLUMNS)
    try:
        with contextlib.redirect_stderr(err):
            try:
                main(args)
            except SystemExit as e:
                code = e.code or 0
    finally:
        if saved is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = saved
    sys.stdout.write(err.getvalue())
    if code:
        print(f"[exit status {code}]")


def pycon_blocks(text: str) -> str:
    """The ``pycon`` fenced blocks of a markdown text, joined in order (one doctest session)."""
    return "\n".join(m.group(1) for m in _BLOCK.finditer(text))


def run_markdown(path: str, verbose: bool = False) -> Tuple[int, int, str]:
    """Run the ``pycon`` blocks of the markdown file ``path`` as one doctest session.

    Returns:
        (failed examples, attempted examples, the doctest report of the failures).
    """
    with open(path, encoding="utf-8") as f:
        text = f.read()
    test = doctest.DocTestParser().get_doctest(pycon_blocks(text), {"__name__": "__docs__"}, path, path, 0)
    runner = doctest.DocTestRunner(verbose=verbose, optionflags=OPTIONS)
    out = io.StringIO()
    runner.run(test, out=out.write)
    result = runner.summarize(verbose=False)
    return result.failed, result.attempted, out.getvalue()


if __name__ == "__main__":  # python -m depthcraft.verify.cli.doctools FILE.md ...: run docs, exit 1 on a mismatch
    bad = 0
    for p in sys.argv[1:]:
        failed, attempted, report = run_markdown(p)
        print(f"{p}: {attempted - failed}/{attempted} examples ok")
        if failed:
            print(report)
            bad += 1
    sys.exit(1 if bad else 0)
