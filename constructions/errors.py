"""Error types shared by the whole project.

Every error a user can cause by bad input derives from :class:`DepthcraftError`;
the CLI turns these into a one-line message and exit status 2. Anything else
that escapes is a bug and keeps its traceback.
"""

from __future__ import annotations

import difflib
from typing import Iterable, List


class DepthcraftError(ValueError):
    """Base class for errors caused by bad user input (parameters, tokens, files)."""


class ParameterError(DepthcraftError):
    """A construction or task parameter is missing, malformed or impossible."""


class InputError(DepthcraftError):
    """An input sequence is not valid for a model (unknown token, too long, empty)."""


class CompileError(DepthcraftError):
    """A RASP program cannot be compiled (tracr refused it, or a primitive was misused)."""


def closest(name: str, known: Iterable[str], n: int = 3) -> List[str]:
    """The known names closest to ``name`` (difflib's ratio, at least 0.6; best first; at most ``n``)."""
    known = list(known)
    lowered = {k.lower(): k for k in known}
    return [lowered[m] for m in difflib.get_close_matches(str(name).lower(), list(lowered), n=n, cutoff=0.6)]


def unknown_name(kind: str, name: str, known: Iterable[str]) -> str:
    """``unknown construction 'khop_dubling'; did you mean khop_doubling?``, or the known names when none is close.

    The one wording of every "unknown NAME" error (constructions, parameters, tasks, options).
    """
    known = list(known)
    near = closest(name, known)
    if near:
        return f"unknown {kind} {name!r}; did you mean {' or '.join(near)}?"
    return f"unknown {kind} {name!r}; known: {', '.join(known)}"
