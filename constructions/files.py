"""Writing files safely: atomic, symlink-safe writers and the one numpy-to-JSON converter.

Every file the project writes (saved models, reports, results, figures, training
checkpoints) goes through :func:`atomic_write`: the content is written to a
temporary file in the target's directory, flushed to disk, given the replaced
file's permissions (or the umask's), then renamed over the target. An
interrupted or failed write (KeyboardInterrupt included) removes the temporary
file and leaves the old file or nothing, never half a file. A symlink is written
through (its target is replaced, the link stays); a directory, a device, a FIFO
or a socket is refused before anything is written (the rename would replace
it), and so is a symlink loop.

:func:`to_json` is the one conversion of results to JSON values (numpy scalars
and arrays, tuples, sets, non-finite floats, objects with a ``to_json()``
method): used by :func:`write_json_atomic` and :func:`json_text` and by every
API that returns JSON, so files and returned reports are the same strict JSON.
"""

from __future__ import annotations

import json
import math
import os
import stat
import tempfile
from typing import Any, Callable, Dict, Mapping, Optional, Sequence

import numpy as np

from depthcraft.constructions.errors import ParameterError


# ---------------------------------------------------------------------------------------------
# Atomic files
# ---------------------------------------------------------------------------------------------


def check_writable(path: str) -> None:
    """Raise ParameterError unless ``path`` can be created or replaced by a regular file.

    Checks that the path is not empty and does not name a directory (``out/``),
    that the directory exists, that an existing target is a regular file (a
    symlink is followed to its target; a device or FIFO is refused, since the
    atomic rename would replace it), the permissions, and finally creates and
    removes a probe file in the directory.

    Raises:
        ParameterError: naming the path and the reason (empty path, a directory, a missing
            directory, not a regular file, a symlink loop, permission denied, or the OS's
            reason the probe file could not be created).
    """
    if not isinstance(path, str) or not path.strip():
        raise ParameterError(f"cannot write {path!r}: empty path")
    if path.endswith(os.sep) or os.path.isdir(path):
        raise ParameterError(f"cannot write {path}: it is a directory")
    if os.path.islink(path):
        try:
            os.path.realpath(path, strict=True)
        except FileNotFoundError:
            pass  # a dangling link: its target is created
        except OSError:
            raise ParameterError(f"cannot write {path}: a symlink loop") from None
    real = os.path.realpath(path)
    directory = os.path.dirname(real)
    if not os.path.isdir(directory):
        raise ParameterError(f"cannot write {path}: directory {directory} does not exist")
    if os.path.exists(real) and not os.path.isfile(real):
        raise ParameterError(f"cannot write {path}: not a regular file (a device, FIFO or socket)")
    if not os.access(directory, os.W_OK) or (os.path.exists(real) and not os.access(real, os.W_OK)):
        raise ParameterError(f"cannot write {path}: permission denied")
    try:  # the only reliable test (root ignores permissions; read-only or virtual file systems)
        fd, probe = tempfile.mkstemp(prefix=".depthcraft-probe-", dir=directory)
    except OSError as e:
        raise ParameterError(f"cannot write {path}: {e.strerror or e}") from None
    os.close(fd)
    os.unlink(probe)


def check_outputs(outputs: Sequence[Optional[str]], inputs: Sequence[str] = ()) -> None:
    """Before any work: every output path writable, no two the same file, none an input file.

    Args:
        outputs: output paths (None entries are skipped).
        inputs: files the command reads (e.g. a saved model), which must not be overwritten.
    Raises:
        ParameterError: an unwritable path, two outputs naming one file, or an output that is an input.
    """
    seen: Dict[str, str] = {}
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


def _mode_for(path: str) -> int:
    """Permissions for a new file at ``path``: the replaced file's, else 0o666 minus the umask."""
    if os.path.exists(path):
        return stat.S_IMODE(os.stat(path).st_mode)
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def atomic_write(path: str, write: Callable[[str], None], suffix: str = "") -> None:
    """Create ``path`` through ``write(tmp_path)`` on a temporary file in the same directory, then rename.

    The temporary file is removed on any error or interrupt (KeyboardInterrupt
    included), so ``path`` is either the complete new file or untouched.

    Args:
        path: the file to create or replace (a symlink is written through).
        write: writes the whole content to the temporary path it is given.
        suffix: the temporary file's suffix (some writers pick the format by it).
    Raises:
        ParameterError: the path is not writable (see :func:`check_writable`) or the
            write fails (disk full, read-only file system: the OS reason is named).
    """
    check_writable(path)
    target = os.path.realpath(path)  # a symlink is written through, not replaced
    directory = os.path.dirname(target)
    try:
        fd, tmp = tempfile.mkstemp(prefix=".depthcraft-", suffix=suffix or ".tmp", dir=directory)
    except OSError as e:
        raise ParameterError(f"cannot write {path}: {e.strerror or e}") from None
    os.close(fd)
    try:
        write(tmp)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.chmod(tmp, _mode_for(target))
        os.replace(tmp, target)
    except OSError as e:
        _remove(tmp)
        raise ParameterError(f"cannot write {path}: {e.strerror or e}") from None
    except BaseException:
        _remove(tmp)
        raise


