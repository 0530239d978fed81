"""Writers for result files (JSON, text, PNG), all atomic.

Each goes through :func:`constructions.io.atomic_write`: a temporary file in the
target directory, renamed into place when complete, so an interrupted run never
leaves a half-written file.
"""

from __future__ import annotations

import json
from typing import Any, Optional, Sequence

import numpy as np

from depthcraft.constructions.errors import ParameterError
from depthcraft.constructions.io import atomic_write, check_writable


def check_outputs(outputs: Sequence[Optional[str]], inputs: Sequence[str] = ()) -> None:
    """Before any work: every output path writable, no two the same file, none an input file.

    Args:
        outputs: output paths (None entries are skipped).
        inputs: files the command reads (e.g. a saved model), which must not be overwritten.
    Raises:
        ParameterError: an unwritable path, two outputs naming one file, or an output that is an input.
    """
    import os

    seen = {}
    ins = {os.path.realpath(p) for p in inputs}
    for path in outputs:
        if path is None:
            continue
        check_writable(path)
        real = os.path.realpath(path)
        if real in ins:
            raise ParameterError(f"cannot write {path}: it is an input of this command (it would be overwritten)")
        if real in seen:
            raise ParameterError(f"cannot write {path} twice: {seen[real]} names the same file")
        seen[real] = path


def write_json_atomic(path: str, data: Any) -> None:
    """Write ``data`` as indented JSON (numpy scalars and arrays converted) to ``path`` atomically.

    Raises:
        ParameterError: the path is not writable.
    """
    def write(tmp: str) -> None:
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=2, default=_json_default)
            f.write("\n")

    atomic_write(path, write, suffix=".json")


def _json_default(o):
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def write_bytes_atomic(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (used for checkpoints' arrays and metadata).

    Raises:
        ParameterError: the path is not writable.
    """
    def write(tmp: str) -> None:
        with open(tmp, "wb") as f:
            f.write(data)

    atomic_write(path, write)


def write_text_atomic(path: str, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically.

    Raises:
        ParameterError: the path is not writable.
    """
    def write(tmp):
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)

    atomic_write(path, write, suffix=".txt")


def save_figure_atomic(fig, path: str, dpi: int = 120) -> None:
    """Save a matplotlib figure as PNG to ``path`` atomically.

    Raises:
        ParameterError: the path is not writable.
    """
    atomic_write(path, lambda tmp: fig.savefig(tmp, dpi=dpi, format="png", bbox_inches="tight"), suffix=".png")
