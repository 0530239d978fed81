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
    if os.environ.get(ENV, "").strip().lower() == "default" or not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # musl and others: no mallopt
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    _state["applied"] = all(mallopt(param, value) == 1 for param, value in SETTINGS.values())
    return _state["applied"]


__all__ = ["ENV", "SETTINGS", "keep_freed_memory"]
