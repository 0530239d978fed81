"""Error types shared by the whole project.

Every error a user can cause by bad input derives from :class:`DepthcraftError`;
the CLI turns these into a one-line message and exit status 2. Anything else
that escapes is a bug and keeps its traceback.
"""

from __future__ import annotations


class DepthcraftError(ValueError):
    """Base class for errors caused by bad user input (parameters, tokens, files)."""


class ParameterError(DepthcraftError):
    """A construction or task parameter is missing, malformed or impossible."""


class InputError(DepthcraftError):
    """An input sequence is not valid for a model (unknown token, too long, empty)."""


class CompileError(DepthcraftError):
    """A RASP program cannot be compiled (tracr refused it, or a primitive was misused)."""
