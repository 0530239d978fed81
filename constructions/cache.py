"""The user's cache folder: JAX's persistent compilation cache and hypothesis's storage.

Every XLA compilation of the runtime (one per model architecture and batch shape) is
written to ``<cache>/jax`` and read back by later processes, so a second
``depthcraft verify`` of the same construction skips compilation (docs/performance.md,
"Checks"). Hypothesis keeps its files (example database, caches) in ``<cache>/hypothesis``
instead of a ``.hypothesis/`` folder in the working directory.

``<cache>`` is, in order:

* ``$DEPTHCRAFT_CACHE_DIR`` if set; set to ``off`` (or ``0``, ``none``, ``false``, or the
  empty string) to disable both caches;
* ``$XDG_CACHE_HOME/depthcraft`` if ``XDG_CACHE_HOME`` is set;
* ``~/Library/Caches/depthcraft`` on macOS, ``%LOCALAPPDATA%\\depthcraft\\Cache`` on Windows,
  ``~/.cache/depthcraft`` elsewhere (the platformdirs conventions).

Deleting the folder is always safe: it only holds caches.
"""

from __future__ import annotations

import os
import pathlib
import sys
from typing import Optional

#: Environment variable naming the cache folder (``off`` disables the caches).
ENV = "DEPTHCRAFT_CACHE_DIR"
#: Values of :data:`ENV` that disable the caches.
OFF = ("", "0", "off", "none", "false", "no")
#: Compilations faster than this many seconds are not written to the persistent cache (reading an
#: entry back costs a few milliseconds).
MIN_COMPILE_SECONDS = 0.05

_state = {"jax": False, "hypothesis": False}


def cache_dir() -> Optional[pathlib.Path]:
    """The cache folder (see the module docstring), or None when ``DEPTHCRAFT_CACHE_DIR`` disables it.

    The folder is not created here.
    """
    value = os.environ.get(ENV)
    if value is not None:
        if value.strip().lower() in OFF:
            return None
        return pathlib.Path(value).expanduser()
    if os.environ.get("XDG_CACHE_HOME"):
        return pathlib.Path(os.environ["XDG_CACHE_HOME"]) / "depthcraft"
    if sys.platform == "darwin":
        return pathlib.Path.home() / "Library" / "Caches" / "depthcraft"
    if sys.platform == "win32" and os.environ.get("LOCALAPPDATA"):
        return pathlib.Path(os.environ["LOCALAPPDATA"]) / "depthcraft" / "Cache"
    return pathlib.Path.home() / ".cache" / "depthcraft"


def _make(sub: str) -> Optional[pathlib.Path]:
    base = cache_dir()
    if base is None:
        return None
    path = base / sub
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError:  # a read-only home: run without the cache rather than fail
        return None
    return path


def enable_jax_cache() -> Optional[pathlib.Path]:
    """Point JAX's persistent compilation cache at ``<cache>/jax`` (once per process).

    Leaves a cache folder the user configured for JAX (``jax_compilation_cache_dir``,
    ``JAX_COMPILATION_CACHE_DIR``) alone.

    Returns:
        The folder JAX caches compilations in, or None (disabled, or not writable).
    """
    import jax

    if _state["jax"]:
        return _current_jax_dir()
    _state["jax"] = True
    if _current_jax_dir() is not None:
        return _current_jax_dir()
    path = _make("jax")
    if path is None:
        return None
    jax.config.update("jax_compilation_cache_dir", str(path))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", MIN_COMPILE_SECONDS)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    return path


def _current_jax_dir() -> Optional[pathlib.Path]:
    import jax

    value = jax.config.jax_compilation_cache_dir
    return pathlib.Path(value) if value else None


def hypothesis_dir() -> Optional[pathlib.Path]:
    """Point hypothesis's storage (``.hypothesis/``) at ``<cache>/hypothesis`` (once per process).

    Returns:
        The folder, or None when the caches are disabled (hypothesis then keeps its default).
    """
    path = _make("hypothesis")
    if path is not None and not _state["hypothesis"]:
        from hypothesis.configuration import set_hypothesis_home_dir

        set_hypothesis_home_dir(path)
        _state["hypothesis"] = True
    return path
