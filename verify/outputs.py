"""Atomic writers for result files other than JSON (JSON: :func:`verify.cli.write_json_atomic`).

Each writes to a temporary file in the target directory and renames it into
place, so an interrupted run never leaves a half-written file.
"""

from __future__ import annotations

import os
import tempfile
from typing import Callable

from constructions.errors import ParameterError


def _atomic(path: str, suffix: str, write: Callable[[str], None]) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise ParameterError(f"cannot write {path}: directory {directory} does not exist")
    fd, tmp = tempfile.mkstemp(prefix=".depthcraft-", suffix=suffix, dir=directory)
    os.close(fd)
    try:
        write(tmp)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; give the file the usual permissions
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_text_atomic(path: str, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically.

    Raises:
        ParameterError: the directory does not exist.
    """
    def write(tmp):
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)

    _atomic(path, ".txt", write)


def save_figure_atomic(fig, path: str, dpi: int = 120) -> None:
    """Save a matplotlib figure as PNG to ``path`` atomically.

    Raises:
        ParameterError: the directory does not exist.
    """
    _atomic(path, ".png", lambda tmp: fig.savefig(tmp, dpi=dpi, format="png", bbox_inches="tight"))