def _remove(tmp: str) -> None:
    if os.path.exists(tmp):
        os.unlink(tmp)


def write_bytes_atomic(path: str, data: bytes, suffix: str = "") -> None:
    """Write ``data`` to ``path`` atomically (e.g. a checkpoint's safetensors arrays).

    Raises:
        ParameterError: the path is not writable.
    """
    def write(tmp: str) -> None:
        with open(tmp, "wb") as f:
            f.write(data)

    atomic_write(path, write, suffix=suffix)


def write_text_atomic(path: str, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically.

    Raises:
        ParameterError: the path is not writable.
    """
    def write(tmp: str) -> None:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)

    atomic_write(path, write, suffix=".txt")


def write_json_atomic(path: str, data: Any) -> None:
    """Write ``data`` as indented strict JSON (:func:`json_text`) to ``path`` atomically.

    Raises:
        ParameterError: the path is not writable.
    """
    text = json_text(data)  # converted before the file is opened: a conversion error writes nothing

    def write(tmp: str) -> None:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)

    atomic_write(path, write, suffix=".json")


def save_figure_atomic(fig: Any, path: str, dpi: int = 120, tight: bool = True) -> None:
    """Save a matplotlib figure as PNG to ``path`` atomically.

    Args:
        fig: a ``matplotlib.figure.Figure``.
        path: the ``.png`` file.
        dpi: resolution in dots per inch.
        tight: crop to the drawn content (False: keep the figure's size, e.g. a 16:9 slide).
    Raises:
        ParameterError: the path is not writable.
    """
    bbox = "tight" if tight else None
    atomic_write(path, lambda tmp: fig.savefig(tmp, dpi=dpi, format="png", bbox_inches=bbox), suffix=".png")


# ---------------------------------------------------------------------------------------------
# JSON values
# ---------------------------------------------------------------------------------------------


def to_json(obj: Any) -> Any:
    """A strict-JSON copy of ``obj`` (what every report, result file and checkpoint record holds).

    * dicts (any mapping): keys become strings (``True`` / ``None`` as JSON writes
      them, ``"true"`` / ``"null"``; numpy scalars as their Python value);
    * lists and tuples: lists; sets and frozensets: sorted lists (sorted by value
      when comparable, else by their JSON text), so the output does not depend on
      hash order;
    * numpy arrays: nested lists; numpy scalars: the Python scalar;
    * non-finite floats: the strings ``"nan"``, ``"inf"``, ``"-inf"`` (JSON has no
      NaN; ``float(s)`` reads them back);
    * an object with a ``to_json()`` method: what that returns, converted in turn
      (e.g. a reference that raised becomes ``"error: <type>: <message>"``);
    * any other object: its ``repr``.

    Returns:
        A value made of dict, list, str, int, float (finite), bool and None only.
    """
    if isinstance(obj, Mapping):
        return {_key(k): to_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_json(v) for v in obj]
    if isinstance(obj, (set, frozenset)):
        items = [to_json(v) for v in obj]
        try:
            return sorted(items)
        except TypeError:
            return sorted(items, key=lambda v: json.dumps(v, sort_keys=True))
    if isinstance(obj, np.ndarray):
        return to_json(obj.tolist())
    if isinstance(obj, np.generic):
        return to_json(obj.item())
    if isinstance(obj, float) and not math.isfinite(obj):
        return str(obj)
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    method = getattr(obj, "to_json", None)
    if callable(method) and not isinstance(obj, type):
        return to_json(method())
    return repr(obj)


def _key(k: Any) -> str:
    if isinstance(k, np.generic):
        k = k.item()
    if k is None or isinstance(k, bool):
        return json.dumps(k)
    return k if isinstance(k, str) else str(k)


def json_text(data: Any, indent: Optional[int] = 2) -> str:
    """``data`` as strict JSON text (through :func:`to_json`), ending in a newline."""
    return json.dumps(to_json(data), indent=indent, allow_nan=False) + "\n"


__all__ = ["check_writable", "check_outputs", "atomic_write", "write_bytes_atomic", "write_text_atomic",
           "write_json_atomic", "save_figure_atomic", "to_json", "json_text"]
