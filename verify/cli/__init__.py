"""The ``depthcraft`` command line (click).

One module per command or group of commands, each parsing its options, calling the
library and printing: :mod:`~depthcraft.verify.cli.catalogue` (``list``),
:mod:`~depthcraft.verify.cli.verify` (``verify``),
:mod:`~depthcraft.verify.cli.check` (``check``: a user's own RASP program file), :mod:`~depthcraft.verify.cli.run`
(``run``, ``show``), :mod:`~depthcraft.verify.cli.explore` (``explore``),
:mod:`~depthcraft.verify.cli.saved` (``save``, ``verify-saved``),
:mod:`~depthcraft.verify.cli.certificates` (``check-certificate``),
:mod:`~depthcraft.verify.cli.precision` (``precision``), :mod:`~depthcraft.verify.cli.dedupe` (``dedupe``),
:mod:`~depthcraft.verify.cli.train` (``train``), :mod:`~depthcraft.verify.cli.claims` (``claims``), :mod:`~depthcraft.verify.cli.docs` (``docs``)
and :mod:`~depthcraft.verify.cli.published` (``published``). Shared options live in
:mod:`~depthcraft.verify.cli.options`, output in :mod:`~depthcraft.verify.cli.render`.
Every command is registered here, in :data:`COMMANDS`.

Exit status: 0 when every check passed, 1 when a check failed, 2 on bad usage or
bad input or an interrupted run (one message on stderr, wrapped at the terminal's width,
no traceback, no partial files: every file is written to a temporary name and renamed
when complete).
"""

from __future__ import annotations

import sys
from typing import List, Optional

import click

from depthcraft.constructions.allocator import keep_freed_memory
from depthcraft.constructions.devices import use_cpu_devices
from depthcraft.constructions.errors import DepthcraftError
from depthcraft.verify.cli import (catalogue, certificates, check, claims, dedupe, docs, explore, precision,
                                   published, run, saved, train, verify)
from depthcraft.verify.cli.render import err_console
from depthcraft.verify.views.text import wrap

#: The one line printed (on stderr) when a run is interrupted.
INTERRUPTED = "depthcraft: error: interrupted; nothing was written"


class Interrupted(Exception):
    """Ctrl-C inside a command (raised instead of KeyboardInterrupt, which click answers with a blank line)."""


class Group(click.Group):
    """The ``depthcraft`` group: an interrupt in a command becomes :class:`Interrupted` for :func:`main`."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            raise Interrupted() from None


@click.group(cls=Group, context_settings={"help_option_names": ["-h", "--help"]})
def cli() -> None:
    """depthcraft: executable depth bounds for transformers (RASP -> tracr -> verified weights)."""


#: Every command of the group.
COMMANDS = (catalogue.list_cmd, verify.verify_cmd, check.check_cmd, run.run_cmd, run.show_cmd, explore.explore_cmd,
            saved.save_cmd, saved.verify_saved_cmd, precision.precision_cmd, train.train_cmd, claims.claims_cmd, docs.docs_cmd,
            dedupe.dedupe_cmd, published.published_cmd, certificates.check_certificate_cmd)
for _command in COMMANDS:
    cli.add_command(_command)


def error_lines(message: str) -> List[str]:
    """An error message as printed: wrapped at the terminal's width (``COLUMNS`` when set; continuation
    lines indented by two spaces) when standard error is a terminal; one line otherwise (a pipe, a log:
    one line per error for the scripts that read it)."""
    if not sys.stderr.isatty():
        return [message]
    return wrap(message, err_console.size.width, hanging="  ")


def _error(message: str) -> None:
    for line in error_lines(message):
        err_console.print(line, markup=False, highlight=False, emoji=False)


def main(argv: Optional[List[str]] = None) -> None:
    """Console-script entry point: runs the CLI with one-line errors for bad usage or input.

    Args:
        argv: the arguments after ``depthcraft`` (default: ``sys.argv[1:]``).
    Raises:
        SystemExit: always; 0, 1 (a check failed) or 2 (bad usage or input, or interrupted).
    """
    try:
        use_cpu_devices()  # $DEPTHCRAFT_CPU_DEVICES host devices for the checks, before JAX starts
        cli.main(args=argv, prog_name="depthcraft", standalone_mode=False)
    except click.exceptions.Exit as e:
        sys.exit(e.exit_code)
    except (Interrupted, KeyboardInterrupt, click.Abort):
        # On a terminal, return to the start of the line and clear it: the "^C" echo goes, one line stays.
        prefix = "\r\x1b[K" if sys.stderr.isatty() else ""
        sys.stderr.write(prefix)
        _error(INTERRUPTED)
        sys.exit(2)
    except click.ClickException as e:  # usage errors, bad option values, unreadable files
        _error(f"depthcraft: error: {e.format_message()}")
        sys.exit(2)
    except DepthcraftError as e:
        _error(f"depthcraft: error: {e}")
        sys.exit(2)
    sys.exit(0)


def entry() -> None:
    """The ``depthcraft`` console script and ``python -m depthcraft``: :func:`main` in a process
    whose ``malloc`` keeps freed buffers for reuse (:func:`constructions.allocator.keep_freed_memory`:
    no page faults per runtime call). A Python caller of :func:`main` (the tests, a notebook) keeps
    its own ``malloc`` settings.

    Raises:
        SystemExit: as :func:`main`.
    """
    keep_freed_memory()
    main()


__all__ = ["COMMANDS", "INTERRUPTED", "cli", "entry", "error_lines", "main"]
