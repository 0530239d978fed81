"""glibc ``malloc`` settings that keep freed buffers for reuse (the command line's default).

XLA's CPU runtime allocates every call's intermediate buffers with ``malloc`` and frees them
when the call returns. glibc serves a block above its *mmap threshold* (128 KiB at start,
raised on the fly up to 32 MiB) with fresh pages from ``mmap`` and gives them back to the
kernel on ``free``, so a call whose buffers are megabytes (an attention map of 1025 x 1025
float32 is 4 MiB) faults every page of its working set in again on every call. Measured
(docs/performance.md, "Page faults"): ``depthcraft verify khop_constant_width -p k=16
-p n=1024 --samples 200`` on one core spent 20 s of its 87 s in the kernel, 5.5 million
minor page faults; with the settings below, 0.8 s and 0.13 million, and 57 s of wall time.

:func:`keep_freed_memory` raises the mmap threshold to 256 MiB, the trim threshold to
512 MiB and the top pad to 64 MiB with ``mallopt``, so such blocks come from the heap and
are reused call after call. The cost: freed memory stays with the process (the peak RSS of
that command rose from 570 to 695 MiB). The ``depthcraft`` command calls it once at start
(``verify.cli.entry``); a Python user of the API may call it too. It changes ``malloc`` for the
whole process, so neither the library's import nor ``verify.cli.main`` calls it.

Set ``DEPTHCRAFT_MALLOC=default`` to leave ``malloc`` as it is. Other C libraries
(macOS, Windows, musl) are left alone.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import sys
from typing import Dict

#: Environment variable; ``default`` leaves malloc's own settings.
ENV = "DEPTHCRAFT_MALLOC"
#: glibc ``mallopt`` parameters (malloc.h) and the values set, bytes.
SETTINGS: Dict[str, tuple] = {
    "M_TRIM_THRESHOLD": (-1, 512 << 20),
    "M_TOP_PAD": (-2, 64 << 20),
    "M_MMAP_THRESHOLD": (-3, 256 << 20),
}

_state = {"done": False, "applied": False}


def keep_freed_memory() -> bool:
    """Apply :data:`SETTINGS` with glibc's ``mallopt`` (once per process).

    Returns:
        True when the settings are in force (glibc Linux, not disabled by
        ``DEPTHCRAFT_MALLOC=default``); False otherwise. Never raises: a C library
        without ``mallopt`` is left as it is.
    """
    if _state["done"]:
        return _state["applied"]
    _state["done"] = True
    if os.environ.get(ENV, "").strip().lower() == "default":
        return False
    libc = _libc()
    mallopt = getattr(libc, "mallopt", None) if libc is not None else None
    if mallopt is None:  # musl and others: no mallopt
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    _state["applied"] = all(mallopt(param, value) == 1 for param, value in SETTINGS.values())
    return _state["applied"]


@functools.lru_cache(maxsize=1)
def _libc():
    """glibc's ``libc`` through ctypes, or None where there is none (macOS, Windows, musl)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None


def return_free_heap() -> bool:
    """Give the heap's free pages back to the operating system (glibc ``malloc_trim(0)``).

    Freed ``malloc`` memory normally stays mapped in the process, so its resident set
    size does not fall when Python drops large objects. Call after releasing them (see
    :func:`depthcraft.release_memory`).

    Returns:
        True when glibc released at least one page; False when nothing was released or
        the C library has no ``malloc_trim``. Never raises.
    """
    libc = _libc()
    trim = getattr(libc, "malloc_trim", None) if libc is not None else None
    if trim is None:
        return False
    trim.argtypes, trim.restype = (ctypes.c_size_t,), ctypes.c_int
    return trim(0) == 1


__all__ = ["ENV", "SETTINGS", "keep_freed_memory", "return_free_heap"]
