"""The installed distribution's version: one reader of the package metadata (pyproject.toml's version)."""

from __future__ import annotations


def package_version() -> str:
    """The installed depthcraft version, e.g. ``"0.2.0"`` (``"unknown"`` when not installed)."""
    try:
        from importlib.metadata import version

        return version("depthcraft")
    except Exception:  # pragma: no cover - not installed
        return "unknown"
