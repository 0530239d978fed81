"""Extra CLI commands, each implemented in its own module and registered on the click group here."""

from __future__ import annotations

import click


def register_commands(group: click.Group) -> None:
    """Add ``show``, ``save`` and ``verify-saved`` to the ``depthcraft`` command group."""
    from depthcraft.verify.saved import save_cmd, verify_saved_cmd
    from depthcraft.verify.show import show_cmd

    for cmd in (show_cmd, save_cmd, verify_saved_cmd):
        group.add_command(cmd)
